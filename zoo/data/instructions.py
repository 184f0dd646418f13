"""``data=instructions`` (and ``data=gsm8k``, ``data=gpteacher_codegen``): prompt / response rows for
instruction tuning (``task=sft``), as :class:`TokenWindows` whose targets are the response tokens
only: every prompt token's target is -100, so the next-token LM's loss is the response's.

Rows are read through ``datasets`` as ``data=text`` reads them (:func:`zoo.data.text.load_rows`:
``.jsonl`` / ``.json`` / ``.csv`` / ``.tsv`` / ``.parquet``), in one of three shapes (:data:`FORMATS`),
found from the columns or named with ``data.format=``; each row becomes a conversation, a list of
``{role, content}`` messages, formatted by a Jinja chat template through transformers'
``apply_chat_template``: the tokenizer's own (a Hugging Face folder's ``chat_template``, or the one a
checkpoint's tokenizer carries) where it has one, else a named default (:data:`TEMPLATES`). The
template chosen travels in the tokenizer's state, so that ``zoo eval`` and ``zoo generate chat=true``
format as training did (:func:`chat_prompt_ids`, the one place a prompt is formatted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import Dataset

from zoo.convert.hub import resolve
from zoo.data.base import ZooDataModule
from zoo.data.batches import IGNORE, TokenWindows
from zoo.data.text import ROW_FORMATS, cache_name, load_rows, read_splits, row_sources
from zoo.data.tokenizers import CharTokenizer, HFTokenizer, WordTokenizer, backend, first_token, train_bpe
from zoo.data.wikitext import END_OF_TEXT

# The row shapes: their name (data.format) -> the columns that make a prompt and a response.
FORMATS = {
    "instruction": "instruction (+ input) -> output or response (Alpaca, GPTeacher)",
    "question": "question -> answer (GSM8K)",
    "messages": "messages: a list of {role, content} (system / user / assistant)",
}
ROLES = ("system", "user", "assistant")
# The named default templates (data.template=NAME), used where the tokenizer has no chat template of
# its own. alpaca: Stanford Alpaca's prompt (the preamble, or the conversation's system message, then
# "### Instruction:" / "### Response:" per turn), each response closed by the end-of-text token;
# plain: each turn "role: content" and a newline, a response closed by the end-of-text token instead:
# a few tokens of prompt, for small contexts. Its generation prompt ends at "assistant:", the space
# going with the response's first word (as a BPE tokenizes " word"), so the response starts a token.
TEMPLATES = {
    "alpaca": (
        "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
        "{%- else %}{{ 'Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.' }}{% endif %}"
        "{%- for message in messages if message['role'] != 'system' %}"
        "{%- if message['role'] == 'user' %}"
        "{{ '\\n\\n### Instruction:\\n' + message['content'] + '\\n\\n### Response:\\n' }}"
        "{%- else %}{{ message['content'] + eos_token }}{% endif %}"
        "{%- endfor %}"
    ),
    "plain": (
        "{%- for message in messages %}{{ message['role'] + ': ' + message['content'] }}"
        "{{- eos_token if message['role'] == 'assistant' else '\\n' }}{% endfor %}"
        "{%- if add_generation_prompt %}{{ 'assistant:' }}{% endif %}"
    ),
}
EOS = "<|endoftext|>"  # the end of a response in a tokenizer trained here (data.tokenizer=bpe)
Conversation = list[dict[str, str]]


# --- rows -> conversations --------------------------------------------------------------------

def row_format(columns: list[str], given: str | None, where: str) -> str:
    """The shape of rows with ``columns``: ``given`` (data.format) where set, else the first of
    :data:`FORMATS` whose columns are there; none is refused listing the columns and the shapes."""
    if given is not None and given not in FORMATS:
        raise ValueError(f"data.format={given}: expected one of {', '.join(FORMATS)} (or null: found from the columns)")
    found = [name for name, needs in (("messages", {"messages"}), ("question", {"question", "answer"}),
                                      ("instruction", {"instruction"})) if needs <= set(columns)]
    if name := given or (found[0] if found else None):
        return name
    raise ValueError(f"{where} has columns {columns}, none of the instruction shapes: "
                     + "; ".join(f"{k}: {v}" for k, v in FORMATS.items()))


def conversation(row: dict[str, Any], shape: str, where: str) -> Conversation:
    """One row as messages (``where``: the row, for refusals): an instruction's ``input`` joins its
    user turn after a blank line; a chat must alternate to end with an assistant turn."""
    def text(column: str, optional: bool = False) -> str:
        value = row.get(column)
        if value is None and optional:
            return ""
        if not isinstance(value, str):
            raise ValueError(f"{where}: its {column!r} is {value!r}, not text (data.format={shape})")
        return value

    if shape == "question":
        return [{"role": "user", "content": text("question")}, {"role": "assistant", "content": text("answer")}]
    if shape == "instruction":
        prompt, extra = text("instruction"), text("input", optional=True)
        answer = text("output" if "output" in row else "response")
        return [{"role": "user", "content": f"{prompt}\n\n{extra}" if extra else prompt},
                {"role": "assistant", "content": answer}]
    messages = row.get("messages")
    if (not isinstance(messages, list) or not messages
            or any(not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str)
                   for m in messages)):
        raise ValueError(f"{where}: its 'messages' is not a list of {{role, content}} with roles {list(ROLES)}")
    if messages[-1]["role"] != "assistant":
        raise ValueError(f"{where}: its last message is a {messages[-1]['role']}'s; a conversation to learn from "
                         f"ends with the assistant's response")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def read_conversations(source: str, key: str, shape: str | None, cache_dir: Path) -> list[Conversation]:
    """The conversations of a rows file ``source`` (the value of config key ``key``)."""
    path = Path(source).expanduser()
    if not path.is_file() or path.suffix.lower() not in ROW_FORMATS:
        raise ValueError(f"{key}={source}: expected a rows file ({', '.join(ROW_FORMATS)})")
    rows = load_rows(path, cache_dir)
    shape = row_format(rows.column_names, shape, str(path))
    out = [conversation(row, shape, f"{path} record {i + 1}") for i, row in enumerate(rows)]
    if not out:
        raise ValueError(f"{key}={source} holds no rows")
    return out


# --- the chat template: one place ------------------------------------------------------------

def render(template: str, roles: dict[str, str], messages: Conversation, add_generation_prompt: bool = False) -> str:
    """``messages`` formatted by the Jinja chat ``template`` as transformers' ``apply_chat_template``
    formats them (its ``render_jinja_template``), the ``bos`` / ``eos`` tokens of ``roles`` as the
    template's ``bos_token`` / ``eos_token``; ``add_generation_prompt``: ending where a response starts."""
    from transformers.utils.chat_template_utils import render_jinja_template

    specials = {f"{role}_token": token for role, token in roles.items() if role in ("bos", "eos")}
    rendered, _ = render_jinja_template([messages], chat_template=template,
                                        add_generation_prompt=add_generation_prompt, **specials)
    return rendered[0]


def example(tokenizer: HFTokenizer, messages: Conversation) -> tuple[list[int], list[bool]]:
    """The conversation's ids in ``tokenizer``'s chat template and, for each, whether it is (part of)
    an assistant's response: the text from the end of each turn's generation prompt to the end of its
    response (its closing tokens included, so that the model learns to stop). Found by the characters
    each token spans, so that the ids are what the whole text tokenizes to. A template whose
    conversation does not start with what it renders for a shorter one is refused."""
    template, roles = tokenizer.chat_template, tokenizer.roles
    text = render(template, roles, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start, end = render(template, roles, messages[:i], True), render(template, roles, messages[: i + 1])
        if not (text.startswith(start) and text.startswith(end)):
            raise ValueError("the chat template renders a conversation's turns differently once later turns follow, "
                             "so its responses cannot be found in it: give data.template=alpaca")
        spans.append((len(start), len(end)))
    encoding = tokenizer.tokenizer.encode(text, add_special_tokens=False)
    return encoding.ids, [any(a < e and b > s for s, e in spans) for a, b in encoding.offsets]


def chat_prompt_ids(tokenizer: HFTokenizer, prompt: str) -> list[int]:
    """``prompt`` as one user turn in the tokenizer's chat template, formatted to be answered: what
    the model continues (``zoo generate chat=true``, a ``task=sft`` run's sample)."""
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.encode(render(tokenizer.chat_template, tokenizer.roles, messages, add_generation_prompt=True))


def with_template(tokenizer: CharTokenizer | HFTokenizer | WordTokenizer, folder: str | None,
                  template: str | None) -> HFTokenizer:
    """``tokenizer`` as an :class:`HFTokenizer` carrying the chat template (and its end-of-text
    token as ``eos``): ``template`` (a name of :data:`TEMPLATES`) where given; else the tokenizer's
    own, or a Hugging Face ``folder``'s (its ``tokenizer_config.json`` / ``chat_template.jinja``,
    with its ``bos`` / ``eos`` tokens); else ``alpaca``."""
    roles, own = {}, getattr(tokenizer, "chat_template", None)
    if folder and Path(resolve(folder)).is_dir():
        from transformers import PreTrainedTokenizerFast

        fast = PreTrainedTokenizerFast.from_pretrained(resolve(folder))
        own = own or (fast.get_chat_template() if fast.chat_template else None)
        roles = {role: token for role in ("bos", "eos") if (token := getattr(fast, f"{role}_token", None))}
    hf = tokenizer if isinstance(tokenizer, HFTokenizer) else HFTokenizer(backend(tokenizer))
    roles = {**hf.roles, **roles}
    if "eos" not in roles:
        roles["eos"] = first_token(hf, [EOS, *END_OF_TEXT], "end-of-text", folder or "data.tokenizer")
    chosen = TEMPLATES[template] if template else own or TEMPLATES["alpaca"]
    return HFTokenizer(hf.tokenizer, roles, chosen)


# --- the data module ---------------------------------------------------------------------------

class Examples(Dataset):
    """One split's conversations, each one row: inputs its ids but the last, targets the next id
    where that is a response token, else -100. :meth:`collate` pads a batch to its longest row."""

    def __init__(self, rows: list[tuple[list[int], list[int]]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.rows[i]


class _Collate:
    """A picklable collate (DataLoader workers): rows padded right (inputs ``pad_id``, targets -100).
    A causal model's real tokens never see the padding after them, so no padding mask is needed."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items: list[tuple[list[int], list[int]]]) -> TokenWindows:
        width = max(len(ids) for ids, _ in items)
        inputs = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        targets = torch.full((len(items), width), IGNORE, dtype=torch.long)
        for row, (ids, tgt) in enumerate(items):
            inputs[row, : len(ids)], targets[row, : len(tgt)] = torch.tensor(ids), torch.tensor(tgt)
        return TokenWindows(inputs, targets)


def window(ids: list[int], response: list[bool], block_size: int) -> tuple[list[int], list[int]]:
    """(inputs, targets) of one conversation cut to ``block_size`` inputs: targets the next id at
    response tokens, -100 at prompt tokens."""
    ids, response = ids[: block_size + 1], response[: block_size + 1]
    return ids[:-1], [i if r else IGNORE for i, r in zip(ids[1:], response[1:])]


class Instructions(ZooDataModule):
    """Prompt / response rows as :class:`TokenWindows`, one conversation per row (padded), the loss on
    the responses only.

    Args:
        source: the training rows (relative: also looked for under ``data_dir``).
        format: ``instruction`` | ``question`` | ``messages`` (:data:`FORMATS`), None: from the columns.
        val / test: rows of the validation / test split; None: ``val_fraction`` / ``test_fraction`` of
            ``source``'s rows held out, drawn by ``seed``.
        template: a named template (:data:`TEMPLATES`); None: the tokenizer's own chat template, else
            ``alpaca``.
        tokenizer: ``bpe`` (``vocab_size`` entries learnt from the training rows' texts) or a folder
            holding a ``tokenizer.json`` (its chat template read too); ``tokenizer_from`` (fine-tuning:
            a Hugging Face folder or a zoo checkpoint) replaces it.
        pack: several conversations per window: refused, the decoders have no document mask yet.
        block_size: the longest row (the model's context); longer conversations lose their end,
            and one left with no response token is dropped.
    """

    yields = (TokenWindows,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int, source: str | None = None,
                 format: str | None = None, val: str | None = None, test: str | None = None,
                 val_fraction: float = 0.1, test_fraction: float = 0.1, template: str | None = None,
                 tokenizer: str = "bpe", vocab_size: int = 8192, pack: bool = False, seed: int = 1337,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if pack:
            raise ValueError("data.pack=true: packing several conversations into one window needs a document mask "
                             "that the decoders do not have yet (issue #47): use data.pack=false")
        if not source:
            raise ValueError("data.source is not set: name the training rows, e.g. data.source=train.jsonl "
                             "(instruction / input / output, question / answer, or messages)")
        if tokenizer != "bpe" and not Path(tokenizer).expanduser().is_dir():
            raise ValueError(f"data.tokenizer={tokenizer}: expected bpe, or a folder holding a tokenizer.json")
        if format is not None:
            row_format([], format, "")  # a misspelt name is refused before anything is read
        if template is not None and template not in TEMPLATES:
            raise ValueError(f"data.template={template}: expected one of {', '.join(TEMPLATES)}, or null (the "
                             f"tokenizer's own chat template, else alpaca)")
        self.sources, self.fractions = row_sources(source, val, test, {"val": val_fraction, "test": test_fraction},
                                                   self.data_dir)
        self.format, self.template, self.seed = format, template, seed
        self.tokenizer_kind, self.vocab_size, self.block_size = tokenizer, vocab_size, block_size
        self.splits: dict[str, Examples] = {}
        self.pad_id = 0

    def read(self) -> dict[str, list[Conversation]]:
        """Every split's conversations: read from its source, or held out of the training rows."""
        cache = self.cache_dir / "instructions"
        return read_splits(self.sources, self.fractions, self.seed,
                           lambda source, key: read_conversations(source, key, self.format, cache))

    def own_tokenizer(self, train: list[Conversation]) -> HFTokenizer:
        """BPE learnt from the training conversations as the template formats them (cached by their
        hash), or ``data.tokenizer``'s folder."""
        if self.tokenizer_kind != "bpe":
            return HFTokenizer.from_pretrained_dir(Path(self.tokenizer_kind).expanduser())
        template = TEMPLATES[self.template or "alpaca"]  # a tokenizer trained here has no template of its own
        texts = [render(template, {"eos": EOS}, messages) for messages in train]
        path = self.cache_dir / "instructions" / cache_name(f"bytebpe{self.vocab_size}", EOS, texts)
        return train_bpe(texts, self.vocab_size, path, [EOS], byte_level=True)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        conversations = self.read()
        own = self.tokenizer_or(lambda: self.own_tokenizer(conversations["train"]))
        folder = self.tokenizer_from or (None if self.tokenizer_kind == "bpe" else self.tokenizer_kind)
        self.tokenizer = with_template(own, folder, self.template)
        self.pad_id = self.tokenizer.token_id(self.tokenizer.roles["eos"])  # never a target: padding's are -100
        self.dims = {"vocab_size": self.tokenizer.vocab_size}
        for split, rows in conversations.items():
            windows = [window(*example(self.tokenizer, messages), self.block_size) for messages in rows]
            kept = [w for w in windows if any(t != IGNORE for t in w[1])]
            if len(kept) < len(windows):
                rank_zero_info(f"{split}: {len(windows) - len(kept)} of {len(windows)} conversations have no response "
                               f"token within the context of {self.block_size} tokens, and are left out")
            if not kept:
                raise ValueError(f"no {split} conversation has a response token within the context of "
                                 f"{self.block_size} tokens: give a longer model.net.context, or shorter prompts")
            self.splits[split] = Examples(kept)
        if len(self.splits["train"]) < self.batch_size:
            raise ValueError(f"data.source={self.sources['train']}: {len(self.splits['train'])} training rows, fewer "
                             f"than one batch of data.batch_size={self.batch_size}")

    def dataset(self, split: str) -> Dataset:
        return self.splits[split]

    def collate_fn(self) -> _Collate:
        return _Collate(self.pad_id)

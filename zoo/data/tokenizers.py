"""Tokenizers whose state travels inside checkpoints (a plain dict), so that a
checkpoint alone is enough to decode what its model generates."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

from tokenizers import Tokenizer

from zoo.data.cache import cached
from zoo.terminal import on_terminal


class CharTokenizer:
    """One token per character of a fixed alphabet (nanoGPT's character-level Shakespeare).

    ``specials`` (e.g. ``("<pad>", "<s>", "</s>")`` for sequence-to-sequence targets) take
    the first ids, before the characters; ``token_id`` finds them and ``decode`` leaves
    them out.
    """

    def __init__(self, chars: str, specials: tuple[str, ...] | list[str] = ()):
        self.chars, self.specials = chars, tuple(specials)
        self.index = {c: i + len(self.specials) for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str, specials: tuple[str, ...] = ()) -> "CharTokenizer":
        return cls("".join(sorted(set(text))), specials)

    @property
    def vocab_size(self) -> int:
        return len(self.specials) + len(self.chars)

    def token_id(self, token: str) -> int:
        """The id of a special token or a character."""
        if token in self.specials:
            return self.specials.index(token)
        if token in self.index:
            return self.index[token]
        raise KeyError(f"the tokenizer has no {token!r} token (specials: {list(self.specials)})")

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return [self.index[c] for c in text]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode(self, ids: list[int]) -> str:
        n = len(self.specials)
        return "".join(self.chars[i - n] for i in ids if i >= n)

    def state(self) -> dict:
        return {"kind": "char", "chars": self.chars, "specials": list(self.specials)}


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer (BERT's WordPiece, ...); its state is the
    tokenizer's JSON string. ``encode`` adds no special tokens: the data module places them.

    ``roles`` name the tokens a data pipeline places by role (``{"pad": "<pad>", "eos":
    "</s>", "image": "<image>"}``: the vision-language data's), read as ``pad_id``,
    ``eos_id``, ``image_id`` like :class:`WordTokenizer`'s; they travel in the state, as does
    ``chat_template`` (the Jinja template instruction data formats conversations with,
    :mod:`zoo.data.instructions`), so that a checkpoint's generate and eval format them alike.
    """

    def __init__(self, tokenizer: Tokenizer, roles: dict[str, str] | None = None, chat_template: str | None = None):
        self.tokenizer, self.chat_template = tokenizer, chat_template
        self.roles = dict(roles or {})
        for role, token in self.roles.items():
            self.token_id(token)  # present, or a KeyError that names it

    def with_roles(self, **roles: str) -> "HFTokenizer":
        return HFTokenizer(self.tokenizer, {**self.roles, **roles}, self.chat_template)

    def _role_id(self, role: str) -> int:
        if role not in self.roles:
            raise AttributeError(f"no token has the {role!r} role in this tokenizer (roles: {self.roles})")
        return self.token_id(self.roles[role])

    @property
    def pad_id(self) -> int:
        return self._role_id("pad")

    @property
    def eos_id(self) -> int:
        return self._role_id("eos")

    @property
    def image_id(self) -> int:
        return self._role_id("image")

    @classmethod
    def train_wordpiece(cls, texts: Iterable[str], vocab_size: int, special_tokens: list[str],
                        lowercase: bool = True) -> "HFTokenizer":
        """BERT's WordPiece (BERT normalizer and pre-tokenizer, ``##`` continuations) learnt
        from ``texts``; ``special_tokens`` get the first ids, in order."""
        from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

        tok = Tokenizer(models.WordPiece(unk_token=special_tokens[1] if len(special_tokens) > 1 else "[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                            show_progress=on_terminal())
        tok.train_from_iterator(texts, trainer)
        return cls(tok)

    @classmethod
    def from_pretrained_dir(cls, path: str | Path) -> "HFTokenizer":
        """The tokenizer of a Hugging Face checkpoint directory: ``tokenizer.json``, or
        ``vocab.txt`` (WordPiece; lower-cased unless ``tokenizer_config.json`` says otherwise).
        A ``tokenizer.json``'s own truncation and padding (often "cut and pad at 128") are
        dropped: the data modules cut text into sequences themselves, and kept they would
        silently shorten every document and pad short ones."""
        path = Path(path)
        if (path / "tokenizer.json").is_file():
            file = path / "tokenizer.json"
            try:
                tok = Tokenizer.from_file(str(file))
            except Exception as err:  # tokenizers raises a bare Exception naming no file
                raise ValueError(f"{file} is not a tokenizers file that can be read: {err}") from None
            tok.no_truncation()
            tok.no_padding()
            return cls._some_tokens(cls(tok), file)
        if (path / "vocab.txt").is_file():
            from tokenizers.implementations import BertWordPieceTokenizer

            config = path / "tokenizer_config.json"
            lowercase = json.loads(config.read_text()).get("do_lower_case", True) if config.is_file() else True
            try:
                tok = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=lowercase)._tokenizer
            except Exception as err:  # e.g. "sep_token not found in the vocabulary", naming no file
                raise ValueError(f"{path / 'vocab.txt'} is not a WordPiece vocabulary that can be read: {err}") from None
            return cls._some_tokens(cls(tok), path / "vocab.txt")
        raise FileNotFoundError(f"{path} has neither tokenizer.json nor vocab.txt")

    @staticmethod
    def _some_tokens(tokenizer: "HFTokenizer", file: Path) -> "HFTokenizer":
        if tokenizer.vocab_size == 0:
            raise ValueError(f"{file} holds no token: not the tokenizer of a checkpoint")
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def token_id(self, token: str) -> int:
        i = self.tokenizer.token_to_id(token)
        if i is None:
            raise KeyError(f"the tokenizer has no {token!r} token")
        return i

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def state(self) -> dict:
        return {"kind": "hf", "json": self.tokenizer.to_str(), **({"roles": self.roles} if self.roles else {}),
                **({"chat_template": self.chat_template} if self.chat_template else {})}


def train_bpe(texts: list[str], vocab_size: int, cache: Path, special_tokens: Iterable[str],
              byte_level: bool = False) -> HFTokenizer:
    """A BPE tokenizer trained on ``texts`` (Metaspace pre-tokenizer: decoding restores the
    spaces, so decoded output is detokenized text), cached as JSON at ``cache`` (:func:`cached_tokenizer`). The
    ``special_tokens`` take the first ids, in order; ``<unk>`` must be among them. ``byte_level``: GPT-2's
    byte-level BPE instead (no unknown character; a newline and a word are never one token, so a
    prompt's end and a response's start fall between tokens), its 256 bytes within ``vocab_size``."""
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    def train() -> HFTokenizer:
        tok = Tokenizer(models.BPE(unk_token=None if byte_level else "<unk>"))
        if byte_level:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
        else:
            tok.normalizer = normalizers.NFKC()
            tok.pre_tokenizer = pre_tokenizers.Metaspace()
            tok.decoder = decoders.Metaspace()
        alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_level else []
        tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens),
                                                           initial_alphabet=alphabet, show_progress=on_terminal()))
        return HFTokenizer(tok)

    return cached_tokenizer(cache, train)


def cached_tokenizer(cache: Path, train: Callable[[], HFTokenizer]) -> HFTokenizer:
    """The tokenizer cached as JSON at ``cache`` (checked: :mod:`zoo.data.cache`), or ``train()``'s, cached there."""
    return cached(cache, train, lambda tok: tok.tokenizer.to_str().encode(),
                  lambda payload: HFTokenizer(Tokenizer.from_str(payload.decode())))


class WordTokenizer:
    """One token per word or punctuation mark; ``<name>`` special tokens stay whole.

    The specials come first with fixed ids (``<pad>`` 0, ``<unk>`` 1, ``<eos>`` 2,
    ``<image>`` 3); words outside the vocabulary become ``<unk>``. Decoding joins
    words with spaces (captions and short answers need no more).
    """

    SPECIALS = ("<pad>", "<unk>", "<eos>", "<image>")
    PATTERN = re.compile(r"<\w+>|\w+|[^\w\s]")

    def __init__(self, words: list[str]):
        if tuple(words[: len(self.SPECIALS)]) != self.SPECIALS:
            raise ValueError(f"a word vocabulary must start with {self.SPECIALS}")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad_id, self.unk_id, self.eos_id, self.image_id = range(len(self.SPECIALS))

    @classmethod
    def split(cls, text: str) -> list[str]:
        return cls.PATTERN.findall(text.lower())

    @classmethod
    def from_texts(cls, texts: Iterable[str], min_count: int = 1) -> "WordTokenizer":
        """The vocabulary of ``texts``: words seen at least ``min_count`` times, most frequent first."""
        counts = Counter(w for t in texts for w in cls.split(t))
        words = sorted((w for w, n in counts.items() if n >= min_count and w not in cls.SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls([*cls.SPECIALS, *words])

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(w, self.unk_id) for w in self.split(text)]

    def decode(self, ids: list[int]) -> str:
        """Words up to the first ``<eos>``, padding left out."""
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i != self.pad_id:
                out.append(self.words[i])
        return " ".join(out)

    def state(self) -> dict:
        return {"kind": "word", "words": self.words}


# What a checkpoint's tokenizer may call the tokens the text-pair data (multi30k) and T5's span
# corruption place, for first_token: the zoo's names, then BERT's. T5 has no start token: its
# decoder starts from the pad token (decoder_start_token_id).
TEXT_PAD, TEXT_START, TEXT_END = ("<pad>", "[PAD]"), ("<s>", "[CLS]"), ("</s>", "[SEP]")


def present_ids(tokenizer: HFTokenizer | CharTokenizer, names: Sequence[str]) -> dict[str, int]:
    """The ids of those of ``names`` that ``tokenizer`` has, in the order of ``names``."""
    ids = {}
    for name in names:
        try:
            ids[name] = tokenizer.token_id(name)
        except KeyError:
            continue
    return ids


def first_token(tokenizer: HFTokenizer | CharTokenizer, candidates: Sequence[str], role: str, source) -> str:
    """The first of ``candidates`` that ``tokenizer`` has (the conventions differ: ``</s>``,
    ``<|endoftext|>``, ...); none of them is a ValueError naming the role, the candidates
    and ``source`` (the checkpoint the tokenizer came from)."""
    present = present_ids(tokenizer, candidates)
    if not present:
        raise ValueError(f"the tokenizer of {source} has no {role} token: expected one of {list(candidates)}")
    return next(iter(present))


def tokenizer_from_state(state: dict):
    """Rebuild a tokenizer from what :meth:`state` returned."""
    if state.get("kind") == "char":
        return CharTokenizer(state["chars"], state.get("specials", ()))
    if state.get("kind") == "word":
        return WordTokenizer(state["words"])
    if state.get("kind") == "hf":
        return HFTokenizer(Tokenizer.from_str(state["json"]), state.get("roles"), state.get("chat_template"))
    raise ValueError(f"unknown tokenizer kind {state.get('kind')!r} in checkpoint")


# The roles a Hugging Face tokenizer folder names (``<role>_token`` in tokenizer_config.json), and
# the tokens that play them in the zoo's tokenizers and in the Hugging Face ones they read.
ROLE_TOKENS: dict[str, tuple[str, ...]] = {
    "pad": ("<pad>", "[PAD]"), "unk": ("<unk>", "[UNK]"), "bos": ("<s>", "<|endoftext|>"),
    "eos": ("</s>", "<eos>", "<|endoftext|>"), "mask": ("[MASK]", "<mask>"), "cls": ("[CLS]",), "sep": ("[SEP]",)}


def backend(tokenizer: HFTokenizer | CharTokenizer | WordTokenizer) -> Tokenizer:
    """``tokenizer`` as a ``tokenizers.Tokenizer`` that encodes and decodes as it does: the zoo's
    char and word tokenizers are a word-level vocabulary (specials first, as their ids) behind a
    pre-tokenizer that cuts one token per character, or per word and punctuation mark (lower-cased)."""
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers

    if isinstance(tokenizer, HFTokenizer):
        return Tokenizer.from_str(tokenizer.tokenizer.to_str())  # a copy: the export adds to it
    if isinstance(tokenizer, CharTokenizer):
        tokens, specials = [*tokenizer.specials, *tokenizer.chars], list(tokenizer.specials)
        unk = None  # the zoo refuses a character outside the alphabet; so does a vocabulary without <unk>
        cut = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    elif isinstance(tokenizer, WordTokenizer):
        tokens, specials, unk = tokenizer.words, list(tokenizer.SPECIALS), tokenizer.words[tokenizer.unk_id]
        # WordTokenizer.PATTERN without its <name> branch: special tokens are matched before this runs
        cut = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]"), behavior="removed", invert=True)
    else:
        raise TypeError(f"no tokenizers equivalent of a {type(tokenizer).__name__}")
    out = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=unk))
    if isinstance(tokenizer, WordTokenizer):
        out.normalizer = normalizers.Lowercase()
    out.pre_tokenizer = cut
    if isinstance(tokenizer, CharTokenizer):
        out.decoder = decoders.Fuse()  # characters join without spaces (a word-level model's default)
    out.add_special_tokens(specials)
    return out


def swapped(tokenizer: HFTokenizer | CharTokenizer | WordTokenizer, a: int, b: int) -> HFTokenizer:
    """``tokenizer`` with the ids ``a`` and ``b`` trading tokens (an export that renumbers a model's
    ids trades its rows too). A vocabulary that is not a token -> id table (Unigram's list), or a
    post-processor (it names ids of its own), is refused."""
    data = json.loads(backend(tokenizer).to_str())
    post = data.get("post_processor")
    if post is not None or not isinstance(data["model"].get("vocab"), dict):
        raise ValueError(f"cannot swap ids {a} and {b} of a {data['model']['type']} tokenizer with post-processor "
                         f"{post and post['type']}: only a token -> id vocabulary without a post-processor (which "
                         f"names ids of its own) can be renumbered")
    swap = {a: b, b: a}
    data["model"]["vocab"] = {token: swap.get(i, i) for token, i in data["model"]["vocab"].items()}
    for added in data["added_tokens"]:
        added["id"] = swap.get(added["id"], added["id"])
    roles = tokenizer.roles if isinstance(tokenizer, HFTokenizer) else None
    return HFTokenizer(Tokenizer.from_str(json.dumps(data)), roles)


def role_tokens(tokenizer: HFTokenizer | CharTokenizer | WordTokenizer,
                ids: dict[str, int | None]) -> dict[str, str]:
    """The token of each role (``pad``, ``eos``, ...) ``tokenizer`` has: the run's own ids
    first (``ids``, e.g. ``{"eos": 2}``), then its own role names, then the usual names
    (:data:`ROLE_TOKENS`)."""
    tok = backend(tokenizer)
    roles = {role: tok.id_to_token(i) for role, i in ids.items() if i is not None}
    if isinstance(tokenizer, HFTokenizer):
        roles = {role: token for role, token in tokenizer.roles.items() if role in ROLE_TOKENS} | roles
    for role, names in ROLE_TOKENS.items():
        present = [name for name in names if tok.token_to_id(name) is not None]
        if role not in roles and present:
            roles[role] = present[0]
    return roles


def save_folder(tokenizer: HFTokenizer | CharTokenizer | WordTokenizer, out: Path, roles: dict[str, str],
                model_max_length: int | None, chat_template: str | None = None) -> None:
    """Write ``tokenizer`` as a folder ``AutoTokenizer`` loads: ``tokenizer.json``,
    ``tokenizer_config.json`` (the ``roles``' tokens, ``model_max_length``, a chat template) and
    ``special_tokens_map.json``. A tokenizer with ``[CLS]`` and ``[SEP]`` and no post-processor
    of its own wraps each text in them, as the zoo's masked-LM data does."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = backend(tokenizer)
    if tok.post_processor is None and {"cls", "sep"} <= roles.keys():
        cls, sep = roles["cls"], roles["sep"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
    tok.add_special_tokens(sorted(set(roles.values())))  # already in the vocabulary: marks them special
    given = {"model_max_length": model_max_length, "chat_template": chat_template}
    folder = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                     **{k: v for k, v in given.items() if v is not None},
                                     **{f"{role}_token": token for role, token in roles.items()})
    folder.save_pretrained(out)
    (out / "special_tokens_map.json").write_text(json.dumps({f"{r}_token": t for r, t in roles.items()}, indent=1))

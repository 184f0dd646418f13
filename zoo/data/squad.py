"""SQuAD-format question answering for ``task=qa``: ``data=squad data.source=FILE`` (your own JSON
in SQuAD's layout: ``data`` -> articles -> ``paragraphs`` -> ``context`` and ``qas``, each question
with its ``id``, ``question`` and ``answers`` (``text``, ``answer_start``, the answer's first
character in the context)).

Each question is cut into windows as Hugging Face's ``run_qa.py`` cuts it: the question first (at
most ``max_query_length`` tokens), then as much of the context as fits in ``max_length``, the next
window starting ``doc_stride`` tokens before the last one ended: ``[CLS] q [SEP] c [SEP]`` with
segment ids 0 then 1 (RoBERTa's ``<s> q </s></s> c </s>``). A window's labels are the answer's
first and last token, found through the tokenizer's character offsets, or the ``[CLS]`` (position
0) where the window does not hold the whole answer. Val and test are held out by paragraph (so a
context never is in two splits) unless ``data.val`` / ``data.test`` name files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import QuestionSpans
from zoo.data.labelled import check_tokenizer, encode_pair, own_tokenizer, pair_ids
from zoo.data.text import hold_out, locate
from zoo.data.tokenizers import HFTokenizer

NO_CHARS = (-1, -1)  # the offsets of a position that is not a context token


class Example(NamedTuple):
    """One question of a SQuAD file."""

    id: str
    question: str
    context: str
    answers: list[str]  # the gold texts ([] for a question without an answer: SQuAD 2.0's)
    start: int  # the first answer's first character in the context (-1: none)


class Window(NamedTuple):
    """One row of a batch (:class:`QuestionSpans`)."""

    ids: list[int]
    segments: list[int]
    start: int
    end: int
    offsets: list[tuple[int, int]]
    example: int
    context: str
    answers: list[str]


def read_squad(path: Path, key: str) -> list[list[Example]]:
    """The questions of a SQuAD-format JSON file, grouped by paragraph. What is not in SQuAD's
    layout is refused in one line naming the file (``key``: the config key that named it) and where."""
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
        paragraphs = [p for article in articles for p in article["paragraphs"]]
        out = [[example(qa, p["context"]) for qa in p["qas"]] for p in paragraphs]
    except FileNotFoundError:
        raise FileNotFoundError(f"{key}={path}: no such file") from None
    except (ValueError, KeyError, TypeError, IndexError) as err:  # JSON errors are ValueErrors
        raise ValueError(f"{key}={path} is not a SQuAD-format JSON file ({type(err).__name__}: {err}): expected "
                         f'{{"data": [{{"paragraphs": [{{"context": ..., "qas": [{{"id": ..., "question": ..., '
                         f'"answers": [{{"text": ..., "answer_start": ...}}]}}]}}]}}]}}') from None
    if not any(out):
        raise ValueError(f"{key}={path} holds no question")
    return out


def example(qa: dict[str, Any], context: str) -> Example:
    """A question (a ``qas`` entry) of ``context``; a text where text belongs is checked."""
    answers = qa["answers"]
    texts = [a["text"] for a in answers]
    if not all(isinstance(t, str) for t in [context, qa["question"], *texts]):
        raise TypeError(f"question {qa.get('id')!r}: its context, question and answers must be text")
    return Example(str(qa["id"]), qa["question"], context, texts, int(answers[0]["answer_start"]) if answers else -1)


def answer_tokens(offsets: list[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int] | None:
    """The first and last of ``offsets`` (a window's context tokens) covering the characters
    ``[start_char, end_char)``, or None where the window does not hold them all (``run_qa.py``'s test)."""
    if not offsets or start_char < 0 or not (offsets[0][0] <= start_char and offsets[-1][1] >= end_char):
        return None
    first = max(i for i, (s, _) in enumerate(offsets) if s <= start_char)
    last = min(i for i, (_, e) in enumerate(offsets) if e >= end_char)
    return first, last


class Windows(Dataset):
    """One split's windows."""

    def __init__(self, windows: list[Window]):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> Window:
        return self.windows[i]


class _Collate:
    """Windows padded to the batch's longest (right padding, ``pad_id``); picklable (DataLoader workers)."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items: list[Window]) -> QuestionSpans:
        width = max(len(w.ids) for w in items)
        tokens = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        segments = torch.zeros((len(items), width), dtype=torch.long)
        offsets = torch.full((len(items), width, 2), -1, dtype=torch.long)
        for row, w in enumerate(items):
            tokens[row, : len(w.ids)], segments[row, : len(w.ids)] = torch.tensor(w.ids), torch.tensor(w.segments)
            offsets[row, : len(w.ids)] = torch.tensor(w.offsets)
        padding = torch.arange(width)[None] < torch.tensor([len(w.ids) for w in items])[:, None]
        return QuestionSpans(tokens, padding, segments, torch.tensor([w.start for w in items]),
                             torch.tensor([w.end for w in items]), offsets, torch.tensor([w.example for w in items]),
                             [w.context for w in items], [w.answers for w in items])


class SquadData(ZooDataModule):
    """SQuAD-format questions as :class:`QuestionSpans` batches of windows.

    Args:
        source: the training questions (a SQuAD-format JSON file; relative: also looked for under
            ``data_dir``).
        val / test: questions of the validation / test split; None: ``val_fraction`` /
            ``test_fraction`` of ``source``'s paragraphs held out, drawn by ``seed``.
        max_length: a window's length in tokens (the model's context).
        doc_stride: the tokens a window shares with the one before (``run_qa.py``'s).
        max_query_length: a question's longest, in tokens (longer ones are cut).
        tokenizer: ``wordpiece`` (``vocab_size`` entries learnt from the training contexts and
            questions) or a folder holding a ``tokenizer.json`` / ``vocab.txt``; ``tokenizer_from``
            (fine-tuning) replaces it. It must give character offsets (a ``tokenizers`` tokenizer).
    """

    yields = (QuestionSpans,)

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, max_length: int, source: str | None = None,
                 val: str | None = None, test: str | None = None, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, doc_stride: int = 32, max_query_length: int = 32,
                 tokenizer: str = "wordpiece", vocab_size: int = 8192, seed: int = 1337,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if not source:
            raise ValueError("data.source is not set: name the training questions, a SQuAD-format JSON file "
                             "(data.source=train.json)")
        if max_length - max_query_length - 4 <= doc_stride or doc_stride < 0:
            raise ValueError(f"data.doc_stride={doc_stride}: a window of data.max_length={max_length} tokens holds a "
                             f"question of up to data.max_query_length={max_query_length} and 4 special tokens, "
                             f"leaving the context {max_length - max_query_length - 4}; the stride (the tokens shared "
                             f"with the window before) must be 0 or more and less than that")
        check_tokenizer(tokenizer)
        self.sources = {"train": locate(str(source), self.data_dir)}
        self.sources |= {split: locate(str(s), self.data_dir) for split, s in (("val", val), ("test", test)) if s}
        self.fractions = {split: f for split, f in (("val", val_fraction), ("test", test_fraction))
                          if split not in self.sources}
        self.max_length, self.doc_stride, self.max_query_length = max_length, doc_stride, max_query_length
        self.tokenizer_kind, self.vocab_size, self.seed = tokenizer, vocab_size, seed
        self.splits: dict[str, Windows] = {}
        self.pad_id = 0

    def read(self) -> dict[str, list[Example]]:
        """Every split's questions: read from its file, or held out of the training paragraphs."""
        paragraphs = {split: read_squad(Path(s).expanduser(), f"data.{'source' if split == 'train' else split}")
                      for split, s in self.sources.items()}
        if self.fractions:
            train = paragraphs["train"]
            if len(train) < 3:
                raise ValueError(f"data.source={self.sources['train']} holds {len(train)} paragraph(s), too few to "
                                 f"hold out {sorted(self.fractions)}: give more, or data.val= and data.test=")
            held = hold_out(list(range(len(train))), self.fractions, self.seed, self.sources["train"])
            paragraphs |= {split: [train[i] for i in held[split]] for split in ("train", *self.fractions)}
        return {split: [e for p in ps for e in p] for split, ps in paragraphs.items()}

    def own_tokenizer(self, examples: list[Example]) -> HFTokenizer:
        """WordPiece learnt from the training contexts and questions, or ``data.tokenizer``'s folder."""
        texts = list(dict.fromkeys(e.context for e in examples)) + [e.question for e in examples]
        return own_tokenizer(self.tokenizer_kind, texts, self.vocab_size)

    def windows(self, examples: list[Example], cls: int, sep: int, double_sep: bool) -> list[Window]:
        """Every example's windows (:func:`encode_pair` joins question and context)."""
        backend = self.tokenizer.tokenizer
        questions = backend.encode_batch([e.question for e in examples], add_special_tokens=False)
        contexts = list(dict.fromkeys(e.context for e in examples))  # each paragraph's once
        encoded = dict(zip(contexts, backend.encode_batch(contexts, add_special_tokens=False)))
        out = []
        for i, (ex, question) in enumerate(zip(examples, questions)):
            q, context = question.ids[: self.max_query_length], encoded[ex.context]
            room = self.max_length - len(q) - 3 - double_sep
            begin = 0
            while True:
                ids = context.ids[begin: begin + room]
                offsets = [tuple(o) for o in context.offsets[begin: begin + room]]
                tokens, segments = encode_pair(q, ids, cls, sep, self.max_length, double_sep)
                first = len(q) + 2 + double_sep  # the window's first context token
                span = answer_tokens(offsets, ex.start, ex.start + len(ex.answers[0])) if ex.answers else None
                start, end = (first + span[0], first + span[1]) if span else (0, 0)
                positions = [NO_CHARS] * first + offsets + [NO_CHARS]
                out.append(Window(tokens, segments, start, end, positions, i, ex.context, ex.answers or [""]))
                if begin + room >= len(context.ids):
                    break
                begin += room - self.doc_stride
        return out

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        examples = self.read()
        self.tokenizer = self.tokenizer_or(lambda: self.own_tokenizer(examples["train"]))
        if not isinstance(self.tokenizer, HFTokenizer):
            raise ValueError(f"{self.tokenizer_from}'s tokenizer is a {type(self.tokenizer).__name__}, which gives no "
                             f"character offsets: task=qa needs a tokenizers one (a Hugging Face folder's, or "
                             f"data.tokenizer=wordpiece)")
        cls, sep, self.pad_id, double_sep = pair_ids(self)
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "pad_id": self.pad_id}
        self.splits = {split: Windows(self.windows(split_examples, cls, sep, double_sep))
                       for split, split_examples in examples.items()}
        if len(self.splits["train"]) < self.batch_size:
            raise ValueError(f"data.source={self.sources['train']}: {len(self.splits['train'])} training windows, "
                             f"fewer than one batch of data.batch_size={self.batch_size}")

    def dataset(self, split: str) -> Dataset:
        return self.splits[split]

    def collate_fn(self) -> _Collate:
        return _Collate(self.pad_id)

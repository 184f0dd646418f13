"""Tagged sentences in the CoNLL-2003 format for a token classifier (``task=tag``): ``data=conll2003``,
or your own files with ``data=conll data.source=FILE``.

A file holds one word per line, its columns separated by spaces or tabs: the word first, its tag
last (CoNLL-2003's four columns: word, part of speech, chunk, entity); a blank line ends a sentence,
a ``-DOCSTART-`` line (a document's start) is skipped. Tags in IOB1 (CoNLL-2003's ``eng.train``: ``I-``
starts an entity, ``B-`` only one that follows another of its type) and in IOB2 (``train.txt``: ``B-``
starts each) are read alike and kept as IOB2 (:func:`to_iob2`), the scheme of Hugging Face's
``conll2003`` and what ``seqeval`` scores.

The words of a sentence, joined by spaces, are tokenized as the text they make (what a
``token-classification`` pipeline reads); each word's tag goes on its first sub-token, -100 on its
others and on ``[CLS]`` / ``[SEP]`` (Hugging Face's ``run_ner.py`` with ``label_all_tokens=False``).
The tag names and their count are read from the training sentences (sorted, as ``run_ner.py`` orders
them) and handed to the head as ``${dims.num_classes}`` / ``${dims.class_names}``.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from pathlib import Path

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import IGNORE, TokenTags
from zoo.data.labelled import CLS, PAD, SEP, check_tokenizer, indexed, label_names, own_tokenizer
from zoo.data.text import hold_out, locate
from zoo.data.tokenizers import HFTokenizer

DOCSTART = "-DOCSTART-"
Sentence = tuple[list[str], list[str]]  # (words, their tags)


def read_conll(path: Path, key: str) -> list[Sentence]:
    """The (words, tags) of each sentence of the CoNLL file ``path`` (the value of config key ``key``),
    its tags as IOB2. A line of one column, a file that is not UTF-8 text or holds no sentence is
    refused, naming the file (and the line)."""
    if not path.is_file():
        raise FileNotFoundError(f"{key}={path}: no such file (a CoNLL file: a word and its tag a line)")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(f"{key}={path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    sentences, words, tags = [], [], []
    for number, line in enumerate([*lines, ""], 1):
        fields = line.split()
        if fields and fields[0] != DOCSTART:
            if len(fields) < 2:
                raise ValueError(f"{path} line {number}: {line!r} has no tag (a CoNLL line is a word, "
                                 f"other columns, and its tag last)")
            words.append(fields[0])
            tags.append(fields[-1])
        elif words:
            sentences.append((words, to_iob2(tags, f"{path} line {number - len(tags)}")))
            words, tags = [], []
    if not sentences:
        raise ValueError(f"{key}={path} holds no tagged sentence")
    return sentences


def to_iob2(tags: list[str], where: str) -> list[str]:
    """A sentence's IOB1 or IOB2 tags as IOB2: an ``I-X`` that follows no ``B-X`` / ``I-X`` starts an
    entity, so it becomes ``B-X`` (IOB2 tags stay as they are). A tag that is not ``O``, ``B-X`` or
    ``I-X`` (IOBES's ``S-X``, a bare ``PER``) is refused, naming the sentence's first line (``where``)."""
    out = []
    for i, tag in enumerate(tags):
        if tag != "O" and tag[:2] not in ("B-", "I-"):
            raise ValueError(f"{where}: tag {tag!r} is not IOB (O, B-TYPE or I-TYPE)")
        previous = tags[i - 1] if i else "O"
        starts = tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:])
        out.append("B-" + tag[2:] if starts else tag)
    return out


def encode_words(tokenizer: HFTokenizer, sentences: list[list[str]]) -> list[tuple[list[int], list[int]]]:
    """Each sentence's sub-token ids (its words joined by spaces, tokenized as that text) and, for each
    sub-token, the index of the word it belongs to: the word holding its last character (a byte-level
    BPE token's span starts at the space before its word)."""
    texts = [" ".join(words) for words in sentences]
    out = []
    for words, encoding in zip(sentences, tokenizer.tokenizer.encode_batch(texts, add_special_tokens=False)):
        starts = list(accumulate((len(w) + 1 for w in words[:-1]), initial=0))  # each word's first character
        owner = [bisect_right(starts, max(start, end - 1)) - 1 for start, end in encoding.offsets]
        out.append((encoding.ids, owner))
    return out


def tag_sequence(ids: list[int], owner: list[int], tags: list[int], cls: int, sep: int,
                 length: int) -> tuple[list[int], list[int]]:
    """``[CLS] sub-tokens [SEP]`` cut to ``length`` ids, and their labels: each word's tag on its
    first sub-token, -100 elsewhere (words cut off lose theirs)."""
    room = length - 2
    labels = [tags[w] if i == 0 or owner[i - 1] != w else IGNORE for i, w in enumerate(owner)]
    return [cls, *ids[:room], sep], [IGNORE, *labels[:room], IGNORE]


class Tagged(Dataset):
    """One split's sentences as (ids, labels) items; :func:`collate` pads a batch of them."""

    def __init__(self, items: list[tuple[list[int], list[int]]]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.items[i]


class Collate:
    """A picklable collate (DataLoader workers): items padded right to the batch's longest, the ids
    with ``pad_id``, the labels with -100."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items: list[tuple[list[int], list[int]]]) -> TokenTags:
        ids = [torch.tensor(i) for i, _ in items]
        tokens = pad_sequence(ids, batch_first=True, padding_value=self.pad_id)
        labels: Tensor = pad_sequence([torch.tensor(y) for _, y in items], batch_first=True, padding_value=IGNORE)
        padding = torch.arange(tokens.shape[1])[None] < torch.tensor([len(i) for i in ids])[:, None]
        return TokenTags(tokens, padding, labels)


class TaggedText(ZooDataModule):
    """CoNLL-format sentences with a tag per word, as :class:`TokenTags` batches.

    Args:
        source: the training sentences' file (relative: also looked for under ``data_dir``).
        val / test: the files of the validation / test sentences; None: ``val_fraction`` /
            ``test_fraction`` of ``source``'s sentences held out, drawn by ``seed``.
        tokenizer: ``wordpiece`` (``vocab_size`` entries learnt from the training sentences, case
            kept) or a folder holding a ``tokenizer.json`` / ``vocab.txt``; ``tokenizer_from``
            (fine-tuning) replaces it.
        block_size: the longest sequence (the model's context); longer sentences are cut.
    """

    yields = (TokenTags,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int, source: str | None = None,
                 val: str | None = None, test: str | None = None, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, tokenizer: str = "wordpiece", vocab_size: int = 8192, seed: int = 1337,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if not source:
            raise ValueError("data.source is not set: name the training sentences, a CoNLL file "
                             "(e.g. data.source=train.txt)")
        check_tokenizer(tokenizer)
        self.sources = {"train": locate(str(source), self.data_dir)}
        self.sources |= {split: locate(str(s), self.data_dir) for split, s in (("val", val), ("test", test)) if s}
        self.fractions = {split: f for split, f in (("val", val_fraction), ("test", test_fraction))
                          if split not in self.sources}
        self.tokenizer_kind, self.vocab_size, self.block_size, self.seed = tokenizer, vocab_size, block_size, seed
        self.splits: dict[str, Tagged] = {}
        self.pad_id = 0

    def read(self) -> dict[str, list[Sentence]]:
        """Every split's sentences: read from its file, or held out of the training sentences."""
        sentences = {split: read_conll(Path(s).expanduser(), f"data.{'source' if split == 'train' else split}")
                     for split, s in self.sources.items()}
        if self.fractions:
            train = sentences["train"]
            if len(train) < 3:
                raise ValueError(f"data.source={self.sources['train']} holds {len(train)} sentence(s), too few to "
                                 f"hold out {sorted(self.fractions)}: give more, or data.val= and data.test=")
            held = hold_out(list(range(len(train))), self.fractions, self.seed, self.sources["train"])
            sentences |= {split: [train[i] for i in held[split]] for split in ("train", *self.fractions)}
        return sentences

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        sentences = self.read()
        texts = [" ".join(words) for words, _ in sentences["train"]]
        self.tokenizer = self.tokenizer_or(lambda: own_tokenizer(self.tokenizer_kind, texts, self.vocab_size))
        cls = self.tokenizer.token_id(self.role_token(CLS, "classifier"))
        sep = self.tokenizer.token_id(self.role_token(SEP, "separator"))
        self.pad_id = self.tokenizer.token_id(self.role_token(PAD, "padding"))
        names = label_names([tag for _, tags in sentences["train"] for tag in tags])
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "pad_id": self.pad_id, "num_classes": len(names),
                     "class_names": names}
        for split, split_sentences in sentences.items():
            flat = indexed(names, {split: [tag for _, tags in split_sentences for tag in tags]})[split]
            encoded = encode_words(self.tokenizer, [words for words, _ in split_sentences])
            items, start = [], 0
            for (ids, owner), (words, _) in zip(encoded, split_sentences):
                items.append(tag_sequence(ids, owner, flat[start:start + len(words)], cls, sep, self.block_size))
                start += len(words)
            self.splits[split] = Tagged(items)
        if len(self.splits["train"]) < self.batch_size:
            raise ValueError(f"data.source={self.sources['train']}: {len(self.splits['train'])} training sentences, "
                             f"fewer than one batch of data.batch_size={self.batch_size}")

    def dataset(self, split: str) -> Dataset:
        return self.splits[split]

    def collate_fn(self) -> Collate:
        return Collate(self.pad_id)

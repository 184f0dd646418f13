"""Labelled text rows for a sequence classifier (``task=classify``): ``data=sst2``, ``data=stsb``,
``data=rte``, or your own rows with ``data=labelled data.source=FILE data.column=COL
data.text_pair=COL data.label=COL``; and the same rows as pairs for sentence embeddings
(``task=embed``: :class:`TextPairs`, each text on its own, the label a score or, ``data.label=null``,
none: each second text is its first's positive).

Rows are read through Hugging Face ``datasets`` as ``data=text`` reads them (``zoo.data.text``:
``.jsonl`` / ``.json`` / ``.csv`` / ``.tsv`` / ``.parquet`` files or a ``save_to_disk`` folder). The
label names and their count come from the training split (sorted, as Hugging Face's ``run_glue.py``
orders them) and are handed to the head as ``${dims.num_classes}`` / ``${dims.class_names}``; a
regression (``data.regression=true``, STS-B) has one output and float labels.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import TextLabels, TextPairs
from zoo.data.text import ROW_FORMATS, is_saved_dataset, load_rows, read_splits, row_sources
from zoo.data.tokenizers import HFTokenizer

# Role tokens, Hugging Face's names first: BERT's WordPiece, then RoBERTa's BPE.
CLS, SEP, PAD, UNK, MASK = ("[CLS]", "<s>"), ("[SEP]", "</s>"), ("[PAD]", "<pad>"), ("[UNK]", "<unk>"), ("[MASK]", "<mask>")
QUOTING = {"csv": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}  # data.quoting: how a CSV / TSV file quotes
Row = tuple[str, str | None, Any]  # (text, its pair or None, label)


def read_rows(source: str, key: str, columns: tuple[str, str | None, str | None], quoting: str,
              cache_dir: Path) -> list[Row]:
    """The (text, pair, label) of each row of ``source`` (the value of config key ``key``): a rows file
    or a ``save_to_disk`` folder. A missing column is refused listing those there, a text that is not
    text naming its record (1-based)."""
    import datasets

    path = Path(source).expanduser()
    if is_saved_dataset(path):
        rows = datasets.load_from_disk(str(path))
    else:
        suffix = path.suffix.lower()
        if not path.is_file() or suffix not in ROW_FORMATS:
            raise ValueError(f"{key}={source}: expected a rows file ({', '.join(ROW_FORMATS)}) or a save_to_disk "
                             f"folder")
        quoted = {"quoting": QUOTING[quoting]} if ROW_FORMATS[suffix][0] == "csv" else {}
        rows = load_rows(path, cache_dir, quoted)
    text, pair, label = columns
    for name, column in (("column", text), ("text_pair", pair), ("label", label)):
        if column is not None and column not in rows.column_names:
            raise ValueError(f"{path} has no column {column!r} (data.{name}={column}): its columns are "
                             f"{rows.column_names}")
    texts, pairs = rows[text], rows[pair] if pair else [None] * len(rows)
    labels = rows[label] if label else [None] * len(rows)
    for i, (a, b) in enumerate(zip(texts, pairs)):
        if not isinstance(a, str) or (pair and not isinstance(b, str)):
            raise ValueError(f"{path} record {i + 1}: its text {(a, b) if pair else a!r} is not text "
                             f"(data.column / data.text_pair name the columns of text)")
    if not texts:
        raise ValueError(f"{key}={source} holds no rows")
    return list(zip(texts, pairs, labels))


def label_names(labels: list[Any]) -> list[str]:
    """The classes of a split's labels, sorted (numbers by value): the head's output order."""
    distinct = set(labels)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in distinct)
    return [str(v) for v in sorted(distinct, key=float if numeric else str)]


def indexed(names: list[str], labels: dict[str, list[Any]]) -> dict[str, list[int]]:
    """Each split's labels as indices into ``names`` (the training split's classes); a label of val or
    test that the training rows never have is refused, naming it."""
    index = {name: i for i, name in enumerate(names)}
    for split, split_labels in labels.items():
        unknown = sorted({str(y) for y in split_labels} - set(index))
        if unknown:
            raise ValueError(f"the {split} rows have labels {unknown[:5]} that the training rows never have "
                             f"(those are {names[:10]})")
    return {split: [index[str(y)] for y in split_labels] for split, split_labels in labels.items()}


def check_tokenizer(tokenizer: str) -> None:
    """``data.tokenizer`` is ``wordpiece`` or a folder (a missing one is refused, naming it)."""
    if tokenizer != "wordpiece" and not Path(tokenizer).expanduser().is_dir():
        raise ValueError(f"data.tokenizer={tokenizer}: expected wordpiece, or a folder holding a tokenizer.json")


def own_tokenizer(kind: str, texts: list[str], vocab_size: int) -> HFTokenizer:
    """WordPiece with ``vocab_size`` entries learnt from ``texts`` (case kept), or the folder ``kind``
    (``data.tokenizer``) names."""
    if kind != "wordpiece":
        return HFTokenizer.from_pretrained_dir(Path(kind).expanduser())
    return HFTokenizer.train_wordpiece(texts, vocab_size, [PAD[0], UNK[0], CLS[0], SEP[0], MASK[0]], False)


def encode_pair(first: list[int], second: list[int] | None, cls: int, sep: int, length: int,
                double_sep: bool = False) -> tuple[list[int], list[int]]:
    """``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` cut to ``length`` ids (the longer text loses
    its last token first, Hugging Face's ``longest_first``), and its segment ids (0: a, 1: b).
    ``double_sep``: RoBERTa's pair, ``<s> a </s></s> b </s>``."""
    first, second = list(first), None if second is None else list(second)
    room = length - (2 if second is None else 3 + double_sep)
    while len(first) + len(second or []) > room:
        (first if second is None or len(first) >= len(second) else second).pop()
    ids = [cls, *first, sep]
    segments = [0] * len(ids)
    if second is not None:
        ids += [sep] * double_sep + [*second, sep]
        segments += [0] * double_sep + [1] * (len(second) + 1)
    return ids, segments


def pair_ids(data: ZooDataModule) -> tuple[int, int, int, bool]:
    """The classifier, separator and padding ids of ``data``'s tokenizer (its own names of them), and
    whether it joins a pair RoBERTa's way (``<s> a </s></s> b </s>``: its classifier token is ``<s>``)."""
    cls_token = data.role_token(CLS, "classifier")
    tokenizer = data.tokenizer
    return (tokenizer.token_id(cls_token), tokenizer.token_id(data.role_token(SEP, "separator")),
            tokenizer.token_id(data.role_token(PAD, "padding")), cls_token == "<s>")


class Encoded(Dataset):
    """One split's rows as (ids, segments, label) items, which :func:`collate` pads, or as (first ids,
    second ids, score or None) items, which :func:`collate_pairs` pads (``labels`` None: no scores)."""

    def __init__(self, ids: list[list[int]], other: list[list[int]], labels: Tensor | None):
        self.ids, self.other, self.labels = ids, other, labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[list[int], list[int], Tensor | None]:
        return self.ids[i], self.other[i], None if self.labels is None else self.labels[i]


def pad(rows: list[list[int]], value: int) -> tuple[Tensor, Tensor]:
    """Rows of ids (or segment ids) right-padded with ``value`` to the longest, and the padding mask
    (True at real tokens)."""
    width = max(map(len, rows))
    tokens = torch.full((len(rows), width), value, dtype=torch.long)
    for i, ids in enumerate(rows):
        tokens[i, : len(ids)] = torch.tensor(ids)
    return tokens, torch.arange(width)[None] < torch.tensor([len(ids) for ids in rows])[:, None]


def collate(items: list[tuple[list[int], list[int], Tensor]], pad_id: int) -> TextLabels:
    """Items padded to the batch's longest (right padding, ``pad_id``; segments 0 there)."""
    tokens, padding = pad([ids for ids, _, _ in items], pad_id)
    segments, _ = pad([seg for _, seg, _ in items], 0)
    return TextLabels(tokens, padding, segments, torch.stack([label for _, _, label in items]))


def collate_pairs(items: list[tuple[list[int], list[int], Tensor | None]], pad_id: int) -> TextPairs:
    """(first ids, second ids, score or None) items -> a :class:`TextPairs` batch, each side padded on its own."""
    first, second = pad([a for a, _, _ in items], pad_id), pad([b for _, b, _ in items], pad_id)
    scores = None if items[0][2] is None else torch.stack([score for _, _, score in items])
    return TextPairs(*first, *second, scores)


class _Collate:
    """A picklable collate (DataLoader workers) holding the padding id and the batch type."""

    def __init__(self, pad_id: int, pairs: bool = False):
        self.pad_id, self.pairs = pad_id, pairs

    def __call__(self, items: list) -> TextLabels | TextPairs:
        return (collate_pairs if self.pairs else collate)(items, self.pad_id)


class LabelledText(ZooDataModule):
    """Rows of text (and an optional second text) with a label, as :class:`TextLabels` batches; or
    pairs of texts with an optional score, as :class:`TextPairs` batches (each text ``[CLS] a [SEP]``).

    Args:
        source: the training rows (a file or a save_to_disk folder; relative: also looked for under
            ``data_dir``).
        column / text_pair / label: the columns of the text, of the second text (None: one sentence)
            and of the label (None: pairs without a score, for :class:`TextPairs` only).
        val / test: rows of the validation / test split; None: ``val_fraction`` / ``test_fraction`` of
            ``source``'s rows held out, drawn by ``seed``.
        regression: the label is a score (one output, mean squared error), not a class.
        multi_label: the label is a set of classes: a list of names, or text of names split at
            ``label_sep`` (e.g. ``|``); each class a yes or no of its own (:meth:`label_sets`).
        quoting: ``csv`` (a field in quotes may hold the delimiter, as spreadsheet tools write) or
            ``none`` (a quote is a character: GLUE's TSV files).
        tokenizer: ``wordpiece`` (``vocab_size`` entries learnt from the training texts) or a folder
            holding a ``tokenizer.json`` / ``vocab.txt``; ``tokenizer_from`` (fine-tuning) replaces it.
        block_size: the longest sequence (the model's context).
    """

    yields = (TextLabels, TextPairs)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int, source: str | None = None,
                 column: str = "sentence", text_pair: str | None = None, label: str | None = "label",
                 val: str | None = None, test: str | None = None, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, regression: bool = False, quoting: str = "csv",
                 tokenizer: str = "wordpiece", vocab_size: int = 8192, seed: int = 1337,
                 tokenizer_from: str | None = None, num_workers: int = 0, multi_label: bool = False,
                 label_sep: str | None = None):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if not source:
            raise ValueError("data.source is not set: name the training rows, e.g. data.source=train.tsv "
                             "data.column=sentence data.label=label")
        if quoting not in QUOTING:
            raise ValueError(f"data.quoting={quoting}: expected one of {', '.join(QUOTING)}")
        check_tokenizer(tokenizer)
        self.sources, self.fractions = row_sources(source, val, test, {"val": val_fraction, "test": test_fraction},
                                                   self.data_dir)
        self.columns = (column, text_pair, label)
        self.regression, self.quoting, self.seed = regression, quoting, seed
        self.multi_label, self.label_sep = multi_label, label_sep
        self.tokenizer_kind, self.vocab_size, self.block_size = tokenizer, vocab_size, block_size
        self.splits: dict[str, Encoded] = {}
        self.pad_id = 0

    def read(self) -> dict[str, list[Row]]:
        """Every split's rows: read from its source, or held out of the training rows."""
        return read_splits(self.sources, self.fractions, self.seed, self.rows_of)

    def rows_of(self, source: str, key: str) -> list[Row]:
        """The (text, pair, label) rows of one split's ``source`` (config key ``key``); a named data set
        whose files have a layout of their own reads them its way (:mod:`zoo.data.downstream`)."""
        return read_rows(source, key, self.columns, self.quoting, self.cache_dir / "labelled")

    def own_tokenizer(self, rows: list[Row]) -> HFTokenizer:
        """WordPiece learnt from the training texts, or the folder ``data.tokenizer`` names."""
        return own_tokenizer(self.tokenizer_kind, [t for a, b, _ in rows for t in (a, b) if t], self.vocab_size)

    def labels(self, rows: dict[str, list[Row]]) -> tuple[list[str] | None, dict[str, Tensor]]:
        """The class names (None for a regression) and each split's labels as a tensor; a label of val
        or test that the training rows never have is refused, naming it."""
        if self.multi_label:
            return self.label_sets(rows)
        if self.regression:
            return None, self.scores(rows)
        if self.columns[2] is None:
            raise ValueError("data.label=null: a classifier needs labels; name their column, e.g. data.label=label")
        names = label_names([y for *_, y in rows["train"]])
        indices = indexed(names, {split: [y for *_, y in split_rows] for split, split_rows in rows.items()})
        return names, {split: torch.tensor(split_indices) for split, split_indices in indices.items()}

    def scores(self, rows: dict[str, list[Row]]) -> dict[str, Tensor]:
        """Each split's labels as float scores (a regression's, a pair's similarity)."""
        try:
            return {split: torch.tensor([float(y) for *_, y in r]) for split, r in rows.items()}
        except (TypeError, ValueError) as err:
            raise ValueError(f"data.label={self.columns[2]}: a score is not a number ({err}); a classifier's "
                             f"labels need data.regression=false, pairs without scores data.label=null") from None

    def pairs(self, rows: dict[str, list[Row]], cls: int, sep: int) -> dict[str, Encoded]:
        """Each split's rows as pairs of texts, each ``[CLS] text [SEP]`` on its own, with their scores
        (None where ``data.label=null``)."""
        if self.columns[1] is None:
            raise ValueError("data.text_pair is not set: pairs of texts (anchor, positive) need a second column, "
                             "e.g. data.text_pair=sentence2")
        scores = self.scores(rows) if self.columns[2] else dict.fromkeys(rows)
        encoded = {}
        for split, split_rows in rows.items():
            sides = [[encode_pair(ids, None, cls, sep, self.block_size)[0]
                      for ids in self.tokenizer.encode_batch([row[i] for row in split_rows])] for i in (0, 1)]
            encoded[split] = Encoded(*sides, scores[split])
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "pad_id": self.pad_id}
        return encoded

    def names_of(self, label: Any) -> list[Any]:
        """A multi-label row's class names: a list as it is, text split at ``label_sep`` (an empty field: none)."""
        if isinstance(label, (list, tuple)):
            return list(label)
        if self.label_sep and (label is None or isinstance(label, str)):
            return [name.strip() for name in (label or "").split(self.label_sep) if name.strip()]
        raise ValueError(f"data.multi_label=true: the label {label!r} (data.label={self.columns[2]}) is not a list of "
                         f"names; text of several names needs data.label_sep= (e.g. data.label_sep='|')")

    def label_sets(self, rows: dict[str, list[Row]]) -> tuple[list[str], dict[str, Tensor]]:
        """Multi-label rows: the class names (every name of the training rows, sorted) and each split's
        labels as (rows, classes) 0/1 floats; a val or test name the training rows never have is refused."""
        sets = {split: [self.names_of(y) for *_, y in split_rows] for split, split_rows in rows.items()}
        names = label_names([name for names in sets["train"] for name in names])
        index = {name: i for i, name in enumerate(names)}
        out = {}
        for split, split_sets in sets.items():
            unknown = sorted({str(n) for names in split_sets for n in names} - set(index))
            if unknown:
                raise ValueError(f"the {split} rows have labels {unknown[:5]} that the training rows never have "
                                 f"(those are {names[:10]})")
            out[split] = torch.zeros(len(split_sets), len(names))
            for row, row_names in enumerate(split_sets):
                out[split][row, [index[str(n)] for n in row_names]] = 1.0
        return names, out

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        rows = self.read()
        self.tokenizer = self.tokenizer_or(lambda: self.own_tokenizer(rows["train"]))
        cls, sep, self.pad_id, double_sep = pair_ids(self)
        if self.batch_type is TextPairs:
            self.splits = self.pairs(rows, cls, sep)
        else:
            self.splits = self.sentences(rows, cls, sep, double_sep)
        if len(self.splits["train"]) < self.batch_size:
            raise ValueError(f"data.source={self.sources['train']}: {len(self.splits['train'])} training rows, fewer "
                             f"than one batch of data.batch_size={self.batch_size}")

    def sentences(self, rows: dict[str, list[Row]], cls: int, sep: int, double_sep: bool) -> dict[str, Encoded]:
        """Each split's rows as one sequence (a sentence, or a pair joined), with their labels."""
        names, labels = self.labels(rows)
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "pad_id": self.pad_id,
                     "num_classes": 1 if names is None else len(names), "class_names": names,
                     "multi_label": self.multi_label}
        encoded = {}
        for split, split_rows in rows.items():
            firsts = self.tokenizer.encode_batch([a for a, _, _ in split_rows])
            seconds = self.tokenizer.encode_batch([b for _, b, _ in split_rows]) if self.columns[1] else None
            pairs = [encode_pair(a, None if seconds is None else seconds[i], cls, sep, self.block_size, double_sep)
                     for i, a in enumerate(firsts)]
            encoded[split] = Encoded([e[0] for e in pairs], [e[1] for e in pairs], labels[split])
        return encoded

    def dataset(self, split: str) -> Dataset:
        return self.splits[split]

    def collate_fn(self) -> _Collate:
        return _Collate(self.pad_id, pairs=self.batch_type is TextPairs)

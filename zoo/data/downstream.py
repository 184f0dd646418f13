"""Readers of the named downstream files whose layout no rows reader takes, as :class:`LabelledText`
subclasses that read a split their way (:meth:`LabelledText.rows_of`) and do the rest as it does:
TREC's question files (``data=trec``) and the STS Benchmark's own scored files (``data=stsb``'s test
split, ``sts-test.csv``)."""

from __future__ import annotations

import warnings
from pathlib import Path

from zoo.data.labelled import LabelledText, Row

GRANULARITIES = ("coarse", "fine")  # TREC's 6 coarse classes (DESC, ENTY, ...) or its 50 fine ones (DESC:manner)


def source_file(source: str, key: str) -> Path:
    """``source`` as a file, or a one-line refusal naming ``key``."""
    path = Path(source).expanduser()
    if not path.is_file():
        raise ValueError(f"{key}={source}: no such file")
    return path


def decoded(path: Path) -> str:
    """A text file's contents: UTF-8, or latin-1 where its bytes are not UTF-8 (the TREC files as first
    published hold a few latin-1 bytes), which a warning says."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        warnings.warn(f"{path} is not UTF-8 (byte {raw[err.start]:#x} at offset {err.start}): read as latin-1",
                      stacklevel=2)
        return raw.decode("latin-1")


def read_trec(path: Path, granularity: str) -> list[Row]:
    """TREC's ``COARSE:fine question`` lines as (question, None, label): the label ``COARSE`` or, fine,
    ``COARSE:fine`` (50 classes: the fine names repeat across coarse ones, ``other`` in five)."""
    rows = []
    for n, line in enumerate(decoded(path).splitlines(), 1):
        if not line.strip():
            continue
        label, _, question = line.partition(" ")
        coarse, colon, fine = label.partition(":")
        if not (colon and coarse and fine and question.strip()):
            raise ValueError(f"{path} line {n}: expected 'COARSE:fine question', got {line[:60]!r}")
        rows.append((question.strip(), None, coarse if granularity == "coarse" else label))
    return rows


def read_sts(path: Path) -> list[Row]:
    """The STS Benchmark's ``sts-{train,dev,test}.csv`` (tab-separated despite the name, no header): genre,
    file, year, id, score, sentence1, sentence2, and, its readme says, optionally license fields after
    sentence2, left out here. Quotes are characters (as GLUE's TSVs: data.quoting=none)."""
    rows = []
    for n, line in enumerate(decoded(path).splitlines(), 1):
        fields = line.split("\t")
        if len(fields) < 7:
            raise ValueError(f"{path} line {n}: {len(fields)} tab-separated fields; the STS Benchmark's lines have 7 "
                             f"(genre, file, year, id, score, sentence1, sentence2), license fields after")
        try:
            rows.append((fields[5], fields[6], float(fields[4])))
        except ValueError:
            raise ValueError(f"{path} line {n}: the score (field 5) {fields[4]!r} is not a number") from None
    return rows


class TrecQuestions(LabelledText):
    """``data=trec``: TREC question classification (Li and Roth 2002) from its own files
    (``train_5500.label``, ``TREC_10.label``), one question a line under its ``COARSE:fine`` label;
    ``granularity``: ``coarse`` (6 classes) or ``fine`` (50, labels ``COARSE:fine``)."""

    def __init__(self, *args, granularity: str = "coarse", **kwargs):
        if granularity not in GRANULARITIES:
            raise ValueError(f"data.granularity={granularity}: expected one of {', '.join(GRANULARITIES)}")
        super().__init__(*args, **kwargs)
        self.granularity = granularity

    def rows_of(self, source: str, key: str) -> list[Row]:
        return read_trec(source_file(source, key), self.granularity)


class STSBenchmark(LabelledText):
    """``data=stsb``: GLUE's STS-B TSVs (train, dev) as :class:`LabelledText` reads them, and the STS
    Benchmark's own ``.csv`` files (its scored test set, which GLUE's test lacks) by :func:`read_sts`."""

    def rows_of(self, source: str, key: str) -> list[Row]:
        if Path(source).suffix.lower() == ".csv":
            return read_sts(source_file(source, key))
        return super().rows_of(source, key)

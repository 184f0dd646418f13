"""``data=pairs``: your own source / target text pairs for an encoder-decoder (Transformer, T5, BART):
translation, summarisation, any text-to-text task.

Each row of ``.jsonl`` / ``.json`` / ``.csv`` / ``.tsv`` / ``.parquet`` files (a file, a folder or a
glob of them) or of a ``datasets.save_to_disk`` folder is one pair: its ``data.source_column`` is
what the encoder reads, its ``data.target_column`` what the decoder learns to write. Rows are read
through Hugging Face ``datasets`` as ``data=text`` reads them (:func:`zoo.data.text.load_rows`), and
batched as Multi30k's pairs are (:class:`~zoo.data.batches.SequencePairs` of similar lengths, the
target framed by its start and end tokens), so the seq2seq objective (teacher-forced cross-entropy
on the target; BLEU of its decoding at test time) reads them unchanged.
"""

from __future__ import annotations

from pathlib import Path

from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import SequencePairs
from zoo.data.checks import held_out_fractions
from zoo.data.multi30k import Collate, LengthBuckets, Pairs, encode_pairs, pair_ids
from zoo.data.text import (ROW_FORMATS, SPLITS, hold_out, is_saved_dataset, load_rows, locate,
                           named_tokenizer, require_columns, source_files, tokenizer_choice)
from zoo.data.tokenizers import CharTokenizer, HFTokenizer

ROLES = ("<pad>", "<s>", "</s>")  # the specials of a tokenizer trained here (Multi30k's): pad, start, end
Pair = tuple[str, str]


def read_pairs(source: str, key: str, columns: tuple[str, str], cache_dir: Path) -> list[Pair]:
    """The (source text, target text) of every row of ``source`` (the value of config key ``key``):
    rows files (a file, a folder or a glob of them) or a ``save_to_disk`` folder. A file that is not
    rows, a missing column (listing those there), a record whose text is empty, missing or not text
    (naming its number) and a source of no rows are refused in one line."""
    import datasets

    path = Path(source).expanduser()
    if is_saved_dataset(path):
        tables = [(datasets.load_from_disk(str(path)), path)]
    else:
        files = source_files(source, key)
        if other := [f for f in files if f.suffix.lower() not in ROW_FORMATS]:
            raise ValueError(f"{key}={source}: {other[0]} is not a rows file: expected {', '.join(ROW_FORMATS)} "
                             f"files or a save_to_disk folder")
        tables = [(load_rows(f, cache_dir), f) for f in files]
    pairs = [pair for rows, where in tables for pair in row_pairs(rows, columns, where)]
    if not pairs:
        raise ValueError(f"{key}={source} holds no rows")
    return pairs


def row_pairs(rows, columns: tuple[str, str], where: Path) -> list[Pair]:
    """The (source, target) texts of ``rows`` (of file ``where``), each checked: text, not empty."""
    for column, name in zip(columns, ("source_column", "target_column")):
        require_columns(rows, {f"data.{name}": column}, where)
    pairs = list(zip(rows[columns[0]], rows[columns[1]]))
    for i, pair in enumerate(pairs):
        for column, text in zip(columns, pair):
            if text is None or (isinstance(text, str) and not text.strip()):
                raise ValueError(f"{where} record {i + 1}: its {column!r} is empty: every pair needs a source "
                                 f"and a target text")
            if not isinstance(text, str):
                raise ValueError(f"{where} record {i + 1}: its {column!r} is {text!r}, not text "
                                 f"(data.source_column / data.target_column name the columns of text)")
    return pairs


class TextPairs(ZooDataModule):
    """Your (source, target) text pairs as :class:`SequencePairs` batches of similar lengths.

    Args:
        source: the training rows: a rows file, a folder or a glob of them, or a save_to_disk folder
            (relative: also looked for under ``data_dir``).
        source_column / target_column: the columns of the text read and of the text written.
        val / test: rows of the validation / test split; None: ``val_fraction`` / ``test_fraction``
            of ``source``'s rows held out, drawn by ``seed``.
        prefix: text put before every source (T5's task prefix, e.g. ``"summarize: "``).
        tokenizer: ``bpe`` (default) or ``wordpiece`` learnt from the training pairs' sources and
            targets together (``vocab_size`` entries, cached under ``cache_dir`` by their hash), ``char``,
            or a folder holding a ``tokenizer.json``; one vocabulary for both sides, as the encoder-
            decoders share one embedding table. ``tokenizer_from`` (fine-tuning) replaces it.
        block_size: the model's context: longer sources are cut to it, longer targets to it less
            their start / end token, with a warning counting them.
    """

    yields = (SequencePairs,)
    batched = False  # each item of LengthBuckets is one rank's batch

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int, source: str | None = None,
                 source_column: str = "source", target_column: str = "target", val: str | None = None,
                 test: str | None = None, val_fraction: float = 0.1, test_fraction: float = 0.1, prefix: str = "",
                 tokenizer: str = "bpe", vocab_size: int = 8000, seed: int = 1337, tokenizer_from: str | None = None,
                 num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if not source:
            raise ValueError("data.source is not set: data=pairs reads your pairs from data.source=FILE (.jsonl / .csv "
                             "/ .tsv / .parquet rows, or a save_to_disk folder) with data.source_column= and "
                             "data.target_column=")
        self.fractions = held_out_fractions(val_fraction, test_fraction)
        self.tokenizer_kind = tokenizer_choice(tokenizer)
        self.sources = {"train": locate(str(source), self.data_dir)}
        self.sources |= {split: locate(str(s), self.data_dir) for split, s in (("val", val), ("test", test)) if s}
        self.columns = (source_column, target_column)
        self.prefix, self.vocab_size, self.block_size = prefix, vocab_size, block_size
        self.seed = self.order_seed = seed
        self.pairs: dict[str, Pairs] = {}

    def read(self) -> dict[str, list[Pair]]:
        """Every split's pairs: read from its source, or held out of the training rows."""
        cache = self.cache_dir / "pairs"
        rows = {split: read_pairs(s, f"data.{'source' if split == 'train' else split}", self.columns, cache)
                for split, s in self.sources.items()}
        missing = {split: f for split, f in self.fractions.items() if split not in rows}
        if missing:
            rows |= hold_out(rows["train"], missing, self.seed, self.sources["train"], by_lines=False)
        return {split: rows[split] for split in SPLITS}

    def own_tokenizer(self, rows: dict[str, list[Pair]]) -> CharTokenizer | HFTokenizer:
        """The tokenizer ``data.tokenizer`` names, of the sources (with the prefix) and targets together."""
        texts = {split: [text for s, t in pairs for text in (self.prefix + s, t)] for split, pairs in rows.items()}
        return named_tokenizer(self.tokenizer_kind, texts, self.vocab_size, ROLES, self.cache_dir / "pairs")

    def setup(self, stage: str | None = None) -> None:
        if self.pairs:
            return
        rows = self.read()
        self.tokenizer = self.tokenizer_or(lambda: self.own_tokenizer(rows))
        for split, pairs in rows.items():
            sources, targets = (list(side) for side in zip(*pairs))
            self.pairs[split] = encode_pairs(self.tokenizer, sources, targets, self.prefix, self.block_size,
                                             f"data=pairs {split}", f"the model's context, data.block_size={self.block_size}")
        pad, bos, eos = pair_ids(self.tokenizer, self.tokenizer_from or f"data.tokenizer={self.tokenizer_kind}")
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "pad_id": pad, "bos_id": bos, "eos_id": eos}

    def dataset(self, split: str) -> Dataset:
        return LengthBuckets(self.pairs[split], self.rank_batch_size, self.seed, shuffle=split == "train")

    def collate_fn(self) -> Collate:
        return Collate(self.dims["pad_id"], self.dims["bos_id"], self.dims["eos_id"])

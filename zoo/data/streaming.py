"""``data=text data.streaming=true``: a source read as a stream through ``datasets``
(``load_dataset(..., streaming=True)``: :func:`zoo.data.text.stream_rows`), for a corpus that does not
fit on disk: ``hf:NAME[@config]`` on the Hugging Face Hub, or local files. Nothing is read whole, counted or cached: documents are
tokenized as they arrive and packed into windows of ``block_size`` (next-token language models).

What a stream cannot do as a file does, and how it is done instead:

- the held-out splits: a document goes to val or test by a seeded hash of its text
  (:func:`split_of`: about ``val_fraction`` / ``test_fraction`` of the documents, the same split
  wherever and whenever it is read; no count needed), unless ``data.val`` / ``data.test`` name
  sources (an ``hf:`` source's val and test are its ``validation`` and ``test`` splits);
- the tokenizer: ``bpe`` / ``wordpiece`` learn from the first ``data.tokenizer_docs`` training
  documents, or a tokenizer folder is used as it is (``char`` is refused: a character first seen
  later would have no id);
- the order: the stream's own, each rank reading its share of the files (or of the documents,
  where the files do not divide over the ranks: ``datasets.distributed.split_dataset_by_node``) and
  each DataLoader worker its share of that (``datasets`` splits the files over the workers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset

from zoo.data.batches import TokenWindows

def split_of(text: str, seed: int, fractions: dict[str, float]) -> str:
    """The split a streamed document belongs to: ``val`` / ``test`` with the probabilities of
    ``fractions`` (those not given a source of their own), drawn by a hash of ``seed`` and its text."""
    digest = hashlib.blake2b(text.encode(), digest_size=8, key=str(seed).encode()).digest()
    u, edge = int.from_bytes(digest, "little") / 2**64, 0.0
    for split, fraction in fractions.items():
        edge += fraction
        if u < edge:
            return split
    return "train"


class StreamedWindows(IterableDataset):
    """Windows of ``block_size`` of the token stream ``<eod> doc <eod> doc ...`` of the documents of
    ``rows`` (their ``column``) that belong to ``split`` (:func:`split_of` over ``fractions``; all of
    them where ``fractions`` is empty), each predicting the next ``block_size`` tokens; the stream's
    last partial window is left out. ``where`` names the source in a refusal."""

    def __init__(self, rows, column: str, where: str, split: str, fractions: dict[str, float], seed: int,
                 tokenizer, eod: int, block_size: int):
        self.rows, self.column, self.where, self.split = rows, column, where, split
        self.fractions, self.seed, self.tokenizer, self.eod, self.block_size = fractions, seed, tokenizer, eod, block_size

    def documents(self) -> Iterator[str]:
        """The split's documents, as they arrive (empty ones left out)."""
        for i, row in enumerate(self.rows):
            text = row.get(self.column) if isinstance(row, dict) else None
            if not isinstance(text, str):
                held = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise ValueError(f"{self.where} record {i + 1} of this stream: its {self.column!r} is not text "
                                 f"(data.column names the column of text; the record holds {held})")
            if text and (not self.fractions or split_of(text, self.seed, self.fractions) == self.split):
                yield text

    def __iter__(self) -> Iterator[TokenWindows]:
        ids = [self.eod]
        for text in self.documents():
            ids += [*self.tokenizer.encode(text), self.eod]
            while len(ids) > self.block_size:
                chunk = torch.tensor(ids[: self.block_size + 1])
                del ids[: self.block_size]
                yield TokenWindows(chunk[:-1], chunk[1:])

    def for_rank(self, rank: int, world_size: int) -> "StreamedWindows":
        """The share of the stream rank ``rank`` of ``world_size`` reads."""
        if world_size == 1:
            return self
        from datasets.distributed import split_dataset_by_node

        share = StreamedWindows.__new__(StreamedWindows)
        share.__dict__ = {**self.__dict__, "rows": split_dataset_by_node(self.rows, rank, world_size)}
        return share

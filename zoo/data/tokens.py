"""``data=tokens``: pre-tokenized token shards (nanoGPT's ``prepare.py`` bins), as ``python -m zoo
prepare`` writes them: ``train.bin`` / ``val.bin`` / ``test.bin``, each a split's token stream
(``<eod> doc <eod> doc ... <eod>``, :func:`zoo.data.text.token_stream`) as raw ``uint16`` ids
(``uint32`` for a vocabulary past 65,536), and ``meta.json`` (the tokenizer, the dtype, the token
counts, a hash of the ids). Training reads each window from its file (:class:`ShardWindows`) in the
seeded global order: a corpus larger than memory is never loaded whole, the memory a run holds does
not grow with the corpus, and a resumed run continues at the next window.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import TokenWindows
from zoo.data.tokenizers import tokenizer_from_state

FORMAT = "zoo token shards 1"
SPLITS = ("train", "val", "test")


def shard_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned integer that holds every id of a ``vocab_size`` vocabulary."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def read_meta(folder: Path) -> dict:
    """``folder/meta.json``, checked: its format, and each split's file of ``tokens`` ids of its dtype."""
    path = folder / "meta.json"
    if not path.is_file():
        raise ValueError(f"data.source={folder} holds no meta.json: not a folder `python -m zoo prepare` wrote "
                         f"(or one it did not finish)")
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not JSON: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format') if isinstance(meta, dict) else None!r}, expected {FORMAT!r}")
    if meta.get("dtype") not in ("uint16", "uint32"):
        raise ValueError(f"{path}: dtype {meta.get('dtype')!r}, expected uint16 or uint32")
    for split in SPLITS:
        file, tokens = folder / f"{split}.bin", meta.get("tokens", {}).get(split)
        size = np.dtype(meta["dtype"]).itemsize * tokens if isinstance(tokens, int) else None
        if not file.is_file() or file.stat().st_size != size:
            held = file.stat().st_size if file.is_file() else "no file"
            raise ValueError(f"{file}: {held} bytes, but {path} says {tokens} {meta['dtype']} tokens ({size} bytes): "
                             f"the shards are incomplete; prepare them again")
    return meta


class ShardWindows(Dataset):
    """A token shard cut in order into windows of ``block_size`` (as :class:`zoo.data.windows.StreamWindows`
    cuts a stream in memory): item i is ``TokenWindows(ids[iL : iL+L], ids[iL+1 : iL+L+1])``, read from the
    file by a positioned read in each process that reads it (DataLoader workers included). Not a memory
    map: the pages a map has touched count in the process's resident memory, which then grows with the
    corpus (benchmarks/data.py measured 1087 MiB on a 200 MB shard against 838 MiB on a 10 MB one);
    a read holds only its window."""

    def __init__(self, path: Path, dtype: str, tokens: int, block_size: int):
        if tokens <= block_size:
            raise ValueError(f"{path} holds {tokens} tokens, too few for one window of {block_size} + 1")
        self.path, self.dtype, self.tokens, self.block_size = path, np.dtype(dtype), tokens, block_size
        self.fd: int | None = None

    def __len__(self) -> int:
        return (self.tokens - 1) // self.block_size

    def __getitem__(self, i: int) -> TokenWindows:
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} of {len(self)}")
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        size = self.dtype.itemsize
        data = os.pread(self.fd, (self.block_size + 1) * size, i * self.block_size * size)
        chunk = torch.from_numpy(np.frombuffer(data, dtype=self.dtype).astype(np.int64))
        return TokenWindows(chunk[:-1], chunk[1:])

    def __getstate__(self) -> dict:
        return {**self.__dict__, "fd": None}  # a worker opens the file itself

    def __del__(self) -> None:
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)


class TokenShards(ZooDataModule):
    """Token shards (``data.source=DIR`` that ``zoo prepare`` wrote) as :class:`TokenWindows`: next-token
    language models. The tokenizer is the one ``meta.json`` holds; a fine-tuning run's
    (``tokenizer_from``) must be the same vocabulary, or the ids would mean other tokens."""

    yields = (TokenWindows,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int, source: str | None = None,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if not source:
            raise ValueError("data.source is not set: data=tokens reads the folder `python -m zoo prepare` wrote "
                             "(data.source=DIR)")
        self.source, self.block_size = Path(source).expanduser(), block_size
        self.splits: dict[str, ShardWindows] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        meta = read_meta(self.source)
        self.tokenizer = self.tokenizer_or(lambda: tokenizer_from_state(meta["tokenizer"]))
        if self.tokenizer.vocab_size != meta["vocab_size"]:
            raise ValueError(f"{self.source / 'meta.json'}: its ids are of a {meta['vocab_size']}-token vocabulary, "
                             f"but the tokenizer of {self.tokenizer_from} has {self.tokenizer.vocab_size}: prepare the "
                             f"shards with it (python -m zoo prepare data.tokenizer_from=...)")
        self.splits = {split: ShardWindows(self.source / f"{split}.bin", meta["dtype"], meta["tokens"][split],
                                           self.block_size) for split in SPLITS}
        if len(self.splits["train"]) < self.batch_size:
            raise ValueError(f"data.source={self.source}: train.bin makes {len(self.splits['train'])} windows of "
                             f"{self.block_size} tokens, fewer than one batch of data.batch_size={self.batch_size}")
        self.dims = {"vocab_size": meta["vocab_size"]}

    def dataset(self, split: str) -> ShardWindows:
        return self.splits[split]

"""``zoo prepare data=text data.source=... out=DIR``: a text source tokenized once into token shards
(:mod:`zoo.data.tokens`), so that pretraining reads windows of a memory map instead of tokenizing
the corpus at every run's start.

    python -m zoo prepare data=text data.source=corpus/ data.tokenizer=bpe data.vocab_size=8192 out=shards
    python train.py model=gpt data=tokens data.source=shards

The corpus is never held whole: each split's documents are read from the source a batch at a time
(:meth:`zoo.data.text.TextData.documents`), tokenized and appended to its ``.bin``. After every batch
``DIR/progress.json`` records the documents done and the bytes written, so a killed prepare rerun
with the same arguments continues there (bytes written after the last record are cut off); other
settings or a changed source into the same ``out=`` are refused. ``meta.json`` is written last and
``progress.json`` removed: a folder without ``meta.json`` is unfinished.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from zoo.data.batches import TokenWindows
from zoo.data.text import TextData, source_files, token_stream
from zoo.data.tokenizers import tokenizer_from_state
from zoo.data.tokens import FORMAT, SPLITS, shard_dtype
from zoo.data.wikitext import END_OF_TEXT
from zoo.terminal import progress

BATCH = 1000  # documents tokenized and appended between two records of progress
# The data.* settings the shards depend on: a resumed prepare must have the same.
SETTINGS = ("source", "column", "val", "test", "val_fraction", "test_fraction", "seed", "tokenizer", "vocab_size",
            "tokenizer_from")


def main(cfg: DictConfig) -> Path:
    """Write ``cfg.out``/{train,val,test}.bin and meta.json (last: a folder without it is unfinished)."""
    out = Path(cfg.out)
    if (out / "meta.json").exists():
        raise ValueError(f"out={out} holds token shards already (meta.json): pick another folder, or delete it")
    data = hydra.utils.instantiate(cfg.data)
    if not isinstance(data, TextData):
        raise ValueError(f"zoo prepare reads data=text (data._target_ is {cfg.data._target_})")
    if data.streaming:
        raise ValueError("zoo prepare reads files, not a stream: set data.streaming=false (and a local data.source)")
    data.serve(TokenWindows)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    settings = {key: data_cfg.get(key) for key in SETTINGS}
    files = files_digest(data)
    state = resumed(out, settings, files)
    documents = data.documents()
    if state:
        data.tokenizer = tokenizer_from_state(state["tokenizer"])
    else:
        data.tokenizer = data.tokenizer_or(lambda: data.own_tokenizer(documents))
        state = {"settings": settings, "files": files, "tokenizer": data.tokenizer.state(), "splits": {}}
    eod = data.role(END_OF_TEXT, "end-of-document")
    dtype = shard_dtype(data.tokenizer.vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    record(out, state)
    for split in SPLITS:
        write_split(out, split, documents[split], data.tokenizer, eod, dtype, state)
    digest, tokens = hashlib.sha256(), {}
    for split in SPLITS:
        with open(out / f"{split}.bin", "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                digest.update(chunk)
        tokens[split] = state["splits"][split]["bytes"] // dtype.itemsize
    meta = {"format": FORMAT, "dtype": dtype.name, "vocab_size": data.tokenizer.vocab_size, "eod_id": eod,
            "tokens": tokens, "tokens_sha256": digest.hexdigest(), "source": data.source,
            "tokenizer": data.tokenizer.state()}
    (out / "meta.json.part").write_text(json.dumps(meta) + "\n")
    (out / "meta.json.part").rename(out / "meta.json")
    (out / "progress.json").unlink()
    print(f"{out}: " + ", ".join(f"{split} {n:,} tokens" for split, n in tokens.items()) + f" ({dtype.name})")
    return out


def write_split(out: Path, split: str, documents: Iterable[str], tokenizer, eod: int, dtype, state: dict) -> None:
    """Append ``split``'s token stream (``<eod> doc <eod> ...``) to ``out/split.bin`` a batch of
    documents at a time from where ``state`` (progress.json) says it stopped, recording each batch."""
    done = state["splits"].setdefault(split, {"documents": 0, "bytes": 0, "complete": False})
    if done["complete"]:
        return
    path = out / f"{split}.bin"
    held = path.stat().st_size if path.exists() else 0
    if held < done["bytes"]:
        raise ValueError(f"{path}: {held} bytes, fewer than the {done['bytes']} {out / 'progress.json'} records: "
                         f"the folder was changed; delete out={out} and prepare again")
    with open(path, "r+b" if path.exists() else "wb") as f:
        f.truncate(done["bytes"])  # what was written after the last record is written again
        f.seek(done["bytes"])
        if done["bytes"] == 0:
            append(f, token_stream(tokenizer, [], eod)[0].numpy().astype(dtype), done, 0, out, state)
        rest = progress(islice(documents, done["documents"], None), f"{split}.bin", unit="doc")
        for batch in batches(rest, BATCH):
            append(f, token_stream(tokenizer, batch, eod)[0][1:].numpy().astype(dtype), done, len(batch), out, state)
    done["complete"] = True
    record(out, state)


def append(f, ids, done: dict, documents: int, out: Path, state: dict) -> None:
    """Write ``ids`` to the end of ``f``, durably, then record ``documents`` more done."""
    f.write(ids.tobytes())
    f.flush()
    os.fsync(f.fileno())
    done["documents"] += documents
    done["bytes"] = f.tell()
    record(out, state)


def batches(items: Iterator[str], size: int) -> Iterator[list[str]]:
    """``items`` in lists of ``size`` (the last shorter)."""
    while batch := list(islice(items, size)):
        yield batch


def record(out: Path, state: dict) -> None:
    """``out/progress.json``, replaced whole (a kill leaves the last complete record)."""
    partial = out / "progress.json.part"
    partial.write_text(json.dumps(state) + "\n")
    partial.replace(out / "progress.json")


def files_digest(data: TextData) -> str:
    """A hash of the names, sizes and modification times of every file of the sources: a source
    edited between a killed prepare and its rerun is noticed without reading it."""
    digest = hashlib.sha256()
    for key, source in (("data.source", data.source), *((f"data.{s}", v) for s, v in data.sources.items() if v)):
        for file in source_files(source, key):  # (a save_to_disk folder: its files)
            stat = file.stat()
            digest.update(f"{file}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def resumed(out: Path, settings: dict, files: str) -> dict | None:
    """The record of an unfinished prepare into ``out`` (None: none): one of other settings, or of a
    source changed since, is refused (its shards would mix two corpora or two tokenizers)."""
    path = out / "progress.json"
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not JSON ({err}): delete out={out} and prepare again") from None
    theirs = state.get("settings", {}) if isinstance(state, dict) else {}
    if differ := [f"data.{k}={theirs.get(k)} there, {v} here" for k, v in settings.items() if theirs.get(k) != v]:
        raise ValueError(f"out={out} holds an unfinished prepare of other settings ({'; '.join(differ)}): rerun it "
                         f"with its settings to finish it, or pick another out=")
    if state.get("files") != files:
        raise ValueError(f"out={out} holds an unfinished prepare of data.source={settings['source']}, whose files "
                         f"have changed since (sizes or times): delete out={out} and prepare again")
    return state

"""``zoo prepare data=text data.source=... out=DIR``: a text source tokenized once into token shards
(:mod:`zoo.data.tokens`), so that pretraining reads windows of a memory map instead of tokenizing
the corpus at every run's start.

    python -m zoo prepare data=text data.source=corpus/ data.tokenizer=bpe data.vocab_size=8192 out=shards
    python train.py model=gpt data=tokens data.source=shards
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from zoo.data.batches import TokenWindows
from zoo.data.text import TextData
from zoo.data.tokens import FORMAT, SPLITS, shard_dtype


def main(cfg: DictConfig) -> Path:
    """Write ``cfg.out``/{train,val,test}.bin and meta.json (last: a folder without it is unfinished)."""
    out = Path(cfg.out)
    if (out / "meta.json").exists():
        raise ValueError(f"out={out} holds token shards already (meta.json): pick another folder, or delete it")
    data = hydra.utils.instantiate(cfg.data)
    if not isinstance(data, TextData):
        raise ValueError(f"zoo prepare reads data=text (data._target_ is {cfg.data._target_})")
    data.serve(TokenWindows)
    data.setup()
    dtype = shard_dtype(data.tokenizer.vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    digest, tokens = hashlib.sha256(), {}
    for split in SPLITS:
        ids = data.streams[split][0].numpy().astype(dtype)
        partial = out / f"{split}.bin.part"
        ids.tofile(partial)
        partial.rename(out / f"{split}.bin")
        digest.update(memoryview(ids))
        tokens[split] = len(ids)
    meta = {"format": FORMAT, "dtype": dtype.name, "vocab_size": data.tokenizer.vocab_size, "eod_id": data.eod_id,
            "tokens": tokens, "tokens_sha256": digest.hexdigest(), "source": data.source,
            "tokenizer": data.tokenizer.state()}
    (out / "meta.json.part").write_text(json.dumps(meta) + "\n")
    (out / "meta.json.part").rename(out / "meta.json")
    print(f"{out}: " + ", ".join(f"{split} {n:,} tokens" for split, n in tokens.items()) + f" ({dtype.name})")
    return out

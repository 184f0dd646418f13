"""The token-shard loader (``data=tokens``) against the GPT step it feeds: loader time per step as a
fraction of the step, both measured in one process, and the loader's memory on a 1 GB and a 10 MB
shard (each in a fresh subprocess), which should not depend on the corpus size.

    python benchmarks/data.py                # GPT's CPU preset (4 layers, 128 wide, context 64), batch 12, 1 thread
    python benchmarks/data.py --steps 50 --big-mb 1024 --small-mb 10

The shards are synthetic (random ids of a 65-token vocabulary, written as ``zoo prepare`` writes
them) in a temporary folder, removed at the end. Timing alternates a ``next()`` of the training
loader (the seeded global order, windows read from the memory map) with one training step
(forward, backward, AdamW) on that batch. Memory: the peak resident set of a process that sets the
module up and reads ``--rss-batches`` batches (and how far it grew from before the module was set up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from common import _status_mib, make_step
from zoo.config import compose_config
from zoo.data.tokenizers import CharTokenizer
from zoo.data.tokens import FORMAT, SPLITS, TokenShards

VOCAB = 65


def write_shards(folder: Path, megabytes: int) -> Path:
    """Synthetic token shards of ``megabytes`` MB of uint16 ids in train.bin (val and test small)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tokenizer = CharTokenizer("".join(chr(33 + i) for i in range(VOCAB - 1)), ("<|endoftext|>",))
    tokens = {}
    for split in SPLITS:
        total = megabytes * 2**20 // 2 if split == "train" else 2**16
        with open(folder / f"{split}.bin", "wb") as f:
            for start in range(0, total, 2**24):
                f.write(rng.integers(0, VOCAB, min(2**24, total - start), dtype=np.uint16).tobytes())
        tokens[split] = total
    meta = {"format": FORMAT, "dtype": "uint16", "vocab_size": VOCAB, "eod_id": 0, "tokens": tokens,
            "tokenizer": tokenizer.state()}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def loader(folder: Path, batch: int, context: int):
    data = TokenShards("unused", "unused", batch, context, source=str(folder))
    data.setup("fit")
    return iter(data.train_dataloader())


def rss_of(folder: Path, batches: int, batch: int, context: int) -> None:
    """(In the subprocess) print how far the peak resident set grew while reading ``batches`` batches."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark: imports do not count
    before = _status_mib("VmRSS")
    it = loader(folder, batch, context)
    for _ in range(batches):
        next(it)
    print(_status_mib("VmHWM"), _status_mib("VmHWM") - before)


def rss_in_subprocess(folder: Path, a: argparse.Namespace) -> tuple[float, float]:
    """(the peak resident set, MiB, of a process that reads ``a.rss_batches`` batches of ``folder``,
    how far it grew from before the module was set up)."""
    out = subprocess.run([sys.executable, __file__, "--rss-of", str(folder), "--rss-batches", str(a.rss_batches),
                          "--batch", str(a.batch), "--threads", str(a.threads)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"measuring the memory of {folder} failed:\n{out.stderr[-3000:]}")
    peak, growth = out.stdout.strip().splitlines()[-1].split()
    return float(peak), float(growth)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--batch", type=int, default=12, help="data.batch_size (the data=tokens default)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--big-mb", type=int, default=1024)
    p.add_argument("--small-mb", type=int, default=10)
    p.add_argument("--rss-batches", type=int, default=500)
    p.add_argument("--compile", action="store_true", help="torch.compile the GPT step (the loader's share of a compiled step)")
    p.add_argument("--rss-of", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    cfg = compose_config(["model=gpt", "+dims.vocab_size=65"])
    context = cfg.model.net.context
    if a.rss_of:
        return rss_of(a.rss_of, a.rss_batches, a.batch, context)
    import hydra

    torch.manual_seed(0)
    net = hydra.utils.instantiate(cfg.model.net).train()
    with tempfile.TemporaryDirectory() as tmp:
        big, small = write_shards(Path(tmp) / "big", a.big_mb), write_shards(Path(tmp) / "small", a.small_mb)
        it, current = loader(big, a.batch, context), {}
        step = make_step(net, lambda: F.cross_entropy(net(current["x"]).flatten(0, 1), current["y"].flatten()),
                         compile=a.compile)
        load_times, step_times = [], []
        for i in range(a.steps + 2):  # two untimed rounds first
            t0 = time.perf_counter()
            current["x"], current["y"] = next(it)
            t1 = time.perf_counter()
            step()
            t2 = time.perf_counter()
            if i >= 2:
                load_times.append(t1 - t0)
                step_times.append(t2 - t1)
        load, train = statistics.mean(load_times), statistics.mean(step_times)
        print(f"GPT CPU preset (context {context}, batch {a.batch}, {a.threads} thread(s)), {a.big_mb} MB shard: "
              f"loader {load * 1e3:.3f} ms / step {train * 1e3:.1f} ms = {load / train:.2%} of the step")
        rss = {mb: rss_in_subprocess(folder, a) for mb, folder in ((a.big_mb, big), (a.small_mb, small))}
        (big_peak, big_growth), (small_peak, small_growth) = rss[a.big_mb], rss[a.small_mb]
        print(f"peak RSS reading {a.rss_batches} batches: {big_peak:.0f} MiB ({a.big_mb} MB shard; the loader "
              f"{big_growth:+.1f}) vs {small_peak:.0f} MiB ({a.small_mb} MB; {small_growth:+.1f}): ratio "
              f"{big_peak / small_peak:.3f}")


if __name__ == "__main__":
    main()

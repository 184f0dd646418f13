"""Attention forward + backward under masks, dense SDPA vs the block backend (zoo/nn/blocked.py):
time and peak memory at each context, as ratios to dense causal attention at the same context,
all measured in one process (peak memory: one fresh subprocess per case).

    python benchmarks/local_attention.py                       # contexts 1k, 4k, 16k; CPU fp32
    python benchmarks/local_attention.py --contexts 1024,4096 --window 256 --device cuda

Cases: causal (SDPA's fused causal kernel), a causal sliding window (LocalMask) through dense
SDPA with a boolean mask and through the block backend, and the Sparse Transformer's strided
pattern (StridedMask, stride = window) through the block backend.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

import torch

from common import MEMORY_ENV, _measure_one, _peak_in_subprocess, alternate_medians
from zoo.nn.attention import attention
from zoo.nn.blocked import blocked_attention, plan
from zoo.nn.masks import CausalMask, LocalMask
from zoo.nn.sparse import StridedMask


def case(name: str, length: int, a) -> Callable[[], None]:
    """One forward + backward of attention over ``length`` positions, as ``name`` computes it."""
    q, k, v = (torch.randn(a.batch, a.heads, length, a.d_head, device=a.device, requires_grad=True) for _ in range(3))
    device = torch.device(a.device)
    if name == "causal":
        def run():
            return attention(q, k, v, is_causal=True)[0]
    elif name == "window dense":
        mask, _ = LocalMask(a.window)(length, length, device)

        def run():
            return attention(q, k, v, mask=mask)[0]
    else:
        mask = LocalMask(a.window) if name == "window blocks" else StridedMask(a.window)
        blocks = plan(mask, length, length, device, size=a.block)

        def run():
            return blocked_attention(q, k, v, blocks, None, lambda q_, k_, v_, m: attention(q_, k_, v_, mask=m)[0])

    def step() -> None:
        run().sum().backward()
        q.grad = k.grad = v.grad = None

    return step


CASES = ("causal", "window dense", "window blocks", "strided blocks")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contexts", default="1024,4096,16384")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--block", type=int, default=256, help="query/key block of the block backend (strided)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    only = os.environ.get(MEMORY_ENV)
    if only is not None:  # the memory-measuring subprocess: "<case>@<length>"
        name, length = only.rsplit("@", 1)
        _measure_one(lambda: case(name, int(length), a), a.device)
        sys.exit(0)
    torch.manual_seed(0)
    print(f"attention fwd+bwd, batch {a.batch}, {a.heads} heads of {a.d_head}, window {a.window}, block {a.block}, "
          f"fp32, {a.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'context':>8} {'case':>16} {'ms':>10} {'time/causal':>12} {'peak MiB':>10} {'mem/causal':>11}")
    for length in (int(n) for n in a.contexts.split(",")):
        steps = {name: case(name, length, a) for name in CASES}
        medians = alternate_medians(steps, a.repeats, a.device)
        memory = {name: _peak_in_subprocess(f"{name}@{length}") for name in CASES}
        for name in CASES:
            mem = memory.get(name, float("nan"))
            print(f"{length:>8} {name:>16} {medians[name] * 1000:>10.1f} {medians[name] / medians['causal']:>12.3f} "
                  f"{mem:>10.1f} {mem / memory.get('causal', float('nan')):>11.3f}")


if __name__ == "__main__":
    main()

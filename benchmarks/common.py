"""Shared by the benchmark scripts: time a training step and measure its peak memory,
for the zoo model and its reference, in one process, and print the ratios.

Timing alternates between the two models (so background load hits both alike) and
reports the median step. Peak memory is the growth of the resident set while one
model is built and trained for two steps (weights, grads, optimizer state, activations), measured in a fresh subprocess per model so the two do not mix
(on a GPU: ``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Callable

import torch
from torch import nn

StepFn = Callable[[], torch.Tensor]  # runs forward, returns the loss


def make_step(model: nn.Module, loss_fn: StepFn, lr: float = 1e-4) -> Callable[[], None]:
    """forward + backward + AdamW update."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()

    return step


def _status_mib(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in MiB."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def _peak_rss_in_subprocess(label: str) -> float:
    """Re-run this script with only ``label``'s model, in a fresh process, and read back
    how far its resident set grew while building it and training two steps: a fresh
    process per model keeps the two from mixing."""
    env = dict(os.environ, ZOO_BENCH_MEMORY_OF=label)
    out = subprocess.run([sys.executable, *sys.argv], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def alternate_medians(fns: dict[str, Callable[[], object]], repeats: int, device: str = "cpu",
                      warmup: int = 1) -> dict[str, float]:
    """Median seconds of each function, the functions run in turn ``repeats`` times (after
    ``warmup`` rounds), so that background load hits them alike."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            sync(); t = time.perf_counter(); fn(); sync()
            times[label].append(time.perf_counter() - t)
    return {label: statistics.median(ts) for label, ts in times.items()}


def compare(name: str, zoo_factory: Callable[[], Callable[[], None]], ref_name: str,
            ref_factory: Callable[[], Callable[[], None]], warmup: int = 3, steps: int = 10,
            device: str = "cpu") -> dict[str, float]:
    """Build both training steps (each factory builds its model and returns its step),
    time them alternately and print zoo/reference ratios of time and memory."""
    only = os.environ.get("ZOO_BENCH_MEMORY_OF")
    if only is not None:  # the memory-measuring subprocess: build and run one model only
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the high-water mark, so import-time peaks do not count
        before = _status_mib("VmRSS")
        step = (zoo_factory if only == name else ref_factory)()
        step(); step()
        print(_status_mib("VmHWM") - before)
        sys.exit(0)
    zoo_step, ref_step = zoo_factory(), ref_factory()
    medians = alternate_medians({name: zoo_step, ref_name: ref_step}, steps, device, warmup)
    t_zoo, t_ref = medians[name], medians[ref_name]
    if device.startswith("cuda"):
        mem = {}
        for label, fn in ((name, zoo_step), (ref_name, ref_step)):
            torch.cuda.reset_peak_memory_stats(); fn(); torch.cuda.synchronize()
            mem[label] = torch.cuda.max_memory_allocated() / 2**20
        m_zoo, m_ref = mem[name], mem[ref_name]
    else:
        m_zoo, m_ref = _peak_rss_in_subprocess(name), _peak_rss_in_subprocess(ref_name)
    print(f"{name:>24}: step {t_zoo * 1000:8.1f} ms   peak +{m_zoo:8.1f} MiB")
    print(f"{ref_name:>24}: step {t_ref * 1000:8.1f} ms   peak +{m_ref:8.1f} MiB")
    print(f"{'ratio zoo/reference':>24}: time {t_zoo / t_ref:.3f}x   memory {m_zoo / max(m_ref, 1e-9):.3f}x")
    return {"time_ratio": t_zoo / t_ref, "memory_ratio": m_zoo / max(m_ref, 1e-9), "zoo_ms": t_zoo * 1000,
            "ref_ms": t_ref * 1000}

"""Shared by the benchmark scripts: time a training step and measure its peak memory,
for the zoo model and its reference, in one process, and print the ratios.

Timing alternates between the two models (so background load hits both alike) and
reports the median step. Peak memory is the growth of the resident set during one
training step, measured in a forked child per model so the two do not mix
(on a GPU: ``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import os
import resource
import statistics
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


def _peak_rss_of(step: Callable[[], None]) -> float:
    """MiB the resident set grows by during steps 2-3 (after warm-up), in a forked child."""
    step()  # optimizer state and allocator warm-up, in the parent, before forking
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        # A forked child hangs in the parent's CPU thread pool on its first convolution;
        # one thread avoids it (the memory a step needs does not depend on the thread count).
        torch.set_num_threads(1)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        step()
        step()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        os.write(write, str((after - before) / 1024).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        value = float(f.read())
    os.waitpid(pid, 0)
    return value


def compare(name: str, zoo_step: Callable[[], None], ref_name: str, ref_step: Callable[[], None],
            warmup: int = 3, steps: int = 10, device: str = "cpu") -> dict[str, float]:
    """Time both steps alternately and print zoo/reference ratios of time and memory."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(warmup):
        zoo_step(); ref_step()
    times: dict[str, list[float]] = {name: [], ref_name: []}
    for _ in range(steps):
        for label, fn in ((name, zoo_step), (ref_name, ref_step)):
            sync(); t = time.perf_counter(); fn(); sync()
            times[label].append(time.perf_counter() - t)
    t_zoo, t_ref = statistics.median(times[name]), statistics.median(times[ref_name])
    if device.startswith("cuda"):
        mem = {}
        for label, fn in ((name, zoo_step), (ref_name, ref_step)):
            torch.cuda.reset_peak_memory_stats(); fn(); sync()
            mem[label] = torch.cuda.max_memory_allocated() / 2**20
        m_zoo, m_ref = mem[name], mem[ref_name]
    else:
        m_zoo, m_ref = _peak_rss_of(zoo_step), _peak_rss_of(ref_step)
    print(f"{name:>24}: step {t_zoo * 1000:8.1f} ms   peak +{m_zoo:8.1f} MiB")
    print(f"{ref_name:>24}: step {t_ref * 1000:8.1f} ms   peak +{m_ref:8.1f} MiB")
    print(f"{'ratio zoo/reference':>24}: time {t_zoo / t_ref:.3f}x   memory {m_zoo / max(m_ref, 1e-9):.3f}x")
    return {"time_ratio": t_zoo / t_ref, "memory_ratio": m_zoo / max(m_ref, 1e-9), "zoo_ms": t_zoo * 1000,
            "ref_ms": t_ref * 1000}

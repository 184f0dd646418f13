"""Shared by the benchmark scripts: time a training step and measure its peak memory, for
the zoo model and every peer library that has the family, in one process, and print the
ratios zoo/peer and zoo/fastest peer.

Timing alternates between the models (so background load hits them alike) and reports the
median step. Peak memory is the growth of the resident set while one model is built and
trained for two steps (weights, grads, optimizer state, activations), measured in a fresh
subprocess per model so that they do not mix (on a GPU: ``torch.cuda.max_memory_allocated``).

The peers (litgpt, x-transformers, openai-whisper, ...) live in the benchmark environment:
``make bench`` builds it (``.venv-bench``, from ``benchmarks/requirements.lock``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import torch
from torch import nn

from zoo.models.compiling import configure_dynamo
from zoo.train.flops import peak_flops

StepFn = Callable[[], torch.Tensor]  # runs forward, returns the loss
Step = Callable[[], None]  # one training step
Factory = Callable[[], Step]  # builds a model and returns its training step

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
RESULT_ENV = "ZOO_BENCH_RESULT"  # a file to write this run's numbers to, as JSON (benchmarks/all.py reads it)
MEMORY_ENV = "ZOO_BENCH_MEMORY_OF"  # set in the memory-measuring subprocess: the one model to build


HERE = os.path.dirname(os.path.abspath(__file__))


def peer(module: str):
    """Import a peer library, or stop with the way to get the environment that has it. This
    folder is off the path meanwhile: ``whisper.py`` here would shadow openai-whisper's ``whisper``."""
    path = sys.path[:]
    sys.path[:] = [p for p in path if os.path.abspath(p or ".") != HERE]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise SystemExit(f"{e.name} is missing: the benchmarks run in their own environment, with the peers "
                         f"installed (make bench builds .venv-bench from benchmarks/requirements.lock)") from e
    finally:
        sys.path[:] = path


def add_run_args(p: argparse.ArgumentParser, steps: int = 10) -> None:
    """The options every benchmark has: how long to time, on what, and whether compiled (every
    benchmark passes ``a.compile`` on to :func:`make_step` for each of its models, the zoo's and
    the peers' alike: compiled against compiled)."""
    p.add_argument("--steps", type=int, default=steps, help="timed rounds (each model steps once per round)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                   help="fp32, or autocast to bf16/fp16 around the forward pass (weights stay fp32)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also profile one training step of each model (torch.profiler) and print its top N ops")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile every model, the peers' too (in its first warm-up round, which is not timed)")


def make_step(model: nn.Module, loss_fn: StepFn, dtype: str = "fp32", lr: float = 1e-4,
              compile: bool = False) -> Step:
    """forward (autocast to ``dtype`` unless fp32) + backward + AdamW update; ``compile``:
    ``torch.compile`` the model's forward first (in place, so ``loss_fn``'s calls of it are compiled;
    backward is compiled with it, the optimizer step is not), under the dynamo settings of the zoo's
    ``compile=true`` (zoo.models.compiling), the peers' models too: one setting for the process."""
    if compile:
        configure_dynamo()
        model.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    device_type = next(model.parameters()).device.type
    cast = (contextlib.nullcontext() if dtype == "fp32"
            else torch.autocast(device_type, dtype=DTYPES[dtype]))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with cast:
            loss = loss_fn()
        loss.backward()
        opt.step()

    return step


def _status_mib(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in MiB."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def _warm_up_imports(device: str) -> None:
    """One AdamW step on a tiny model first: it imports what the optimizer loads lazily (a first
    ``opt.step()`` can import ~150 MiB of torch's compiler stack), which is no model's memory."""
    tiny = nn.Linear(2, 2).to(device)
    make_step(tiny, lambda: tiny(torch.ones(1, 2, device=device)).sum())()


def _measure_one(factory: Factory, device: str) -> None:
    """In the memory subprocess: build one model, train it two steps, print how far memory grew."""
    _warm_up_imports(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step = factory()
        step(); step(); torch.cuda.synchronize()
        print((torch.cuda.max_memory_allocated() - before) / 2**20)
        return
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark, so import-time peaks do not count
    before = _status_mib("VmRSS")
    step = factory()
    step(); step()
    print(_status_mib("VmHWM") - before)


def _peak_in_subprocess(label: str) -> float:
    """Re-run this script with only ``label``'s model, in a fresh process, and read back how
    far its memory grew while building it and training two steps."""
    env = {k: v for k, v in os.environ.items() if k != RESULT_ENV} | {MEMORY_ENV: label}
    out = subprocess.run([sys.executable, *sys.argv], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"measuring the memory of {label!r} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def run_for_result(command: list[str]) -> dict:
    """Run a benchmark script (``command``; its output streams through) in its own process and
    return the numbers it wrote to ``$ZOO_BENCH_RESULT``; stop if it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        done = subprocess.run(command, env=dict(os.environ, **{RESULT_ENV: result}))
        if done.returncode != 0 or not os.path.isfile(result):
            raise SystemExit(f"{' '.join(command)} failed (exit status {done.returncode})")
        with open(result) as f:
            return json.load(f)


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


def print_profile(label: str, step: Step, top: int) -> None:
    """One step of ``step`` under torch.profiler: its top ``top`` ops by self CPU time, and
    how many ops it ran (each one costs Python and dispatch time, whatever its size)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    ops = prof.key_averages()
    total = sum(op.self_cpu_time_total for op in ops)
    print(f"{label}: {sum(op.count for op in ops)} ops, {total / 1000:.1f} ms self CPU in one step")
    for op in sorted(ops, key=lambda op: -op.self_cpu_time_total)[:top]:
        print(f"    {op.key:<44} {op.self_cpu_time_total / 1000:9.1f} ms  {100 * op.self_cpu_time_total / total:5.1f}%"
              f"  {op.count:6d} calls")


def mfu(flops: float, seconds: float, peak: float) -> float:
    """Model FLOPs utilisation: ``flops`` done per step, in ``seconds`` per step, as a fraction of
    the device's ``peak`` FLOP/s."""
    return flops / seconds / peak


def print_mfu(seconds: dict[str, float], flops: float, a: argparse.Namespace) -> dict[str, float]:
    """Print each model's MFU (the same ``flops`` per step for all, at their median step
    times) against the peak FLOP/s of ``a.device`` in ``a.dtype`` (zoo.train.flops' table, else a
    measured matmul); returns {model: MFU}."""
    peak, source = peak_flops(torch.device(a.device), DTYPES[a.dtype])
    print(f"MFU: {flops / 1e12:.3f} TFLOP per step (the zoo's count) against {peak / 1e12:.1f} TFLOP/s ({source})")
    fractions = {label: mfu(flops, s, peak) for label, s in seconds.items()}
    for label, fraction in fractions.items():
        print(f"{label:>36}: step {seconds[label] * 1000:9.1f} ms   {flops / seconds[label] / 1e12:8.3g} TFLOP/s   "
              f"MFU {100 * fraction:5.1f}%", flush=True)
    return fractions


def compare(family: str, shape: str, zoo_name: str, zoo_factory: Factory, peers: dict[str, Factory],
            a: argparse.Namespace, flops: float | None = None) -> dict:
    """Build every training step (each factory builds its model and returns its step), time
    them alternately, measure each one's peak memory, and print zoo/peer ratios of both and
    zoo / the fastest (and the leanest) peer. ``a`` holds the options of :func:`add_run_args`;
    ``flops``, the training FLOPs of one step, adds each model's MFU (printed before the memory
    is measured). Returns the numbers (also written as JSON to ``$ZOO_BENCH_RESULT`` when that is set)."""
    factories = {zoo_name: zoo_factory, **peers}
    only = os.environ.get(MEMORY_ENV)
    if only is not None:  # the memory-measuring subprocess: build and run one model only
        _measure_one(factories[only], a.device)
        sys.exit(0)
    print(f"{family}: {shape}, {a.dtype}, {a.device}, torch {torch.__version__}, {torch.get_num_threads()} threads",
          flush=True)
    steps = {label: factory() for label, factory in factories.items()}
    seconds = alternate_medians(steps, a.steps, a.device, a.warmup)
    fractions = print_mfu(seconds, flops, a) if flops else None
    if a.profile:
        for label, step in steps.items():
            print_profile(label, step, a.profile)
    del steps  # free the models before the memory subprocesses start
    mib = {label: _peak_in_subprocess(label) for label in factories}
    for label in factories:
        print(f"{label:>36}: step {seconds[label] * 1000:9.1f} ms   peak +{mib[label]:8.1f} MiB")
    for label in peers:
        print(f"{'zoo / ' + label:>36}: time {seconds[zoo_name] / seconds[label]:.3f}x   "
              f"memory {mib[zoo_name] / max(mib[label], 1e-9):.3f}x")
    fastest = min(peers, key=seconds.__getitem__)
    leanest = min(peers, key=mib.__getitem__)
    time_ratio = seconds[zoo_name] / seconds[fastest]
    memory_ratio = mib[zoo_name] / max(mib[leanest], 1e-9)
    print(f"{'zoo / fastest peer':>36}: time {time_ratio:.3f}x ({fastest})")
    print(f"{'zoo / leanest peer':>36}: memory {memory_ratio:.3f}x ({leanest})", flush=True)
    result = {"family": family, "shape": shape, "dtype": a.dtype, "device": a.device, "zoo": zoo_name,
              "seconds": seconds, "mib": mib, "fastest": fastest, "leanest": leanest,
              "time_ratio": time_ratio, "memory_ratio": memory_ratio}
    if fractions:
        result["mfu"] = fractions
    if os.environ.get(RESULT_ENV):
        with open(os.environ[RESULT_ENV], "w") as f:
            json.dump(result, f)
    return result

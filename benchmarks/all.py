"""Every family's benchmark, one after another (each in its own process), then one table: the
zoo's training step time and its ratios to every peer library's, in time and peak memory.

    python benchmarks/all.py                      # every family at its default shape, fp32, CPU
    python benchmarks/all.py --steps 3 --only gpt t5 mistral mistral-blocks
    python benchmarks/all.py --device cuda --dtype bf16
    python benchmarks/all.py --summary            # the README's short table: each family against its best peer
    python benchmarks/all.py --compile --summary  # every model torch.compiled, the peers' too: compiled vs compiled

Run it in the benchmark environment (``make bench`` builds .venv-bench and runs this). Ratios
below 1 mean the zoo is faster (or leaner) than that peer.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from common import run_for_result

HERE = Path(__file__).resolve().parent
# Each row of the table: the script (benchmarks/<script>.py) and its options. compare() measures one
# zoo net per run, so a script that covers several families (or zoo backends) takes options for one.
FAMILIES = {
    "gpt": ["gpt"], "bert": ["bert"], "t5": ["t5"], "vit": ["vit"], "whisper": ["whisper"],
    "transformer": ["transformer"], "llava": ["llava"],
    "vivit": ["video", "--family", "vivit"], "videomae": ["video", "--family", "videomae"],
    "yolos": ["yolos"],
    "mistral": ["local", "--family", "mistral"],
    "mistral-blocks": ["local", "--family", "mistral", "--backend", "blocks"],
    "modernbert": ["local", "--family", "modernbert"],
    "modernbert-blocks": ["local", "--family", "modernbert", "--backend", "blocks"],
    "qwen3": ["decoders", "--family", "qwen3"], "gemma3": ["decoders", "--family", "gemma3"],
    "mixtral": ["decoders", "--family", "mixtral"],
}
TRAIN_ONLY = {"t5", "whisper"}  # they also time decoding; the table is about the training step
PACKAGES = ("torch", "transformers", "timm", "litgpt", "x-transformers", "openai-whisper", "scipy")


def package_versions() -> str:
    def one(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return f"{name} (not installed)"

    return ", ".join(one(name) for name in PACKAGES)


def machine(device: str) -> str:
    """The CPU (model, cores, the threads torch uses) or the GPU the numbers come from."""
    import torch

    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(device)}, torch CUDA {torch.version.cuda}"
    cpu = platform.processor() or platform.machine()
    if Path("/proc/cpuinfo").is_file():
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    return (f"{cpu}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()} "
            f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")


def run_family(family: str, a: argparse.Namespace) -> dict:
    """Run ``family``'s script (its output streams through) and return its numbers."""
    script, *options = FAMILIES[family]
    command = [sys.executable, str(HERE / f"{script}.py"), *options, "--steps", str(a.steps), "--warmup", str(a.warmup),
               "--device", a.device, "--dtype", a.dtype, *(["--no-decode"] if family in TRAIN_ONLY else []),
               *(["--compile"] if a.compile else [])]
    return run_for_result(command) | {"compiled": a.compile}


def table(results: list[dict], ratios_only: bool = False) -> str:
    """The results as a Markdown table (each peer: zoo/peer step time, then zoo/peer peak memory);
    ``ratios_only`` leaves out the zoo's step time in seconds."""
    head = ["family", "shape", *([] if ratios_only else ["zoo step (s)"]), "zoo / peer: time, memory",
            "zoo / fastest peer (time)", "zoo / leanest peer (memory)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        zoo, seconds, mib = r["zoo"], r["seconds"], r["mib"]
        peers = "<br>".join(f"{name} {seconds[zoo] / seconds[name]:.2f}x, {mib[zoo] / max(mib[name], 1e-9):.2f}x"
                            for name in seconds if name != zoo)
        step = [] if ratios_only else [f"{seconds[zoo]:.3f}"]
        cells = [r["family"], r["shape"], *step, peers, f"**{r['time_ratio']:.2f}x** ({r['fastest']})",
                 f"**{r['memory_ratio']:.2f}x** ({r['leanest']})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


GOAL = 0.9  # issue 19: the zoo's step time <= 0.9x the fastest peer's, its peak memory <= the leanest's
COMPILED_GOAL = 0.85  # issue 34: compiled against compiled, <= 0.85x the fastest peer's step time


def summary(results: list[dict]) -> str:
    """The short table: each family's zoo / fastest peer (time) and zoo / leanest peer (memory),
    and whether the goal is met (:data:`GOAL`, or :data:`COMPILED_GOAL` for a compiled run)."""
    lines = ["| family | zoo / fastest peer: step time | zoo / leanest peer: peak memory | goal met |",
             "|---|---|---|---|"]
    for r in results:
        goal = COMPILED_GOAL if r.get("compiled") else GOAL
        missed = [what for what, ok in (("time", r["time_ratio"] <= goal), ("memory", r["memory_ratio"] <= 1.0)) if not ok]
        verdict = f"missed: {' and '.join(missed)}" if missed else "yes"
        lines.append(f"| {r['family']} | {r['time_ratio']:.2f}x ({r['fastest']}) | {r['memory_ratio']:.2f}x "
                     f"({r['leanest']}) | {verdict} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=FAMILIES, default=list(FAMILIES), help="these families only")
    p.add_argument("--steps", type=int, default=5, help="timed rounds per family")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile every model, the peers' too (compiled vs compiled; the compile is not timed)")
    p.add_argument("--json", type=Path, help="also write every family's numbers here")
    p.add_argument("--from-json", type=Path, help="print the table of an earlier run's --json file (runs nothing)")
    p.add_argument("--summary", action="store_true", help="the short table: each family against its fastest "
                   "and its leanest peer, and whether the goal is met")
    p.add_argument("--ratios-only", action="store_true",
                   help="leave the zoo's step time in seconds out of the table (on a loaded machine only ratios say much)")
    a = p.parse_args()
    if a.from_json:
        results = json.loads(a.from_json.read_text())
        print(summary(results) if a.summary else table(results, a.ratios_only))
        return
    started = datetime.datetime.now(datetime.timezone.utc)
    results = []
    for family in a.only:
        results.append(run_family(family, a))
        if a.json:  # after each family, so that a failing one keeps the others' numbers
            a.json.write_text(json.dumps(results, indent=1))
    minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, {minutes:.0f} min; {a.dtype}, {a.device}, "
          f"{'compiled (torch.compile, every model)' if a.compile else 'eager'}; "
          f"median of {a.steps} steps after {a.warmup} (AdamW, alternating rounds)")
    print(package_versions())
    print(machine(a.device))
    print(f"command: python benchmarks/all.py {' '.join(sys.argv[1:])}\n")
    print(summary(results) if a.summary else table(results, a.ratios_only))


if __name__ == "__main__":
    main()

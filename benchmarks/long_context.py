"""Long context, where the windowed families' structure pays: the zoo's Mistral, GPT-Neo and
ModernBERT under ``attention_backend=blocks`` against the same networks in ``transformers``
(dense attention under the window's boolean mask, as a user gets it on a CPU), one forward +
backward + AdamW step at each context, batch 1, window 256: step time and peak memory as ratios.

    python benchmarks/long_context.py                                  # contexts 4k, 8k, 16k
    python benchmarks/long_context.py --families mistral --contexts 4096,16384 --profile 12

Each (family, context) is one run of ``benchmarks/local.py`` in its own process (its numbers come
back through ``$ZOO_BENCH_RESULT``, as for benchmarks/all.py). Then the zoo's cost per token: its
step at each context over its step at context 256 with as many tokens as the longest (batch 64 for 16k,
under ``attention_backend=sdpa``, the faster backend at that length),
so 1.0x if the cost were linear in the context. Mistral is windowed in every layer;
GPT-Neo's layers alternate global (causal) and local, ModernBERT's are global every third: their
global layers are dense on both sides, so their ratios cannot fall to window / context.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import run_for_result

HERE = Path(__file__).resolve().parent
FAMILIES = ("mistral", "gpt_neo", "modernbert")
BASE_CONTEXT = 256  # the per-token baseline: the window's own length


def run(family: str, context: int, batch: int, a: argparse.Namespace, profile: int = 0,
        backend: str = "blocks") -> dict:
    """benchmarks/local.py for ``family`` at ``context`` x ``batch`` (the zoo under ``backend``); its numbers."""
    command = [sys.executable, str(HERE / "local.py"), "--family", family, "--backend", backend,
               "--context", str(context), "--window", str(a.window), "--batch", str(batch),
               "--steps", str(a.steps), "--warmup", str(a.warmup), "--device", a.device,
               *(["--profile", str(profile)] if profile else [])]
    return run_for_result(command)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--contexts", default="4096,8192,16384")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--steps", type=int, default=2, help="timed rounds at each context")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile the longest context: top N ops")
    p.add_argument("--json", type=Path, help="also write every run's numbers here")
    a = p.parse_args()
    contexts = [int(n) for n in a.contexts.split(",")]
    rows, results = [], []
    for family in a.families.split(","):
        batch = max(1, max(contexts) // BASE_CONTEXT)
        base = run(family, BASE_CONTEXT, batch, a, backend="sdpa")
        base_per_token = base["seconds"][base["zoo"]] / (BASE_CONTEXT * batch)
        results.append(base)
        for context in contexts:
            r = run(family, context, 1, a, a.profile if context == max(contexts) else 0)
            results.append(r)
            if a.json:
                a.json.write_text(json.dumps(results, indent=1))
            zoo, ref = r["zoo"], r["fastest"]
            per_token = r["seconds"][zoo] / context / base_per_token
            rows.append(f"| {family} | {context} | {r['seconds'][zoo]:.2f} s | {r['seconds'][ref]:.2f} s | "
                        f"**{r['time_ratio']:.2f}x** | {r['mib'][zoo]:.0f} MiB | {r['mib'][ref]:.0f} MiB | "
                        f"**{r['memory_ratio']:.2f}x** | {per_token:.2f}x |")
    print(f"\nwindow {a.window}, batch 1, {a.device}, fp32; median of {a.steps} steps after {a.warmup}; "
          f"command: python benchmarks/long_context.py {' '.join(sys.argv[1:])}\n")
    print("| family | context | zoo step (blocks) | transformers step | time ratio | zoo peak | transformers peak "
          f"| memory ratio | zoo per token / at {BASE_CONTEXT} |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

"""Check ``torch.compile`` on every CPU-sized model config: graph breaks, recompilations, and
that 20 compiled training steps equal 20 eager ones.

For each ``conf/model/*.yaml`` under ``--max-params`` (built as ``tools/fingerprint.py`` builds
them: small stand-in dims, parameters drawn away from their init, its fixed padded batch):

- **graph breaks**: ``torch._dynamo.explain`` of the network's forward (the whole forward: the
  embedder, the Block stack and the head), with the first break's reason;
- **steps**: two copies of the network, one eager, one ``torch.compile``d, each take 20 AdamW steps
  on the same batch (dropout off, so that both draw nothing: compiled code has its own random
  stream) on a fixed scalar of the outputs; the largest relative difference of the 20 losses is
  printed (fp32 rounding: inductor reorders sums, so not bit-equal);
- **recompilations**: graphs the compiler was handed after the first step (a mask, a context or a
  cache built so that a guard fails every step would recompile; 0 is the goal).

    python tools/compile_check.py                      # every CPU preset (inductor: minutes each on 2 cores)
    python tools/compile_check.py --only gpt llama --backend aot_eager   # fast: breaks and recompiles only

Exit status 1 when any family breaks its graph, recompiles, or misses ``--rtol``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from fingerprint import batch, build, cpu_models, tensors  # noqa: E402  (puts tests/ on the path)
from exactness import randomise  # noqa: E402
from zoo.models.compiling import compile_net  # noqa: E402

STEPS = 20


def scalar(net: nn.Module, kwargs: dict, weights: list[Tensor] | None) -> tuple[Tensor, list[Tensor]]:
    """A fixed random weighting of every float output, summed: one loss whose gradient reaches
    every output (the same weights for the eager and the compiled copy)."""
    outs = [t for t in tensors(net(**kwargs)) if t.is_floating_point()]
    if weights is None:
        gen = torch.Generator().manual_seed(2)
        weights = [torch.randn(t.shape, generator=gen) / t.numel() ** 0.5 for t in outs]
    return sum((t.float() * w).sum() for t, w in zip(outs, weights)), weights


def train(net: nn.Module, kwargs: dict, after_first=None) -> list[float]:
    """20 AdamW steps on one batch, dropout off; the losses."""
    net.eval()  # no dropout: the compiled copy would draw other masks
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.0)
    losses, weights = [], None
    for step in range(STEPS):
        loss, weights = scalar(net, kwargs, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == 0 and after_first is not None:
            after_first()
    return losses


def check(model: str, backend: str) -> dict:
    eager = randomise(build(model, []), seed=0)
    plain, padded = batch(eager, model, torch.Generator().manual_seed(0))
    kwargs = padded or plain  # padded where the family takes padding
    compiled_net = copy.deepcopy(eager)
    graphs = {"n": 0}

    def counting(gm, example_inputs):  # every graph handed to the compiler: the first compile and any recompile
        graphs["n"] += 1
        if backend == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)
        return torch._dynamo.backends.registry.lookup_backend(backend)(gm, example_inputs)

    compiled_forward = compile_net(compiled_net, backend=counting)  # as compile=true does, dynamo's settings too
    explained = torch._dynamo.explain(compiled_net)(**kwargs)
    reasons = [str(r.reason).splitlines()[0][:120] for r in explained.break_reasons]
    torch._dynamo.reset()

    first = {}
    start = time.perf_counter()
    compiled = train(compiled_forward, kwargs,
                     after_first=lambda: first.update(n=graphs["n"], s=time.perf_counter() - start))
    reference = train(eager, kwargs)
    scale = max(abs(x) for x in reference) or 1.0
    torch._dynamo.reset()
    return {"breaks": explained.graph_break_count, "reason": reasons[0] if reasons else "",
            "graphs": first["n"], "recompiles": graphs["n"] - first["n"], "compile_s": first["s"],
            "rel": max(abs(a - b) for a, b in zip(compiled, reference)) / scale}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model configs (default: every CPU-sized one)")
    parser.add_argument("--backend", default="inductor", help="inductor (what compile=true uses) | aot_eager (fast)")
    parser.add_argument("--max-params", type=float, default=8e6, help="the CPU-sized presets (each family's default)")
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="the largest relative loss difference over the 20 steps (the losses' largest |value| as the scale)")
    args = parser.parse_args()
    failed = []
    print(f"{'model':<22} {'breaks':>6} {'graphs':>6} {'recompiles':>10} {'compile s':>9} {'max rel diff':>12}  first break")
    for model in args.only or cpu_models(args.max_params):
        try:
            r = check(model, args.backend)
        except Exception as err:  # noqa: BLE001 (one family's failure is a row, not the end of the table)
            print(f"{model:<22} failed: {type(err).__name__}: {str(err).splitlines()[0][:150]}", flush=True)
            failed.append(model)
            continue
        print(f"{model:<22} {r['breaks']:>6} {r['graphs']:>6} {r['recompiles']:>10} {r['compile_s']:>9.1f} "
              f"{r['rel']:>12.2e}  {r['reason']}", flush=True)
        if r["breaks"] or r["recompiles"] or not r["rel"] <= args.rtol:
            failed.append(model)
    print(f"{len(failed)} failed: {' '.join(failed)}" if failed else "all passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""The mixture-of-experts dispatch (zoo/nn/moe.py): the zoo's Qwen3-MoE and Mixtral CPU presets
(``model=qwen3_moe``: 16 experts of 88, top 4; ``model=mixtral``: 8 experts of 176, top 2; both 4
layers, 128 wide, 4 / 2 heads, context 64) against ``Qwen3MoeForCausalLM`` / ``MixtralForCausalLM``
at the same shape and weights: training step time, and the MoE layers' share of the step.

    python benchmarks/moe.py                   # both rows
    python benchmarks/moe.py --rows mixtral --steps 20

The reference is built from its transformers config at the preset's shape and the zoo net is the
family's converter applied to it (``zoo.convert.<family>.from_transformers``, which the exactness
tests check), so both sides are one network. Four sides, run in turn: the zoo (the sorted
dispatch), the zoo with the per-expert loop it replaced (what a compiled graph still runs),
transformers as a user gets it (its default ``experts_implementation``: ``grouped_mm`` in
transformers 5) and transformers' ``eager`` loop. The loss is the cross-entropy on every side (no
load-balancing loss on any). The MoE layers' share: each side's MoE layers timed alone (forward and
backward on the inputs they had in the step) over its step time.
"""

from __future__ import annotations

import argparse
import importlib
import types

import torch
import torch.nn.functional as F
from torch import nn

from common import add_run_args, alternate_medians, make_step, peer
from zoo.convert.common import compose_config
from zoo.nn.moe import MoEFeedForward

transformers = peer("transformers")

ROWS = {"qwen3_moe": ("Qwen3MoeForCausalLM", 0.6), "mixtral": ("MixtralForCausalLM", 0.8)}


def reference_config(family: str, vocab: int, experts: str):
    """The transformers config of the zoo preset ``model=<family>`` (read from conf/model)."""
    net = compose_config([f"model={family}"]).model.net
    b = net.block
    sizes = dict(vocab_size=vocab, hidden_size=b.d_model, num_hidden_layers=net.n_layers, num_attention_heads=b.n_heads,
                 num_key_value_heads=b.n_kv_heads, max_position_embeddings=net.context, rms_norm_eps=b.norm_eps,
                 rope_theta=net.rotary_base, num_experts_per_tok=b.top_k, attn_implementation="sdpa",
                 experts_implementation=experts, tie_word_embeddings=False)
    if family == "mixtral":
        return transformers.MixtralConfig(**sizes, intermediate_size=b.d_ff, num_local_experts=b.n_experts)
    return transformers.Qwen3MoeConfig(**sizes, moe_intermediate_size=b.d_ff, num_experts=b.n_experts,
                                       norm_topk_prob=b.norm_topk, head_dim=b.d_model // b.n_heads)


def loop_dispatch(net: nn.Module) -> nn.Module:
    """``net`` with every MoE layer on the per-expert loop (the dispatch before the sorted one)."""
    for m in net.modules():
        if isinstance(m, MoEFeedForward):
            m.forward = types.MethodType(
                lambda self, x: self._loop(x.reshape(-1, x.shape[-1]), *self.route(x.reshape(-1, x.shape[-1]))).view_as(x), m)
    return net


def moe_seconds(layers: list[nn.Module], run, repeats: int) -> float:
    """Median seconds of ``layers`` alone, forward + backward, on the inputs one ``run()`` gave them."""
    inputs: list[torch.Tensor] = []
    hooks = [m.register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach())) for m in layers]
    run()
    for h in hooks:
        h.remove()

    def alone() -> None:
        for layer, x in zip(layers, inputs):
            out = layer(x.requires_grad_())
            (out[0] if isinstance(out, tuple) else out).sum().backward()
    return alternate_medians({"moe": alone}, repeats)["moe"]


def bench_row(family: str, a: argparse.Namespace) -> None:
    cls, goal = ROWS[family]
    converter = importlib.import_module(f"zoo.convert.{family}")
    tokens = torch.randint(5, a.vocab, (a.batch, 64))
    targets = torch.randint(5, a.vocab, tokens.shape)

    def reference(experts: str) -> nn.Module:
        torch.manual_seed(0)
        return getattr(transformers, cls)(reference_config(family, a.vocab, experts)).train()

    zoo, zoo_loop = converter.from_transformers(reference("eager")).train(), loop_dispatch(
        converter.from_transformers(reference("eager")).train())
    hf, hf_eager = reference("grouped_mm"), reference("eager")
    assert hf.config._experts_implementation == "grouped_mm", hf.config._experts_implementation
    sides = {"zoo": (zoo, lambda: zoo(tokens)), "zoo, loop dispatch": (zoo_loop, lambda: zoo_loop(tokens)),
             f"{cls} (grouped_mm)": (hf, lambda: hf(input_ids=tokens).logits),
             f"{cls} (eager loop)": (hf_eager, lambda: hf_eager(input_ids=tokens).logits)}
    steps = {label: make_step(model, lambda fwd=fwd: F.cross_entropy(fwd().flatten(0, 1), targets.flatten()), a.dtype,
                              compile=a.compile)  # False: main refuses --compile (eager dispatch is what is measured)
             for label, (model, fwd) in sides.items()}
    seconds = alternate_medians(steps, a.steps, warmup=a.warmup)
    b = compose_config([f"model={family}"]).model.net.block
    print(f"{family}: 4 layers, 128 wide, {b.n_experts} experts of {b.d_ff}, top-{b.top_k}, context 64, batch {a.batch}, "
          f"vocab {a.vocab}, {a.dtype}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    for label, (model, fwd) in sides.items():
        layers = [m for m in model.modules() if isinstance(m, MoEFeedForward) or type(m).__name__.endswith("SparseMoeBlock")]
        share = moe_seconds(layers, fwd, a.steps) / seconds[label]
        print(f"{label:>40}: step {seconds[label] * 1000:8.1f} ms   MoE layers {100 * share:5.1f}% of it", flush=True)
    ref = f"{cls} (grouped_mm)"
    print(f"{'zoo / transformers eager loop':>40}: {seconds['zoo'] / seconds[f'{cls} (eager loop)']:.2f}x   "
          f"zoo / zoo loop dispatch: {seconds['zoo'] / seconds['zoo, loop dispatch']:.2f}x")
    print(f"{family}: zoo / transformers step time = {seconds['zoo'] / seconds[ref]:.2f} (goal <= {goal})", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", choices=sorted(ROWS), default=["qwen3_moe", "mixtral"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=2000)
    add_run_args(p)
    a = p.parse_args()
    if a.device != "cpu" or a.compile:
        raise SystemExit("benchmarks/moe.py measures the CPU presets in eager mode: --device cpu, no --compile")
    for family in a.rows:
        bench_row(family, a)


if __name__ == "__main__":
    main()

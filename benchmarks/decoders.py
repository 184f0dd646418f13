"""The decoders read from the Hub's newer families against their transformers classes: zoo
Qwen3, Gemma 3 or Mixtral (``--family``) vs ``Qwen3ForCausalLM``, ``Gemma3ForCausalLM``,
``MixtralForCausalLM``: training step time and peak memory.

    python benchmarks/decoders.py                    # Qwen3: 4 layers, 256 wide, 4/2 heads, context 512
    python benchmarks/decoders.py --family gemma3    # 6 layers: 5 local (window 128), then a global one
    python benchmarks/decoders.py --family mixtral   # 8 experts of 344, top-2

Both sides are one network: the reference is built from its transformers config at the shape
below (under SDPA, as a user gets it) and the zoo net is the family's own converter applied to it
(``zoo.convert.<family>.from_transformers``: the configs and weights the exactness tests check),
so the parameter counts are equal. The loss is cross-entropy over every position on both sides;
Mixtral's also adds the router's load-balancing loss on neither side (``output_router_logits``
off, the zoo net called as a plain module), so the step is the same work.
"""

from __future__ import annotations

import argparse
import importlib

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer

transformers = peer("transformers")


def reference_config(family: str, a: argparse.Namespace):
    """The transformers config of ``family`` at the benchmark's shape."""
    sizes = dict(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.ff, num_hidden_layers=a.layers,
                 num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.context,
                 attn_implementation="sdpa", tie_word_embeddings=False)
    if family == "qwen3":
        return transformers.Qwen3Config(**sizes, head_dim=a.width // a.heads)
    if family == "gemma3":
        return transformers.Gemma3TextConfig(**sizes, head_dim=a.width // a.heads, sliding_window=a.window,
                                             query_pre_attn_scalar=a.width // a.heads)
    return transformers.MixtralConfig(**sizes, num_local_experts=a.experts, num_experts_per_tok=a.top_k)


CLASSES = {"qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM", "mixtral": "MixtralForCausalLM"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=sorted(CLASSES), default="qwen3")
    p.add_argument("--layers", type=int, help="default: 4, gemma3 6 (five local layers, then a global one)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2, help="grouped-query key/value heads")
    p.add_argument("--ff", type=int, help="feed-forward width (each expert's for mixtral): default 688, mixtral 344")
    p.add_argument("--experts", type=int, default=8, help="mixtral: experts per layer")
    p.add_argument("--top-k", type=int, default=2, help="mixtral: experts per token")
    p.add_argument("--window", type=int, default=128, help="gemma3: its local layers' sliding window")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2000)
    add_run_args(p)
    a = p.parse_args()
    a.ff = a.ff or (344 if a.family == "mixtral" else 688)
    a.layers = a.layers or (6 if a.family == "gemma3" else 4)
    torch.manual_seed(0)
    cfg = reference_config(a.family, a)
    converter = importlib.import_module(f"zoo.convert.{a.family}")
    tokens = torch.randint(5, a.vocab, (a.batch, a.context), device=a.device)
    targets = torch.randint(5, a.vocab, tokens.shape, device=a.device)

    def reference():
        torch.manual_seed(0)
        return getattr(transformers, CLASSES[a.family])(cfg).train()

    def zoo():
        net = converter.from_transformers(reference()).to(a.device).train()
        return make_step(net, lambda: F.cross_entropy(net(tokens).flatten(0, 1), targets.flatten()), a.dtype, compile=a.compile)

    def hf():
        ref = reference().to(a.device)
        return make_step(ref, lambda: F.cross_entropy(ref(input_ids=tokens).logits.flatten(0, 1),
                                                      targets.flatten()), a.dtype, compile=a.compile)

    extra = {"qwen3": "qk-norm", "gemma3": f"window {a.window} on 5 of every 6 layers, qk-norm, sandwich norms",
             "mixtral": f"{a.experts} experts of {a.ff}, top-{a.top_k}"}[a.family]
    shape = (f"{a.layers} layers, {a.width} wide, {a.heads} heads, {a.kv_heads} kv heads, ff {a.ff}, {extra}, "
             f"context {a.context}, batch {a.batch}, vocab {a.vocab}")
    compare(a.family, shape, f"zoo {CLASSES[a.family].removesuffix('ForCausalLM')}", zoo, {CLASSES[a.family]: hf}, a)


if __name__ == "__main__":
    main()

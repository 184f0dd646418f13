"""zoo GPT vs Hugging Face GPT2LMHeadModel: training step time and peak memory.

    python benchmarks/gpt.py                     # 6 layers, 384 wide, context 256, batch 8, fp32, CPU
    python benchmarks/gpt.py --device cuda --layers 12 --width 768 --context 1024
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from common import compare, make_step
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.gpt2 import gpt2_shape


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=a.vocab, n_positions=a.context, n_embd=a.width, n_layer=a.layers, n_head=a.heads,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    x = torch.randint(0, a.vocab, (a.batch, a.context), device=a.device)
    y = torch.randint(0, a.vocab, (a.batch, a.context), device=a.device)
    print(f"GPT {a.layers} layers, {a.width} wide, context {a.context}, batch {a.batch}, fp32, {a.device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    def zoo_step():
        zoo = build_net("gpt", shape_overrides(gpt2_shape(cfg.to_dict())), {"vocab_size": a.vocab}).to(a.device).train()
        return make_step(zoo, lambda: F.cross_entropy(zoo(x).flatten(0, 1), y.flatten()))

    def ref_step():
        ref = GPT2LMHeadModel(cfg).to(a.device).train()
        return make_step(ref, lambda: F.cross_entropy(ref(x).logits.flatten(0, 1), y.flatten()))

    compare("zoo GPT", zoo_step, "GPT2LMHeadModel", ref_step, steps=a.steps, device=a.device)


if __name__ == "__main__":
    main()

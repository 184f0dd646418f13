"""zoo GPT vs transformers GPT2LMHeadModel, litgpt GPT and x-transformers
TransformerWrapper(Decoder): training step time and peak memory at the same shape.

    python benchmarks/gpt.py                     # 6 layers, 384 wide, context 256, batch 8, fp32, CPU
    python benchmarks/gpt.py --device cuda --dtype bf16 --layers 12 --width 768 --heads 12 --context 1024 \
        --vocab 50304 --batch 16 --compile      # GPT-2 small (nanoGPT's padded vocabulary), MFU (benchmarks/gpu.sh)

All four are GPT-2-like: pre-LN LayerNorm, GELU MLP 4x wide, biases, causal attention. Where they
differ: litgpt has no learned positions (rotary on every head dimension instead) and its own
untied head; x-transformers has no bias on q/k/v/out (its Attention has none).

MFU is the zoo's analytic count of one step's training FLOPs (``net.batch_flops``, zoo/nn/flops.py:
the matmuls, forward + backward) over each model's step time, against the device's peak.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.gpt2 import gpt2_shape

transformers = peer("transformers")
litgpt_model = peer("litgpt.model")
litgpt_config = peer("litgpt.config")
x_transformers = peer("x_transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=65)
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=a.vocab, n_positions=a.context, n_embd=a.width, n_layer=a.layers,
                                  n_head=a.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=0, eos_token_id=0)
    x = torch.randint(0, a.vocab, (a.batch, a.context), device=a.device)
    y = torch.randint(0, a.vocab, (a.batch, a.context), device=a.device)

    def lm_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model).flatten(0, 1), y.flatten()), a.dtype,
                         compile=a.compile)

    def zoo_net():
        return build_net("gpt", shape_overrides(gpt2_shape(cfg.to_dict())), {"vocab_size": a.vocab})

    def zoo():
        return lm_step(zoo_net(), lambda m: m(x))

    def hf():
        return lm_step(transformers.GPT2LMHeadModel(cfg), lambda m: m(x).logits)

    def litgpt():
        config = litgpt_config.Config(
            n_layer=a.layers, n_head=a.heads, n_embd=a.width, block_size=a.context, vocab_size=a.vocab,
            padded_vocab_size=a.vocab, bias=True, norm_class_name="LayerNorm", norm_eps=1e-5,
            mlp_class_name="GptNeoxMLP", intermediate_size=4 * a.width, gelu_approximate="tanh",
            parallel_residual=False, rotary_percentage=1.0)
        return lm_step(litgpt_model.GPT(config), lambda m: m(x))

    def xt():
        net = x_transformers.TransformerWrapper(
            num_tokens=a.vocab, max_seq_len=a.context, tie_embedding=True,
            attn_layers=x_transformers.Decoder(dim=a.width, depth=a.layers, heads=a.heads,
                                                 attn_dim_head=a.width // a.heads, ff_mult=4))
        return lm_step(net, lambda m: m(x))

    with torch.device("meta"):  # the count needs only the shapes: no weights are made
        flops = zoo_net().batch_flops(x)
    shape = (f"{a.layers} layers, {a.width} wide, {a.heads} heads, context {a.context}, batch {a.batch}"
             f"{', compiled' if a.compile else ''}")
    compare("gpt", shape, "zoo GPT", zoo, {"GPT2LMHeadModel": hf, "litgpt GPT": litgpt,
                                           "x-transformers Decoder": xt}, a, flops)


if __name__ == "__main__":
    main()

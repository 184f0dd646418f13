"""zoo Transformer (model=transformer, "Attention Is All You Need") vs transformers MarianMTModel
and x-transformers XTransformer: training step time and peak memory at the same shape.

    python benchmarks/transformer.py              # 3+3 layers, 256 wide, 4 heads, FFN 1024, vocab 8000, fp32, CPU
    python benchmarks/transformer.py --layers 6 --width 512 --heads 8 --ff 2048    # the paper's base

MarianMTModel is transformers' encoder-decoder of that design: post-LN, ReLU, sinusoidal
positions, embeddings x sqrt(d_model), one vocabulary shared by source, target and the tied
head (it adds a final logits bias). x-transformers is set post-LN with ReLU and scaled
sinusoidal positions; it has no bias on q/k/v/out, an untied head, and it takes the loss on
target[:, 1:] of a target one token longer.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from common import add_run_args, compare, make_step, peer
from zoo.convert.common import build_net

transformers = peer("transformers")
x_transformers = peer("x_transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--source", type=int, default=40, help="source tokens")
    p.add_argument("--target", type=int, default=40, help="target tokens")
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    context = max(a.source, a.target + 1)
    src = torch.randint(3, a.vocab, (a.batch, a.source), device=a.device)
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[: a.batch // 2, a.source * 3 // 4:] = False  # half the rows padded
    tgt_in = torch.randint(3, a.vocab, (a.batch, a.target), device=a.device)
    tgt_out = torch.randint(3, a.vocab, (a.batch, a.target), device=a.device)

    def seq2seq_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model).flatten(0, 1), tgt_out.flatten()), a.dtype, compile=a.compile)

    def zoo():
        shape = {"n_encoder_layers": a.layers, "n_decoder_layers": a.layers, "context": context,
                 "block.d_model": a.width, "block.n_heads": a.heads, "block.d_ff": a.ff, "block.dropout": 0.0}
        net = build_net("transformer", [f"model.net.{k}={v}" for k, v in shape.items()], {"vocab_size": a.vocab})
        return seq2seq_step(net, lambda m: m(src, tgt_in, mask))

    def marian():
        cfg = transformers.MarianConfig(
            vocab_size=a.vocab, decoder_vocab_size=a.vocab, d_model=a.width, encoder_layers=a.layers,
            decoder_layers=a.layers, encoder_attention_heads=a.heads, decoder_attention_heads=a.heads,
            encoder_ffn_dim=a.ff, decoder_ffn_dim=a.ff, activation_function="relu", dropout=0.0,
            attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=context, scale_embedding=True,
            share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
            decoder_start_token_id=0)
        return seq2seq_step(transformers.MarianMTModel(cfg), lambda m: m(
            input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt_in).logits)

    def xt():
        tgt = torch.cat([tgt_in, tgt_out[:, -1:]], dim=1)  # it trains on tgt[:, :-1] -> tgt[:, 1:]
        stack = {"depth": a.layers, "heads": a.heads, "attn_dim_head": a.width // a.heads, "ff_mult": a.ff / a.width,
                 "pre_norm": False, "ff_custom_activation": nn.ReLU(), "scaled_sinu_pos_emb": True,
                 "num_tokens": a.vocab, "max_seq_len": context}
        net = x_transformers.XTransformer(
            dim=a.width, tie_token_emb=True, **{f"{side}_{k}": v for side in ("enc", "dec") for k, v in stack.items()})
        net = net.to(a.device).train()
        return make_step(net, lambda: net(src, tgt, mask=mask), a.dtype, compile=a.compile)

    shape = (f"{a.layers}+{a.layers} layers, {a.width} wide, {a.heads} heads, FFN {a.ff}, vocab {a.vocab}, "
             f"batch {a.batch} x ({a.source} -> {a.target})")
    compare("transformer", shape, "zoo Transformer", zoo, {"MarianMTModel": marian,
                                                           "x-transformers XTransformer": xt}, a)


if __name__ == "__main__":
    main()

"""zoo BERT vs transformers BertForMaskedLM and x-transformers TransformerWrapper(Encoder):
masked-LM training step time and peak memory at the same shape.

All get the same corrupted batch and the same selected positions; each computes its MLM loss
the way it trains: BertForMaskedLM and x-transformers score every position (labels -100
elsewhere), the zoo's MaskedLM sends only the selected ~15% through the head (``keep``).
x-transformers' Encoder is set post-LN like BERT, learned positions; it has no bias on
q/k/v/out, no token types, no embedding LayerNorm and no MLM head transform.

    python benchmarks/bert.py                    # 4 layers, 256 wide, seq 128, batch 16, vocab 30522, fp32, CPU
    python benchmarks/bert.py --layers 12 --width 768 --heads 12 --batch 8     # BERT-base
    python benchmarks/bert.py --full-head        # the zoo also scores every position (backbone parity)
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer
from zoo.convert.bert import bert_shape
from zoo.convert.common import build_net
from zoo.objectives.mlm import mask_tokens

transformers = peer("transformers")
x_transformers = peer("x_transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--full-head", action="store_true",
                   help="the zoo scores every position too (and takes the loss on the selected ones): "
                        "isolates the backbone from the head-on-selected-positions saving")
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=a.vocab, hidden_size=a.width, num_hidden_layers=a.layers, num_attention_heads=a.heads,
        intermediate_size=4 * a.width, max_position_embeddings=max(512, a.seq), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    tokens = torch.randint(5, a.vocab, (a.batch, a.seq), device=a.device)
    padding = torch.ones_like(tokens, dtype=torch.bool)
    inputs, selected = mask_tokens(tokens, padding, torch.arange(5, device=a.device), 4, a.vocab, 0.15, 0.8, 0.1)
    labels = torch.where(selected, tokens, -100)

    def zoo():
        overrides = [f"model.net.{k}={v}" for k, v in bert_shape(cfg.to_dict()).items()]
        net = build_net("bert", [*overrides, "model.net.block.dropout=0.0", "model.net.block.attn_dropout=0.0"],
                        {"vocab_size": a.vocab}).to(a.device).train()

        def loss():
            if a.full_head:
                return F.cross_entropy(net(inputs, key_padding=padding).flatten(0, 1), labels.flatten())
            return F.cross_entropy(net(inputs, key_padding=padding, keep=selected), tokens[selected])

        return make_step(net, loss, a.dtype, compile=a.compile)

    def hf():
        ref = transformers.BertForMaskedLM(cfg).to(a.device).train()
        return make_step(ref, lambda: ref(input_ids=inputs, labels=labels).loss, a.dtype, compile=a.compile)

    def xt():
        net = x_transformers.TransformerWrapper(
            num_tokens=a.vocab, max_seq_len=a.seq, tie_embedding=True,
            attn_layers=x_transformers.Encoder(dim=a.width, depth=a.layers, heads=a.heads, attn_dim_head=a.width // a.heads,
                                               ff_mult=4, pre_norm=False),
        ).to(a.device).train()
        return make_step(net, lambda: F.cross_entropy(net(inputs, mask=padding).flatten(0, 1), labels.flatten()), a.dtype, compile=a.compile)

    shape = (f"{a.layers} layers, {a.width} wide, {a.heads} heads, seq {a.seq}, batch {a.batch}, vocab {a.vocab}, "
             f"{int(selected.sum())} masked")
    compare("bert", shape, "zoo BERT (MaskedLM)", zoo, {"BertForMaskedLM": hf, "x-transformers Encoder": xt}, a)


if __name__ == "__main__":
    main()

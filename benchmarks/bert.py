"""zoo BERT vs Hugging Face BertForMaskedLM: masked-LM training step time and peak memory.

Both models have the same shape and get the same corrupted batch and the same selected
positions; each computes its own MLM loss the way it trains: BertForMaskedLM
scores every position (labels -100 elsewhere), the zoo's MaskedLM sends only the
selected ~15% through the head (``keep``).

    python benchmarks/bert.py                    # 4 layers, 256 wide, seq 128, batch 16, vocab 30522, fp32, CPU
    python benchmarks/bert.py --layers 12 --width 768 --heads 12 --batch 8     # BERT-base
    python benchmarks/bert.py --full-head        # the zoo also scores every position (backbone parity)
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

from common import compare, make_step
from zoo.convert.bert import bert_shape
from zoo.convert.common import build_net
from zoo.objectives.mlm import mask_tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--full-head", action="store_true",
                   help="the zoo scores every position too (and takes the loss on the selected ones): "
                        "isolates the backbone from the head-on-selected-positions saving")
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=a.vocab, hidden_size=a.width, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                     intermediate_size=4 * a.width, max_position_embeddings=max(512, a.seq),
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    tokens = torch.randint(5, a.vocab, (a.batch, a.seq), device=a.device)
    padding = torch.ones_like(tokens, dtype=torch.bool)
    inputs, selected = mask_tokens(tokens, padding, torch.arange(5, device=a.device), 4, a.vocab, 0.15, 0.8, 0.1)
    labels = torch.where(selected, tokens, -100)
    print(f"BERT {a.layers} layers, {a.width} wide, seq {a.seq}, batch {a.batch}, vocab {a.vocab}, "
          f"{int(selected.sum())} masked, fp32, {a.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")

    def zoo_step():
        overrides = [f"model.net.{k}={v}" for k, v in bert_shape(cfg.to_dict()).items()]
        zoo = build_net("bert", [*overrides, "model.net.block.dropout=0.0", "model.net.block.attn_dropout=0.0"],
                        {"vocab_size": a.vocab}).to(a.device).train()
        if a.full_head:
            return make_step(zoo, lambda: F.cross_entropy(zoo(inputs, key_padding=padding).flatten(0, 1), labels.flatten()))
        return make_step(zoo, lambda: F.cross_entropy(zoo(inputs, key_padding=padding, keep=selected), tokens[selected]))

    def ref_step():
        ref = BertForMaskedLM(cfg).to(a.device).train()
        return make_step(ref, lambda: ref(input_ids=inputs, labels=labels).loss)

    compare("zoo BERT (MaskedLM)", zoo_step, "BertForMaskedLM", ref_step, steps=a.steps, device=a.device)

if __name__ == "__main__":
    main()

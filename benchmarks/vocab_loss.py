"""The loss of a large vocabulary: a zoo Qwen3 whose next-token loss runs by chunks of positions
(``model.loss_chunk``, :mod:`zoo.nn.chunked_loss`: the logits never whole) against transformers'
``Qwen3ForCausalLM`` with its own loss over the full (B, L, V) logits: training step time and peak memory.

    python benchmarks/vocab_loss.py                  # 2 layers, 256 wide, Qwen3's 151,936 tokens, 2 x 512
    python benchmarks/vocab_loss.py --chunk 512

The shape is Qwen3's with its real vocabulary and tied head (Qwen3-0.6B's), the layers and width shrunk
to fit a CPU: the head is then most of the step, as the vocabulary's share of a large model's memory.
Both sides are one network (the zoo net is ``zoo.convert.qwen3.from_transformers`` of the reference,
the converter the exactness tests check) and compute the same loss (transformers shifts its labels
inside; the zoo's targets are the tokens shifted, the last position -100). Peak memory is each side's
resident-set growth (VmHWM) in a fresh subprocess while it is built and trains two steps: weights,
gradients, AdamW's state and the step's activations and logits (``benchmarks/common.py``).
"""

from __future__ import annotations

import argparse
import os

import torch

from common import MEMORY_ENV, add_run_args, compare, make_step, peer

transformers = peer("transformers")

QWEN3_VOCAB = 151_936


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ff", type=int, default=688)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    p.add_argument("--chunk", type=int, default=256, help="the zoo's model.loss_chunk: positions per chunk")
    add_run_args(p, steps=5)
    a = p.parse_args()
    from zoo.convert.qwen3 import from_transformers

    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.ff, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.width // a.heads,
        max_position_embeddings=a.context, tie_word_embeddings=True, attn_implementation="sdpa")
    tokens = torch.randint(0, a.vocab, (a.batch, a.context), device=a.device)
    targets = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], 1)  # transformers' shift

    def reference():
        torch.manual_seed(0)
        return transformers.Qwen3ForCausalLM(cfg).train()

    def zoo():
        net = from_transformers(reference()).to(a.device).train()
        return make_step(net, lambda: net.head.chunked_loss(net.hidden(tokens), targets, a.chunk), a.dtype,
                         compile=a.compile)

    def hf():
        ref = reference().to(a.device)
        return make_step(ref, lambda: ref(input_ids=tokens, labels=tokens).loss, a.dtype, compile=a.compile)

    if not os.environ.get(MEMORY_ENV):  # (not in a memory subprocess: it would count these models)
        with torch.no_grad():
            net, ref = from_transformers(reference()).to(a.device), reference().to(a.device)
            ours, theirs = net.head.chunked_loss(net.hidden(tokens), targets, a.chunk), ref(input_ids=tokens, labels=tokens).loss
        print(f"the same loss: zoo {ours.item():.6f}, transformers {theirs.item():.6f}")
        del net, ref
    shape = (f"{a.layers} layers, {a.width} wide, {a.heads} heads, {a.kv_heads} kv heads, ff {a.ff}, tied head, "
             f"vocab {a.vocab:,}, batch {a.batch} x {a.context}, zoo loss chunk {a.chunk}")
    r = compare("qwen3_vocab", shape, "zoo Qwen3 (loss_chunk)", zoo, {"Qwen3ForCausalLM": hf}, a)
    print(f"qwen3_vocab: zoo / transformers peak memory = {r['memory_ratio']:.3f} (goal <= 0.5)")
    print(f"qwen3_vocab: zoo / transformers step time = {r['time_ratio']:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()

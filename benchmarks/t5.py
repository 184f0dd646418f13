"""zoo T5 vs transformers T5ForConditionalGeneration and x-transformers XTransformer at the
same shape: training step time and peak memory; then (unless --no-decode) beam-search
throughput (sentences/s) of zoo.models.decoding.beam_search vs ``generate(num_beams=...)``
on the same (converted) weights.

x-transformers is set up T5-like: RMSNorm, T5 relative position bias, no absolute positions,
no biases, ReLU (v1.0) or GEGLU (v1.1) feed-forward, shared token embedding; its output head is
its own (untied) and it takes the loss on target[:, 1:] of a target one token longer.

    python benchmarks/t5.py                       # 4+4 layers, 256 wide, vocab 8000, fp32, CPU
    python benchmarks/t5.py --variant v1.1 --layers 6 --width 512 --heads 8 --ff 2048
    python benchmarks/t5.py --device cuda --layers 6 --width 512 --heads 8 --ff 2048 --batch 64
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from common import add_run_args, alternate_medians, compare, make_step, peer
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.t5 import EXTRA, from_transformers, t5_shape
from zoo.models.decoding import beam_search, strip_eos

transformers = peer("transformers")
x_transformers = peer("x_transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=["v1.0", "v1.1"], default="v1.0")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--source", type=int, default=64, help="source tokens")
    p.add_argument("--target", type=int, default=32, help="target tokens")
    p.add_argument("--no-decode", action="store_true", help="time the training step only")
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    v11 = a.variant == "v1.1"
    cfg = transformers.T5Config(
        vocab_size=a.vocab, d_model=a.width, d_kv=a.width // a.heads, d_ff=a.ff, num_layers=a.layers,
        num_heads=a.heads, dropout_rate=0.0, feed_forward_proj="gated-gelu" if v11 else "relu",
        tie_word_embeddings=not v11, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    src = torch.randint(2, a.vocab, (a.batch, a.source), device=a.device)
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[: a.batch // 2, a.source * 3 // 4:] = False  # half the rows padded
    tgt_in = torch.randint(2, a.vocab, (a.batch, a.target), device=a.device)
    tgt_out = torch.randint(2, a.vocab, (a.batch, a.target), device=a.device)

    def zoo():
        net = build_net("t5", shape_overrides(t5_shape(cfg.to_dict(), tied=not v11)), {"vocab_size": a.vocab - EXTRA})
        net = net.to(a.device).train()
        return make_step(net, lambda: F.cross_entropy(net(src, tgt_in, mask).flatten(0, 1), tgt_out.flatten()), a.dtype, compile=a.compile)

    def hf():
        ref = transformers.T5ForConditionalGeneration(cfg).to(a.device).train()

        def loss():
            logits = ref(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt_in).logits
            return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())

        return make_step(ref, loss, a.dtype, compile=a.compile)

    def xt():
        tgt = torch.cat([tgt_in, tgt_out[:, -1:]], dim=1)  # it trains on tgt[:, :-1] -> tgt[:, 1:]
        stack = {"depth": a.layers, "heads": a.heads, "attn_dim_head": a.width // a.heads, "ff_mult": a.ff / a.width,
                 "use_rmsnorm": True, "rel_pos_bias": True, "use_abs_pos_emb": False, "ff_no_bias": True,
                 "num_tokens": a.vocab, "max_seq_len": max(a.source, a.target + 1)}
        stack |= {"ff_glu": True} if v11 else {"ff_custom_activation": nn.ReLU()}
        net = x_transformers.XTransformer(
            dim=a.width, tie_token_emb=True, **{f"{side}_{k}": v for side in ("enc", "dec") for k, v in stack.items()})
        net = net.to(a.device).train()
        return make_step(net, lambda: net(src, tgt, mask=mask), a.dtype, compile=a.compile)

    shape = (f"{a.variant}, {a.layers}+{a.layers} layers, {a.width} wide, {a.heads} heads, FFN {a.ff}, "
             f"vocab {a.vocab}, batch {a.batch} x ({a.source} -> {a.target})")
    compare("t5", shape, "zoo T5", zoo, {"T5ForConditionalGeneration": hf, "x-transformers XTransformer": xt}, a)
    if a.no_decode:
        return

    # Beam search: the same weights, the same sources; both stop when every row is done.
    ref = transformers.T5ForConditionalGeneration(cfg).to(a.device).eval()
    zoo = from_transformers(ref).to(a.device).eval()
    prompt = torch.zeros(a.batch, 1, dtype=torch.long, device=a.device)

    def zoo_beam():
        return beam_search(zoo, src, prompt, 1, mask, beam_size=a.beams, max_new_tokens=a.new_tokens)

    def ref_beam():
        return ref.generate(input_ids=src, attention_mask=mask.long(), num_beams=a.beams, max_new_tokens=a.new_tokens,
                            do_sample=False, early_stopping=False)

    with torch.no_grad():
        medians = alternate_medians({"zoo": zoo_beam, "ref": ref_beam}, a.repeats, a.device)
        # generate's rows: start token, ids, eos, then padding (0)
        ref_rows = [row[: row.index(1)] if 1 in row else row for row in ref_beam()[:, 1:].tolist()]
        same = sum(z == r for z, r in zip(strip_eos(zoo_beam(), 1), ref_rows))
    t_zoo, t_ref = medians["zoo"], medians["ref"]
    print(f"{'zoo beam_search':>24}: {a.batch / t_zoo:8.1f} sentences/s")
    print(f"{'generate(num_beams)':>24}: {a.batch / t_ref:8.1f} sentences/s")
    print(f"{'ratio zoo/reference':>24}: time {t_zoo / t_ref:.3f}x   (beams {a.beams}, up to {a.new_tokens} new tokens)")
    print(f"{'(random weights)':>24}: {same}/{a.batch} outputs identical token for token (with padding)")


if __name__ == "__main__":
    main()

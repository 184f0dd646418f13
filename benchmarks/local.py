"""zoo Mistral vs transformers MistralForCausalLM, zoo GPT-Neo vs GPTNeoForCausalLM, or zoo
ModernBERT vs ModernBertForMaskedLM (``--family``): training step time and peak memory at a
context the sliding window cuts, the zoo under ``--backend sdpa`` (a dense boolean mask, as the
reference) or ``blocks`` (only the key blocks the window lets each block of queries see,
zoo/nn/blocked.py), one of each per run.

    python benchmarks/local.py                   # Mistral: 4 layers, 256 wide, 4/2 heads, context 512, window 128
    python benchmarks/local.py --backend blocks
    python benchmarks/local.py --family modernbert   # 6 layers (a global one every third), 256 wide, window 128
    python benchmarks/local.py --family gpt_neo      # 4 layers, global and local in turn, 256 wide, window 128
    python benchmarks/local.py --family modernbert --full-head   # both sides score every position

The Mistral and ModernBERT references run under SDPA (``attn_implementation="sdpa"``): Mistral's
window (query i sees keys i - window < j <= i) and ModernBERT's (|i - j| <= window / 2 in its
local layers) become a dense boolean mask there. transformers' GPT-Neo has no SDPA path: its
attention is eager (the scores as a matrix, its local layers' window a boolean bias). The zoo
nets are conf/model/<family>.yaml reshaped to the Hugging Face config by the converters
(MISTRAL.shape, gpt_neo_shape, modernbert_shape), as tests/test_mistral.py, tests/test_gpt_neo.py
and tests/test_modernbert.py do: the same networks. The decoders' loss is cross-entropy over
every position on both sides. ModernBERT's is the masked LM on the same corrupted batch: the
zoo's MaskedLM sends only the selected ~15% through its head (``keep``) and
ModernBertForMaskedLM does the same (``sparse_prediction=True``); ``--full-head`` scores every
position on both sides.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.gpt_neo import gpt_neo_shape
from zoo.convert.mistral import MISTRAL
from zoo.convert.modernbert import modernbert_shape
from zoo.objectives.mlm import mask_tokens

transformers = peer("transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=["mistral", "gpt_neo", "modernbert"], default="mistral")
    p.add_argument("--backend", choices=["sdpa", "blocks"], default="sdpa", help="the zoo's attention_backend")
    p.add_argument("--layers", type=int, help="default: 4 (mistral; gpt_neo: global and local in turn), "
                   "6 (modernbert: a global layer every third)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2, help="mistral's grouped-query key/value heads")
    p.add_argument("--ff", type=int,
                   help="feed-forward width: default 688 (mistral), 4 x width (gpt_neo), 384 (modernbert)")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--full-head", action="store_true", help="modernbert: both sides score every position")
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    layers = a.layers or (6 if a.family == "modernbert" else 4)
    ff = a.ff or {"mistral": 688, "gpt_neo": 4 * a.width, "modernbert": 384}[a.family]
    sizes = dict(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=ff, num_hidden_layers=layers,
                  num_attention_heads=a.heads, max_position_embeddings=a.context, attn_implementation="sdpa")
    tokens = torch.randint(5, a.vocab, (a.batch, a.context), device=a.device)
    backend = [f"model.net.attention_backend={a.backend}"]
    if a.family in ("mistral", "gpt_neo"):
        targets = torch.randint(5, a.vocab, tokens.shape, device=a.device)
        if a.family == "mistral":
            cfg = transformers.MistralConfig(**sizes, num_key_value_heads=a.kv_heads, rms_norm_eps=1e-6,
                                             sliding_window=a.window)
            net_shape, ref_class = MISTRAL.shape(cfg.to_dict()), transformers.MistralForCausalLM
            zoo_name, extra = "zoo Mistral", f"{a.kv_heads} kv heads"
        else:
            cfg = transformers.GPTNeoConfig(
                vocab_size=a.vocab, hidden_size=a.width, intermediate_size=ff, num_layers=layers, num_heads=a.heads,
                max_position_embeddings=a.context, attention_types=[[["global", "local"], layers // 2]],
                window_size=a.window, embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0, bos_token_id=1,
                eos_token_id=2)
            net_shape, ref_class = gpt_neo_shape(cfg.to_dict()), transformers.GPTNeoForCausalLM
            zoo_name, extra = "zoo GPT-Neo", "global and local layers in turn"

        def zoo():
            net = build_net(a.family, shape_overrides(net_shape) + backend,
                            {"vocab_size": a.vocab}).to(a.device).train()
            return make_step(net, lambda: F.cross_entropy(net(tokens).flatten(0, 1), targets.flatten()), a.dtype,
                             compile=a.compile)

        reference = ref_class.__name__

        def hf():
            ref = ref_class(cfg).to(a.device).train()
            return make_step(ref, lambda: F.cross_entropy(ref(input_ids=tokens).logits.flatten(0, 1),
                                                          targets.flatten()), a.dtype, compile=a.compile)
    else:
        cfg = transformers.ModernBertConfig(
            **sizes, local_attention=a.window, global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, cls_token_id=1, sep_token_id=2, sparse_prediction=not a.full_head)
        padding = torch.ones_like(tokens, dtype=torch.bool)
        inputs, selected = mask_tokens(tokens, padding, torch.arange(5, device=a.device), 4, a.vocab, 0.15, 0.8, 0.1)
        labels = torch.where(selected, tokens, -100)

        def zoo():
            net = build_net("modernbert", shape_overrides(modernbert_shape(cfg.to_dict())) + backend,
                            {"vocab_size": a.vocab}).to(a.device).train()

            def loss():
                if a.full_head:
                    return F.cross_entropy(net(inputs).flatten(0, 1), labels.flatten())
                return F.cross_entropy(net(inputs, keep=selected), tokens[selected])

            return make_step(net, loss, a.dtype, compile=a.compile)

        def hf():
            ref = transformers.ModernBertForMaskedLM(cfg).to(a.device).train()
            return make_step(ref, lambda: ref(input_ids=inputs, labels=labels).loss, a.dtype, compile=a.compile)

        zoo_name, reference = "zoo ModernBERT (MaskedLM)", "ModernBertForMaskedLM"
        extra = f"global every 3rd layer, {int(selected.sum())} masked{', full head' if a.full_head else ''}"
    family = a.family if a.backend == "sdpa" else f"{a.family}-{a.backend}"
    shape = (f"{layers} layers, {a.width} wide, {a.heads} heads, {extra}, context {a.context}, window {a.window}, "
             f"batch {a.batch}, vocab {a.vocab}; zoo attention_backend={a.backend}")
    compare(family, shape, f"{zoo_name}, {a.backend}", zoo, {reference: hf}, a)


if __name__ == "__main__":
    main()

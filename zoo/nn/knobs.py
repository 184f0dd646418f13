"""What each knob of the Block is, as data: the one place that says it.

Every field of :class:`zoo.nn.block.BlockConfig` has a :class:`Knob` here (a test fails on a field
without one), and so do the two arguments a stack hands a :class:`~zoo.nn.block.Block` itself. From
these entries come ``python -m zoo describe``'s Block column (every knob a preset sets away from its
default, in its words) and docs/design.md's knob table (:func:`knob_table`; a test fails when the page
differs, and ``python tools/design_tables.py --write`` rewrites it). Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

PARTS = ("norm", "attention", "feed-forward", "regularisation", "shape")  # a knob's part of the Block


@dataclass(frozen=True)
class Knob:
    """One knob: its ``part`` of the Block (:data:`PARTS`); ``label``, describe's words for a value
    away from the default (``{}`` takes the value; a flag's label says it flipped); ``values`` and
    ``why``, its row of docs/design.md's table, or ``row``, the knob whose row it shares there;
    ``always``: describe shows it at its default too (the norm and the activation every Block has)."""

    part: str
    label: str
    values: str = ""
    why: str = ""
    row: str | None = None
    always: bool = False

    def words(self, value: Any) -> str:
        """describe's words for ``value`` (a float as ``%g``: 1e-06, 0.1, 50)."""
        if isinstance(value, bool):
            return self.label
        return self.label.format(f"{value:g}" if isinstance(value, float) else value)


# BlockConfig's fields, in the order of docs/design.md's table (part by part).
KNOBS: dict[str, Knob] = {
    "norm": Knob("norm", "{}", "`layernorm` / `rmsnorm` / `rmsnorm_1p`",
                 "RMSNorm: T5, Llama, Qwen, OLMo 2; `rmsnorm_1p` scales by 1 + w (Gemma 2/3, weight starting at 0); "
                 "eps differs per family (1e-5, 1e-6, 1e-12); one class for every norm of the stack (timm's "
                 "`norm_layer`, as a name)", always=True),
    "norm_eps": Knob("norm", "eps {}", row="norm"),
    "norm_bias": Knob("norm", "no norm bias", row="norm"),
    "prenorm": Knob("norm", "post-LN", "pre (GPT, ViT, Whisper, T5, Llama) / post (original Transformer, BERT)",
                    "where the norm sits decides the function, not just the training"),
    "input_norm": Knob("norm", "no input norm", "on / off", "pre-LN: a norm on each sublayer's input; OLMo 2 has none"),
    "output_norm": Knob("norm", "output norm", "off / on",
                        "a norm on each sublayer's output before the residual add (`attn_out_norm`, `ffn_out_norm`): "
                        "Gemma 2/3 (beside the input norms), OLMo 2 (alone)"),
    "layer_scale": Knob("norm", "layer scale {}", "none / init",
                        "a learned per-channel gain on each sublayer's output before the residual add, started at "
                        "`init` (CaiT, DINOv2, BEiT): `zoo/nn/layer_scale.py` wraps the output module "
                        "(`attn_out_norm.gamma`, `ffn_out_norm.gamma`)"),
    "n_kv_heads": Knob("attention", "{} kv heads", "= heads, or fewer",
                       "grouped-query attention (Llama-style decoders)"),
    "qk_norm": Knob("attention", "qk-norm ({})", "none / `head` / `all`",
                    "a norm (of the Block's `norm`) on queries and keys before rotary: over each head (Qwen3, "
                    "Gemma 3) or over the whole projection (OLMo 2)"),
    "attn_softcap": Knob("attention", "softcap {}", "none / c",
                         "attention scores c * tanh(s / c) before the mask (Gemma 2): the dense path computes the "
                         "scores explicitly (SDPA cannot), the block backend passes it on per block, FlexAttention as "
                         "a `score_mod`"),
    "attn_scale": Knob("attention", "attention scale {}", "None = 1/sqrt(d_head), or a number", "T5 uses 1"),
    "bias_q": Knob("attention", "no query bias", "on / off each",
                   "Whisper has no key bias; T5 and Llama no biases at all"),
    "bias_k": Knob("attention", "no key bias", row="bias_q"),
    "bias_v": Knob("attention", "no value bias", row="bias_q"),
    "bias_out": Knob("attention", "no output bias", row="bias_q"),
    "bias_ffn": Knob("feed-forward", "no feed-forward bias", row="bias_q"),
    "activation": Knob("feed-forward", "{}", "relu, gelu (erf), gelu_tanh, quick_gelu, silu; gated: GEGLU, SwiGLU",
                       "T5 v1.0 relu, v1.1 gated-gelu, GPT-2 gelu_tanh, CLIP quick_gelu, Llama SwiGLU", always=True),
    "gated": Knob("feed-forward", "gated", row="activation"),
    "parallel": Knob("feed-forward", "parallel", "off / on",
                     "the feed-forward reads the Block's input beside attention, `x + attn(ln1 x) + ffn(ln2 x)`: "
                     "GPT-NeoX's `use_parallel_residual` (Pythia)"),
    "n_experts": Knob("feed-forward", "{} experts",
                      "0 (dense) / E experts, k per token; top-k weights renormalised or not",
                      "a mixture-of-experts feed-forward (`zoo/nn/moe.py`: router, float32 softmax, top-k, experts each "
                      "the dense `FeedForward`), built by `feed_forward(cfg)`: Mixtral (8, top-2, renormalised), "
                      "Qwen3-MoE (128, top-8, `norm_topk_prob`); the load-balancing loss is the objective's "
                      "(`NextTokenLM(aux_loss_coef=)`, the routers' logits collected by `RouterLogits`, no layer hands "
                      "them on)"),
    "top_k": Knob("feed-forward", "top-{}", row="n_experts"),
    "norm_topk": Knob("feed-forward", "top-k weights not renormalised", row="n_experts"),
    "dropout": Knob("regularisation", "dropout {}", "0, or a probability each",
                    "residual, attention weights, inside the FFN"),
    "attn_dropout": Knob("regularisation", "attention dropout {}", row="dropout"),
    "ffn_dropout": Knob("regularisation", "feed-forward dropout {}", row="dropout"),
    "d_model": Knob("shape", "{} wide", "widths and head count",
                    "the Block's size: each preset's own (describe's parameter count), not a kind of Block"),
    "n_heads": Knob("shape", "{} heads", row="d_model"),
    "d_ff": Knob("shape", "d_ff {}", row="d_model"),
    "head_dim": Knob("shape", "heads of {}", "None = d_model / heads", "T5 v1.1 small: 6 heads of 64 in 512"),
}

# The arguments of ``Block(cfg, ...)`` besides its config: per-layer data a container or stack gives.
BLOCK_ARGUMENTS: dict[str, Knob] = {
    "cross_attention": Knob("attention", "cross-attention", "present or absent",
                            "the decoders of encoder-decoder models (Transformer, T5, Whisper)"),
    "attn_norm": Knob("norm", "no first attention norm", "on / off per layer",
                      "a layer whose attention reads `x` with no norm of its own: ModernBERT's first, whose embedder "
                      "ends in a norm (the container's `first_attn_norm`)"),
}

def knob_words(config: Any, parts: tuple[str, ...] = PARTS) -> list[str]:
    """describe's words for a Block config (a ``BlockConfig``): each knob of ``parts`` whose value is
    away from its default (``defaults``: the field defaults, read from the config's class), and the
    ``always`` ones, in :data:`KNOBS` order."""
    defaults = {f.name: f.default for f in fields(config)}
    return [knob.words(getattr(config, name)) for name, knob in KNOBS.items()
            if knob.part in parts and (knob.always or getattr(config, name) != defaults[name])]


def _rows(knobs: dict[str, Knob], note: str = "") -> list[str]:
    """The table rows of ``knobs``: one per knob without ``row``, naming the knobs that share it."""
    lines = []
    for name, knob in knobs.items():
        if knob.row is None:
            members = [name, *(other for other, k in knobs.items() if k.row == name)]
            parts = " / ".join(dict.fromkeys(knobs[m].part for m in members))
            lines.append(f"| {', '.join(f'`{m}`' for m in members)}{note} | {parts} | {knob.values} | {knob.why} |")
    return lines


def knob_table() -> str:
    """docs/design.md's table of the Block's knobs, from :data:`KNOBS` and :data:`BLOCK_ARGUMENTS`."""
    return "\n".join(["| knob | part | values | why it exists |", "|---|---|---|---|", *_rows(KNOBS),
                      *_rows(BLOCK_ARGUMENTS, " (a `Block` argument, not a preset knob)")])

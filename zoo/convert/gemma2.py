"""Hugging Face Gemma 2 (``Gemma2ForCausalLM``) -> zoo Gemma 2 (conf/model/gemma2.yaml) and back.

Gemma 2 is Llama's layout (the shared decoder, :mod:`zoo.convert.decoder`) with:

- RMSNorms that scale by 1 + w (``block.norm: rmsnorm_1p``) before and after each sublayer
  (:data:`~zoo.convert.decoder.SANDWICH_NORMS`: its ``post_attention_layernorm`` is on the
  attention's output, not Llama's feed-forward input norm), the final norm too;
- a gated tanh-GELU feed-forward (``hidden_activation: gelu_pytorch_tanh``);
- attention scores scaled by ``query_pre_attn_scalar ** -0.5`` (``block.attn_scale``, left to the
  Block's 1/sqrt(head_dim) where the two agree) and soft-capped (``attn_logit_softcapping`` ->
  ``block.attn_softcap``);
- the embedding scaled by sqrt(d) (``TokenEmbedder(scale=true)``), the final logits soft-capped
  (``final_logit_softcapping`` -> ``LMHead(softcap=)``), the head tied;
- layers of two types (``layer_types``; by default one sliding layer then one global, alternating):
  the causal ``LocalMask(window=sliding_window)``, query i seeing keys ``i - w < j <= i``
  (masking_utils.sliding_window_overlay), and the ``CausalMask``, as a ``PerLayer`` pattern.

EmbeddingGemma's bidirectional attention (``use_bidirectional_attention``) is refused here: it is
:mod:`zoo.convert.embeddinggemma`'s.
"""

from __future__ import annotations

from typing import Any

from zoo.convert.decoder import SANDWICH_NORMS, Decoder
from zoo.convert.family import layer_masks
from zoo.convert.qwen2 import KINDS, LOCAL, kinds_mask

# what the Gemma converters read beside the plain copies: the layers' types and window, the attention scale
GEMMA_READS = frozenset({"layer_types", "sliding_window", "query_pre_attn_scalar", "use_bidirectional_attention"})
GEMMA_IGNORES = frozenset({"hidden_act"})  # transformers 4's spelling: 5's Gemma reads hidden_activation alone
# the values every Gemma net has (the export refuses a net without them)
GEMMA_KNOBS = {"embedder.scale": True, "block.norm": "rmsnorm_1p",
               "block.output_norm": True, "block.gated": True, "block.prenorm": True, "final_norm": True}


def layer_kinds(config: dict[str, Any], period: int) -> list[str]:
    """Each layer's type: ``layer_types``, else every ``period``-th layer global and the others
    sliding (Gemma 2: 2; Gemma 3: ``sliding_window_pattern``, 6), as the Gemma configs default."""
    n = config["num_hidden_layers"]
    kinds = config.get("layer_types") or ["sliding_attention" if (i + 1) % period else "full_attention"
                                          for i in range(n)]
    unknown = sorted(set(kinds) - set(KINDS.values()))
    if unknown or len(kinds) != n:
        raise ValueError(f"layer_types={kinds}: expected {n} of {sorted(KINDS.values())}")
    return kinds


def gemma_masks(config: dict[str, Any], period: int = 2, window: int = 4096) -> dict[str, Any]:
    """The mask's part of the shape (``window``: the config class's default ``sliding_window``)."""
    kinds, window = layer_kinds(config, period), config.get("sliding_window", window)
    if "sliding_attention" in kinds and not (isinstance(window, int) and window >= 1):
        raise ValueError(f"{config.get('model_type', 'gemma')} config: sliding_window={window!r} with "
                         f"sliding_attention layers (layer_types): their window must be a whole number >= 1 "
                         f"(transformers refuses it too)")
    return kinds_mask(kinds, window)


def gemma_mask_config(net: dict[str, Any], hf_class: str = "Gemma2ForCausalLM") -> dict[str, Any]:
    """Gemma's ``layer_types`` and ``sliding_window`` of the zoo net's masks (causal and causal-local
    layers, one window)."""
    kinds, window = layer_masks(net, KINDS, LOCAL, hf_class)
    return {"layer_types": kinds, "sliding_window": window}


def attention_scale(config: dict[str, Any]) -> dict[str, Any]:
    """``block.attn_scale`` of ``query_pre_attn_scalar`` (None where it is the head width: the
    Block's 1/sqrt(d_head)); a bidirectional Gemma is refused."""
    if config.get("use_bidirectional_attention"):
        raise ValueError("use_bidirectional_attention=True is EmbeddingGemma (a Gemma3TextModel read as an encoder): "
                         "read it with model=embeddinggemma; this converter is the causal Gemma's")
    scalar, head_dim = config.get("query_pre_attn_scalar", 256), config.get("head_dim", 256)
    return {"block.attn_scale": None if scalar == head_dim else scalar ** -0.5}


def attention_scale_config(net: dict[str, Any]) -> dict[str, Any]:
    """``query_pre_attn_scalar`` of the net's ``block.attn_scale`` (a whole number when it is one
    up to rounding: 20 ** -0.5 squares back to 20.000000000000004)."""
    scale, head_dim = net["block"]["attn_scale"], net["block"]["head_dim"]
    if scale is None:
        return {"query_pre_attn_scalar": head_dim}
    scalar = scale ** -2
    return {"query_pre_attn_scalar": round(scalar) if abs(scalar - round(scalar)) < 1e-9 else scalar}


GEMMA2 = Decoder(model="gemma2", model_types=("gemma2",), hf_class="Gemma2ForCausalLM", config_class="Gemma2Config",
                 expected={"attention_bias": False}, norms=dict(SANDWICH_NORMS), head_dim=256, reads=GEMMA_READS,
                 ignores=GEMMA_IGNORES, default_activation="gelu_pytorch_tanh",
                 keys={"tie_word_embeddings": ("tie_embeddings", True),
                       "attn_logit_softcapping": ("block.attn_softcap", 50.0),
                       "final_logit_softcapping": ("head.softcap", 30.0)},
                 mask=gemma_masks, mask_config=gemma_mask_config, own=attention_scale, own_config=attention_scale_config,
                 activation_key="hidden_activation", knobs=GEMMA_KNOBS)
MODEL_TYPES = GEMMA2.model_types  # the config.json model_type values this converter reads
FAMILY = GEMMA2.family()
from_transformers = GEMMA2.from_transformers  # a zoo Gemma 2 (conf/model/gemma2.yaml) of a Gemma2ForCausalLM in memory
pretrained = GEMMA2.pretrained  # the model.init_from hook: a Hugging Face Gemma 2 folder

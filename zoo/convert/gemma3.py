"""Hugging Face Gemma 3 text (``Gemma3ForCausalLM``, model_type ``gemma3_text``) -> zoo Gemma 3
(conf/model/gemma3.yaml) and back.

Gemma 3 is Gemma 2 (:mod:`zoo.convert.gemma2`: 1 + w RMSNorms before and after each sublayer,
gated tanh-GELU, ``query_pre_attn_scalar``, sqrt(d) embedding, tied head, sliding and global
layers) with a (1 + w) RMSNorm on each head's queries and keys (``qk_norm: head``), no
attention soft-capping (transformers 5's Gemma3Attention ignores ``attn_logit_softcapping``), five
sliding layers to one global (``sliding_window_pattern: 6`` in the released configs,
``layer_types`` in transformers 5's), and a rotary table per type of layer: the
sliding layers rotate with base ``rope_local_base_freq`` (10,000) and the global ones with
``rope_theta`` (1,000,000), and Gemma 3 4B and up scale the global layers' positions linearly
(``rope_scaling: {rope_type: linear, factor: 8}``): ``rotary_base`` and ``rotary_scale`` as
patterns over the layers. transformers 5 keeps both in ``rope_parameters``, one entry per type.
Other rotary kinds are refused; the multimodal ``Gemma3ForConditionalGeneration`` (model_type
``gemma3``) is not read.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from zoo.convert.common import layer_pattern
from zoo.convert.decoder import QK_NORMS, SANDWICH_NORMS, Decoder
from zoo.convert.family import layer_masks
from zoo.convert.gemma2 import (GEMMA_IGNORES, GEMMA_KNOBS, GEMMA_READS, attention_scale,
                                 attention_scale_config, gemma_mask_config, gemma_masks, layer_kinds)
from zoo.convert.qwen2 import KINDS, LOCAL
from zoo.nn.positions import layer_values

PERIOD = 6  # Gemma3TextConfig's default sliding_window_pattern: five sliding layers, then a global one
THETA = {"full_attention": 1e6, "sliding_attention": 1e4}  # Gemma3TextConfig's default bases


def rope_by_kind(config: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Layer type -> (rotary base, linear position scale) of a config: transformers 5's
    ``rope_parameters`` per type, else a released config.json's ``rope_theta`` and ``rope_scaling``
    (global layers) and ``rope_local_base_freq`` (sliding ones)."""
    params = config.get("rope_parameters") or {
        "full_attention": {"rope_theta": config.get("rope_theta", THETA["full_attention"]),
                           **(config.get("rope_scaling") or {})},
        "sliding_attention": {"rope_theta": config.get("rope_local_base_freq", THETA["sliding_attention"])}}
    out = {}
    for kind in THETA:
        if not isinstance(params.get(kind), dict):
            raise ValueError(f"rope_parameters={dict(params)} has no {kind!r} entry: Gemma 3 rotates each type of "
                             f"layer with its own table (rope_parameters: {{full_attention: ..., sliding_attention: ...}})")
        rope = params[kind]
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", "linear"):
            raise ValueError(f"rope_parameters[{kind!r}].rope_type={rope_type!r} is not supported (default or linear)")
        out[kind] = (float(rope.get("rope_theta", THETA[kind])), float(rope["factor"]) if rope_type == "linear" else 1.0)
    return out


def gemma3_rotary(config: dict[str, Any]) -> dict[str, Any]:
    """The positions' part of the shape: ``rotary_base`` and ``rotary_scale``, each one number or a
    pattern over the layers (as the mask's)."""
    by_kind = rope_by_kind(config)
    kinds = layer_kinds(config, config.get("sliding_window_pattern", PERIOD))
    out = {}
    for key, i in (("rotary_base", 0), ("rotary_scale", 1)):
        pattern = layer_pattern([by_kind[kind][i] for kind in kinds])
        out[key] = pattern[0] if len(pattern) == 1 else pattern
    return out


def gemma3_rotary_config(net: dict[str, Any]) -> dict[str, Any]:
    """Gemma3TextConfig's ``rope_parameters`` (one table per type of layer) of the net's rotary
    bases and scales; two tables in layers of one type are refused."""
    kinds, _ = layer_masks(net, KINDS, LOCAL, "Gemma3ForCausalLM")
    layers = zip(layer_values(net["rotary_base"], len(kinds), "rotary base"),
                 layer_values(net["rotary_scale"], len(kinds), "rotary scale"))
    seen: dict[str, tuple[float, float]] = {}
    for kind, table in zip(kinds, layers):
        if seen.setdefault(kind, table) != table:
            raise ValueError(f"Gemma3ForCausalLM has one rotary table per type of layer: this net's {kind} layers "
                             f"rotate with (base, scale) {seen[kind]} and {table}")
    tables = {kind: (theta, 1.0) for kind, theta in THETA.items()} | seen  # a type no layer has: the default
    return {"rope_parameters": {kind: {"rope_type": "default", "rope_theta": base} if scale == 1 else
                                {"rope_type": "linear", "factor": scale, "rope_theta": base}
                                for kind, (base, scale) in tables.items()}}


GEMMA3 = Decoder(model="gemma3", model_types=("gemma3_text",), hf_class="Gemma3ForCausalLM",
                 config_class="Gemma3TextConfig", expected={"attention_bias": False},
                 norms=SANDWICH_NORMS | QK_NORMS, head_dim=256,
                 keys={"tie_word_embeddings": ("tie_embeddings", True),
                       "final_logit_softcapping": ("head.softcap", None)},
                 reads=GEMMA_READS | {"sliding_window_pattern", "rope_local_base_freq"},
                 # Gemma3Attention keeps attn_logit_softcapping but never caps with it (transformers 5); the
                 # config class recomputes _sliding_window_pattern (it reads sliding_window_pattern)
                 ignores=GEMMA_IGNORES | {"attn_logit_softcapping", "_sliding_window_pattern"},
                 default_activation="gelu_pytorch_tanh",
                 mask=lambda config: gemma_masks(config, config.get("sliding_window_pattern", PERIOD)),
                 mask_config=partial(gemma_mask_config, hf_class="Gemma3ForCausalLM"),
                 positions=gemma3_rotary, positions_config=gemma3_rotary_config,
                 own=attention_scale, own_config=attention_scale_config,
                 activation_key="hidden_activation",
                 knobs=GEMMA_KNOBS | {"block.qk_norm": "head", "block.attn_softcap": None})
MODEL_TYPES = GEMMA3.model_types  # the config.json model_type values this converter reads
FAMILY = GEMMA3.family()
from_transformers = GEMMA3.from_transformers  # a zoo Gemma 3 (conf/model/gemma3.yaml) of a Gemma3ForCausalLM in memory
pretrained = GEMMA3.pretrained  # the model.init_from hook: a Hugging Face Gemma 3 folder

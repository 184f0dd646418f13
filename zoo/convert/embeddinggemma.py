"""Hugging Face EmbeddingGemma (``Gemma3TextModel`` with ``use_bidirectional_attention: true``,
model_type ``gemma3_text``) -> zoo EmbeddingGemma (conf/model/embeddinggemma.yaml) and back.

EmbeddingGemma is Gemma 3 (:mod:`zoo.convert.gemma3`: every weight, norm, rotary table and the
attention scale as there) with the causal masks taken away, which is all
``use_bidirectional_attention`` changes in transformers 5's ``Gemma3TextModel`` (its
``or_mask_function`` on both masks, ``is_causal=False``):

- ``full_attention`` layers see every real token: ``NoMask`` where Gemma 3 has ``CausalMask``;
- ``sliding_attention`` layers see a window on both sides: ``Gemma3TextConfig`` halves the saved
  ``sliding_window`` S to S // 2 + 1 and keeps ``|i - j| < S // 2 + 1``, which is the zoo's
  ``LocalMask(window=S, causal=false)`` (``|i - j| <= S // 2``) with S as saved.

The net is the bare encoder (no LM head: ``Gemma3TextModel`` has none), its hidden states pooled by
the Embedding objective (conf/objective/encoder/embed.yaml). A causal ``gemma3_text`` folder is
refused here (it is ``model=gemma3``'s).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from torch import Tensor

from zoo.convert.bert import last_hidden_state, without_head
from zoo.convert.common import leave_out
from zoo.convert.decoder import CAUSAL, LOCAL, Decoder
from zoo.convert.gemma2 import attention_scale, gemma_mask_config, gemma_masks
from zoo.convert.gemma3 import GEMMA3, PERIOD, gemma3_rotary_config

NO_MASK = "zoo.nn.masks.NoMask"
HF_CLASS = "Gemma3TextModel"
# Gemma 3's masks -> EmbeddingGemma's, and back: the one thing use_bidirectional_attention changes
BIDIRECTIONAL = {CAUSAL: {"_target_": NO_MASK}, LOCAL: {"causal": False}}
CAUSAL_TWIN = {NO_MASK: {"_target_": CAUSAL}, LOCAL: {"causal": True}}


def swapped(mask: dict[str, Any], table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``mask`` (one mask or a ``PerLayer`` pattern) with each mask updated by ``table`` (class -> values)."""
    if "masks" in mask:
        return mask | {"masks": [swapped(m, table) for m in mask["masks"]]}
    return mask | table.get(mask["_target_"], {})


def causal_twin(net: dict[str, Any]) -> dict[str, Any]:
    """The net config with Gemma 3's causal masks in place of its own: what Gemma 3's export reads
    its layers' types and rotary tables from. A causal window is refused (Gemma3TextModel's windows
    see both sides)."""
    masks = net["mask"].get("masks", [net["mask"]])
    if any(m["_target_"] == LOCAL and m.get("causal", True) for m in masks):
        raise ValueError(f"{HF_CLASS} (use_bidirectional_attention) has bidirectional windows: this net has a causal "
                         f"LocalMask (causal: true); a causal Gemma 3 is model=gemma3's Gemma3ForCausalLM")
    return net | {"mask": swapped(net["mask"], CAUSAL_TWIN)}


def bidirectional_masks(config: dict[str, Any]) -> dict[str, Any]:
    """The mask's part of the shape: Gemma 3's (:func:`~zoo.convert.gemma2.gemma_masks`, the saved
    ``sliding_window``) made bidirectional."""
    causal = gemma_masks(config, config.get("sliding_window_pattern", PERIOD))["mask"]
    return {"mask": swapped(causal, BIDIRECTIONAL)}


def bidirectional_mask_config(net: dict[str, Any]) -> dict[str, Any]:
    """``layer_types``, the saved ``sliding_window`` and ``use_bidirectional_attention`` of the net's masks."""
    return gemma_mask_config(causal_twin(net), HF_CLASS) | {"use_bidirectional_attention": True}


def bidirectional_rotary_config(net: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's ``rope_parameters`` (one table per type of layer) of the net's rotary bases."""
    return gemma3_rotary_config(causal_twin(net))


def bidirectional_scale(config: dict[str, Any]) -> dict[str, Any]:
    """Gemma's attention scale (:func:`~zoo.convert.gemma2.attention_scale`) of a config that must be
    bidirectional: a causal one is Gemma 3's, refused by name."""
    if not config.get("use_bidirectional_attention"):
        raise ValueError(f"{config.get('model_type', 'gemma3_text')} config: use_bidirectional_attention is not true: "
                         f"that is the causal Gemma 3, model=gemma3; EmbeddingGemma reads the bidirectional one")
    return attention_scale(config | {"use_bidirectional_attention": False})


@dataclass(frozen=True)
class BareDecoder(Decoder):
    """A Llama-like family's bare ``<Family>Model``: the same layers, no LM head (the net's head is
    ``torch.nn.Identity``: the Embedding objective pools its hidden states)."""

    def shape(self, config: dict[str, Any]) -> dict[str, Any]:
        return super().shape(config) | {"tie_embeddings": False}

    def lm_shape(self, config: dict[str, Any]) -> dict[str, Any]:
        return without_head(super().lm_shape(config))

    def tied(self, config: dict[str, Any], hf: dict[str, Tensor], folder: str | None = None) -> bool:
        return False

    def state_dict(self, hf: dict[str, Tensor], n_layers: int, embed: str = "embedder.tokens.weight",
                   n_experts: int = 0) -> dict[str, Tensor]:
        return leave_out(super().state_dict(hf, n_layers, embed, n_experts), "head.")


EMBEDDINGGEMMA = BareDecoder(**{**GEMMA3.__dict__, "model": "embeddinggemma", "hf_class": HF_CLASS,
                                "mask": bidirectional_masks, "mask_config": bidirectional_mask_config,
                                "positions_config": bidirectional_rotary_config, "own": bidirectional_scale})
MODEL_TYPES = EMBEDDINGGEMMA.model_types  # the config.json model_type values this converter reads
FAMILY = replace(EMBEDDINGGEMMA.family(), outputs=last_hidden_state)
from_transformers = EMBEDDINGGEMMA.from_transformers  # a zoo EmbeddingGemma of a Gemma3TextModel in memory
pretrained = EMBEDDINGGEMMA.pretrained  # the model.init_from hook: a Hugging Face EmbeddingGemma folder

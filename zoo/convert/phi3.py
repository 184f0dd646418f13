"""Hugging Face Phi-3 (``Phi3ForCausalLM``) -> zoo Phi-3 (conf/model/phi3.yaml) and back.

Phi-3 is Llama whose checkpoint fuses two of Llama's weights each: ``self_attn.qkv_proj`` stacks
the query, key and value projections and ``mlp.gate_up_proj`` the gate and up projections (the
shared decoder's ``fused`` names, :data:`zoo.convert.decoder.FUSED`: the import cuts them, the
export's probe stacks them again). Its ``sliding_window=w`` applies to every layer and lets query
i see keys ``i - w < j <= i`` (masking_utils.sliding_window_overlay): the zoo's causal
``LocalMask(window=w)``; without one the mask is causal. Phi-3's long-context rotary tables
(``longrope``, the ``su`` of older configs) and a partial rotary factor are refused by the shared
reader.
"""

from __future__ import annotations

from typing import Any

from zoo.convert.decoder import FUSED, Decoder
from zoo.convert.family import layer_masks

CAUSAL, LOCAL = "zoo.nn.masks.CausalMask", "zoo.nn.masks.LocalMask"


def window_of(config: dict[str, Any]) -> dict[str, Any]:
    """The mask's part of the shape: every layer causal-local under ``sliding_window``, else causal."""
    window = config.get("sliding_window")
    return {"mask": {"_target_": CAUSAL} if window is None else {"_target_": LOCAL, "window": window, "causal": True}}


def window_config(net: dict[str, Any]) -> dict[str, Any]:
    """Phi3Config's ``sliding_window`` of the zoo net's mask (one kind of layer, causal or causal-local),
    and no padding id but the run's: Phi3Config's default, 32000, is past a smaller vocabulary (its
    embedding's ``padding_idx`` would be refused)."""
    kinds, window = layer_masks(net, {CAUSAL: "full", LOCAL: "sliding"}, LOCAL, "Phi3ForCausalLM")
    if len(set(kinds)) > 1:
        raise ValueError(f"Phi3ForCausalLM slides in every layer or in none: this net's layers are {kinds}")
    return {"sliding_window": window, "pad_token_id": None}


PHI3 = Decoder(model="phi3", model_types=("phi3",), hf_class="Phi3ForCausalLM", config_class="Phi3Config",
               expected={"attention_bias": False}, mask=window_of, reads=frozenset({"sliding_window"}),
               # the embedding's and residuals' dropouts (off in eval); the pretraining length only longrope reads
               ignores=frozenset({"embd_pdrop", "resid_pdrop", "original_max_position_embeddings"}), mask_config=window_config, fused=FUSED)
MODEL_TYPES = PHI3.model_types  # the config.json model_type values this converter reads
FAMILY = PHI3.family()
from_transformers = PHI3.from_transformers  # a zoo Phi-3 (conf/model/phi3.yaml) of a Phi3ForCausalLM in memory
pretrained = PHI3.pretrained  # the model.init_from hook: a Hugging Face Phi-3 folder

"""Hugging Face Qwen2 (``Qwen2ForCausalLM``) -> zoo Qwen2 (conf/model/qwen2.yaml) and back.

Qwen2 is Llama with biases on the query, key and value projections (none on the output) and,
optionally, a causal sliding window in some layers: ``use_sliding_window`` with
``sliding_window=w``, in the layers ``layer_types`` names ``sliding_attention`` (by default those
from ``max_window_layers`` on). A sliding layer lets query i see keys ``i - w < j <= i``
(masking_utils.sliding_window_overlay), the zoo's causal ``LocalMask(window=w)`` as is; the
others are causal. The layers become a ``PerLayer`` pattern of the two.
"""

from __future__ import annotations

from typing import Any

from zoo.convert.common import layer_pattern
from zoo.convert.decoder import CAUSAL, LOCAL, Decoder
from zoo.convert.family import layer_masks

WINDOW_KEYS = frozenset({"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"})  # what :func:`masks_of` reads
KINDS = {CAUSAL: "full_attention", LOCAL: "sliding_attention"}  # zoo mask class -> Qwen2's layer type


def masks_of(config: dict[str, Any]) -> dict[str, Any]:
    """The mask's part of the shape: each layer's type as Qwen2Config reads it (``layer_types``,
    else the layers from ``max_window_layers`` on slide when ``use_sliding_window``), one mask when
    every layer is alike, else a ``PerLayer`` pattern."""
    n = config["num_hidden_layers"]
    window = config.get("sliding_window") if config.get("use_sliding_window", False) else None
    kinds = config.get("layer_types") or ["sliding_attention" if window is not None and i >= config.get(
        "max_window_layers", 28) else "full_attention" for i in range(n)]
    unknown = sorted(set(kinds) - set(KINDS.values()))
    if unknown or len(kinds) != n:
        raise ValueError(f"layer_types={kinds}: expected {n} of {sorted(KINDS.values())}")
    if "sliding_attention" in kinds and window is None:
        raise ValueError(f"layer_types names sliding_attention layers but use_sliding_window="
                         f"{config.get('use_sliding_window')} and sliding_window={config.get('sliding_window')}: "
                         f"set both (use_sliding_window=true, sliding_window=w) or make every layer full_attention")
    return kinds_mask(kinds, window)


def kinds_mask(kinds: list[str], window: int | None) -> dict[str, Any]:
    """The mask's part of the shape of each layer's type (``full_attention``: causal;
    ``sliding_attention``: causal-local under ``window``): one mask when every layer is alike, else a
    ``PerLayer`` pattern (Qwen2's, Qwen3's, Gemma's layers)."""
    masks = {"full_attention": {"_target_": CAUSAL}, "sliding_attention": {"_target_": LOCAL, "window": window,
                                                                           "causal": True}}
    pattern = [masks[kind] for kind in layer_pattern(kinds)]
    return {"mask": pattern[0] if len(pattern) == 1 else {"_target_": "zoo.nn.masks.PerLayer", "masks": pattern}}


def sliding_config(net: dict[str, Any], hf_class: str = "Qwen2ForCausalLM") -> dict[str, Any]:
    """Qwen2Config's (and Qwen3Config's) sliding-window keys of the zoo net's masks (causal and
    causal-local layers); ``hf_class`` names the family in a refusal."""
    kinds, window = layer_masks(net, KINDS, LOCAL, hf_class)
    sliding = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
    return {"use_sliding_window": bool(sliding), "sliding_window": window, "layer_types": kinds,
            "max_window_layers": sliding[0] if sliding else len(kinds)}


QWEN2 = Decoder(model="qwen2", model_types=("qwen2",), hf_class="Qwen2ForCausalLM", config_class="Qwen2Config",
                classifier="Qwen2ForSequenceClassification",
                biases=("q", "k", "v"), mask=masks_of, mask_config=sliding_config, reads=WINDOW_KEYS)
MODEL_TYPES = QWEN2.model_types  # the config.json model_type values this converter reads
FAMILY = QWEN2.family()
from_transformers = QWEN2.from_transformers  # a zoo Qwen2 (conf/model/qwen2.yaml) of a Qwen2ForCausalLM in memory
pretrained = QWEN2.pretrained  # the model.init_from hook: a Hugging Face Qwen2 folder

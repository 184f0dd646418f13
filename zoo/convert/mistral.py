"""Hugging Face Mistral (``MistralForCausalLM``) -> zoo Mistral (conf/model/mistral.yaml) and back.

Mistral is Llama with a causal sliding window: the weights have Llama's names, so the
mapping is the shared decoder's (:mod:`zoo.convert.decoder`); only the window is new. Hugging
Face's ``sliding_window=w`` lets query i see keys ``i - w < j <= i``
(masking_utils.sliding_window_overlay), which is the zoo's ``LocalMask(window=w)`` as is.
"""

from __future__ import annotations

from typing import Any

from zoo.convert.decoder import Decoder


def window_of(config: dict[str, Any]) -> dict[str, Any]:
    """Nothing beyond the window's plain copy (``sliding_window`` -> ``mask.window``): a Mistral
    without a window is refused."""
    if config.get("sliding_window") is None:
        raise ValueError("sliding_window=None: this Mistral has no window, it is a Llama (use model=llama)")
    return {}


MISTRAL = Decoder(model="mistral", model_types=("mistral",), hf_class="MistralForCausalLM",
                  config_class="MistralConfig", keys={"sliding_window": ("mask.window", None)}, mask=window_of)
MODEL_TYPES = MISTRAL.model_types  # the config.json model_type values this converter reads
FAMILY = MISTRAL.family()
from_transformers = MISTRAL.from_transformers  # a zoo Mistral (conf/model/mistral.yaml) of a MistralForCausalLM in memory
pretrained = MISTRAL.pretrained  # the model.init_from hook: a Hugging Face Mistral folder

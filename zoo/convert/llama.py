"""Hugging Face Llama (``LlamaForCausalLM``) -> zoo Llama (conf/model/llama.yaml) and back: the
shared decoder mapping (:mod:`zoo.convert.decoder`) with no knob turned."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from zoo.convert.decoder import Decoder

LLAMA = Decoder(model="llama", model_types=("llama",), hf_class="LlamaForCausalLM", config_class="LlamaConfig",
                classifier="LlamaForSequenceClassification",
                expected={"attention_bias": False, "mlp_bias": False})
MODEL_TYPES = LLAMA.model_types  # the config.json model_type values this converter reads
FAMILY = LLAMA.family()


def llama_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under the language model's net, that give the Llama preset
    the shape of a Hugging Face Llama config (LLaVA's language model too): :meth:`Decoder.shape`."""
    return LLAMA.shape(config)


def llama_state_dict(hf: dict[str, Tensor], n_layers: int, embed: str = "embedder.tokens.weight") -> dict[str, Tensor]:
    """Llama's weights (keys without the ``model.`` prefix) under the zoo's names: :meth:`Decoder.state_dict`."""
    return LLAMA.state_dict(hf, n_layers, embed)


from_transformers = LLAMA.from_transformers  # a zoo Llama (conf/model/llama.yaml) of a LlamaForCausalLM in memory
pretrained = LLAMA.pretrained  # the model.init_from hook: a Hugging Face Llama folder

"""Hugging Face Mistral (``MistralForCausalLM``) -> zoo Mistral (conf/model/mistral.yaml).

Mistral is Llama with a causal sliding window: the weights have Llama's names, so the
mapping is Llama's; only the window is new. Hugging Face's ``sliding_window=w`` lets query
i see keys ``i - w < j <= i`` (masking_utils.sliding_window_overlay), which is the zoo's
``LocalMask(window=w)`` as is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.convert.common import build_net, load_mapped, shape_overrides
from zoo.convert.llama import llama_lm_shape, llama_shape, llama_state_dict, pretrained_llama_like

MODEL_TYPES = ("mistral",)  # the config.json model_type values this converter reads


def window_of(config: dict[str, Any]) -> dict[str, Any]:
    """The mask's part of the shape: the sliding window of a Mistral config."""
    window = config.get("sliding_window")
    if window is None:
        raise ValueError("sliding_window=None: this Mistral has no window, it is a Llama (use model=llama)")
    return {"mask.window": window}


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo Mistral (built from conf/model/mistral.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    net = build_net("mistral", shape_overrides(llama_shape(cfg) | window_of(cfg)), {"vocab_size": cfg["vocab_size"]})
    hf = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items()}
    load_mapped(net, llama_state_dict(hf, cfg["num_hidden_layers"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face Mistral folder: Llama's shape and weights plus the window."""
    return pretrained_llama_like(net_cfg, path, MODEL_TYPES, lambda config: llama_lm_shape(config) | window_of(config))

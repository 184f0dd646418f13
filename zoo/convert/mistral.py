"""Hugging Face Mistral (``MistralForCausalLM``) -> zoo Mistral (conf/model/mistral.yaml).

Mistral is Llama with a causal sliding window: the weights have Llama's names, so the
mapping is Llama's; only the window is new. Hugging Face's ``sliding_window=w`` lets query
i see keys ``i - w < j <= i`` (masking_utils.sliding_window_overlay), which is the zoo's
``LocalMask(window=w)`` as is.
"""

from __future__ import annotations

import torch

from zoo.convert.common import build_net, load_mapped
from zoo.convert.llama import llama_config_overrides, llama_state_dict


def mistral_config_overrides(hf_config, prefix: str = "model.net") -> list[str]:
    """Llama's overrides plus the sliding window of ``hf_config``."""
    window = hf_config.sliding_window
    if window is None:
        raise ValueError("sliding_window=None: this Mistral has no window, it is a Llama (use zoo.convert.llama)")
    return [*llama_config_overrides(hf_config, prefix), f"{prefix}.mask.window={window}"]


@torch.no_grad()
def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo Mistral (built from conf/model/mistral.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config
    net = build_net("mistral", mistral_config_overrides(cfg), {"vocab_size": cfg.vocab_size})
    hf = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items()}
    load_mapped(net, llama_state_dict(hf, cfg.num_hidden_layers))
    return net

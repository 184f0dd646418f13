"""Hugging Face Mixtral (``MixtralForCausalLM``) -> zoo Mixtral (conf/model/mixtral.yaml) and back.

Mixtral is Mistral (Llama's weights, an optional causal sliding window) with a mixture of
experts for each feed-forward (:mod:`zoo.nn.moe`): a router over ``num_local_experts`` SwiGLU
experts, ``num_experts_per_tok`` per token, their softmax weights always renormalised to sum 1
(the Block's ``n_experts``, ``top_k``, ``norm_topk: true``). A saved folder holds each expert's
``block_sparse_moe.experts.{e}.w1`` (gate), ``w3`` (up), ``w2`` (down) and the router
``block_sparse_moe.gate``; transformers 5 stacks them in memory (:data:`zoo.convert.decoder.MOE_STACKED`).
Training adds ``router_aux_loss_coef`` times the load-balancing loss: the run's
``model.aux_loss_coef`` (:class:`zoo.objectives.lm.NextTokenLM`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from zoo.convert.decoder import Decoder
from zoo.convert.family import layer_masks

CAUSAL, LOCAL = "zoo.nn.masks.CausalMask", "zoo.nn.masks.LocalMask"
MOE_KEYS = {"num_experts_per_tok": ("block.top_k", 2)}  # beside each family's count of experts
# what the mixtures of experts read beside their plain copies (the one window), and ignore: the
# router's training loss (its weight, whether the forward returns its logits)
MOE_READS = frozenset({"sliding_window", "use_sliding_window"})
MOE_IGNORES = frozenset({"output_router_logits", "router_aux_loss_coef"})


def routed(config: dict[str, Any]) -> dict[str, Any]:
    """Nothing of the shape: refuses, naming the config's keys, a layer routing each token to more
    experts than it has (before the zoo's own check names its ``block.top_k``)."""
    experts = config.get("num_local_experts", config.get("num_experts"))
    top_k = config.get("num_experts_per_tok", 2)
    if experts is not None and not 1 <= top_k <= experts:
        raise ValueError(f"{config.get('model_type', 'this')} config: num_experts_per_tok={top_k} must be between 1 "
                         f"and the number of experts ({experts}): each token is routed to that many of them")
    return {}


def one_window(config: dict[str, Any]) -> dict[str, Any]:
    """The mask of a config whose every layer has the one ``sliding_window`` (None: causal); a
    ``use_sliding_window`` of false (Qwen3-MoE's switch) means none."""
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    return {"mask": {"_target_": CAUSAL} if window is None else {"_target_": LOCAL, "window": window, "causal": True}}


def window_config(net: dict[str, Any], hf_class: str, switch: bool = False) -> dict[str, Any]:
    """The config keys of the zoo net's one mask (causal, or causal-local in every layer);
    ``switch``: the config has Qwen3-MoE's ``use_sliding_window`` too."""
    kinds, window = layer_masks(net, {CAUSAL: "full", LOCAL: "sliding"}, LOCAL, hf_class)
    if len(set(kinds)) > 1:
        raise ValueError(f"{hf_class} has the same window in every layer: this net's layers are {kinds}")
    return {"sliding_window": window} | ({"use_sliding_window": window is not None} if switch else {})


MIXTRAL = Decoder(model="mixtral", model_types=("mixtral",), hf_class="MixtralForCausalLM",
                  config_class="MixtralConfig", expected={"router_jitter_noise": 0.0}, own=routed,
                  reads=MOE_READS, ignores=MOE_IGNORES,
                  keys={"num_local_experts": ("block.n_experts", 8)} | MOE_KEYS, knobs={"block.norm_topk": True},
                  mask=one_window, mask_config=partial(window_config, hf_class="MixtralForCausalLM"),
                  moe_module="block_sparse_moe", experts={"gate": "w1", "fc_in": "w3", "fc_out": "w2"})
MODEL_TYPES = MIXTRAL.model_types  # the config.json model_type values this converter reads
FAMILY = MIXTRAL.family()
from_transformers = MIXTRAL.from_transformers  # a zoo Mixtral (conf/model/mixtral.yaml) of a MixtralForCausalLM in memory
pretrained = MIXTRAL.pretrained  # the model.init_from hook: a Hugging Face Mixtral folder

"""Hugging Face Qwen3-MoE (``Qwen3MoeForCausalLM``) -> zoo Qwen3-MoE (conf/model/qwen3_moe.yaml) and back.

Qwen3-MoE is Qwen3 (per-head q/k RMSNorms, a head width of its own) with a mixture of experts for
each feed-forward (:mod:`zoo.nn.moe`): ``num_experts`` SwiGLU experts ``moe_intermediate_size``
wide, ``num_experts_per_tok`` per token, their weights renormalised only with ``norm_topk_prob``.
A saved folder holds ``mlp.experts.{e}.gate_proj`` / ``up_proj`` / ``down_proj`` and the router
``mlp.gate``. Dense layers among the sparse ones (``decoder_sparse_step`` > 1, ``mlp_only_layers``)
are refused; ``intermediate_size`` (their width) is written as the experts'. Its optional sliding
window (``use_sliding_window``) is one window for every layer.
"""

from __future__ import annotations

from functools import partial

from zoo.convert.decoder import PRE_NORMS, QK_NORMS, Decoder
from zoo.convert.mixtral import MOE_IGNORES, MOE_KEYS, MOE_READS, one_window, routed, window_config

QWEN3_MOE = Decoder(
    model="qwen3_moe", model_types=("qwen3_moe",), hf_class="Qwen3MoeForCausalLM", config_class="Qwen3MoeConfig",
    expected={"attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": []}, norms=PRE_NORMS | QK_NORMS,
    head_dim=0, keys={"num_experts": ("block.n_experts", 128), "moe_intermediate_size": ("block.d_ff", 768),
                      "norm_topk_prob": ("block.norm_topk", False)} | MOE_KEYS,
    aliases={"num_experts": "num_local_experts"},  # transformers' own spelling, in what save_pretrained writes
    own=routed, reads=MOE_READS,
    ignores=MOE_IGNORES | {"max_window_layers"},  # Qwen3MoeConfig's, read by no layer (one window in each)
    mask=one_window, mask_config=partial(window_config, hf_class="Qwen3MoeForCausalLM", switch=True))
MODEL_TYPES = QWEN3_MOE.model_types  # the config.json model_type values this converter reads
FAMILY = QWEN3_MOE.family()
from_transformers = QWEN3_MOE.from_transformers  # a zoo Qwen3-MoE (conf/model/qwen3_moe.yaml) of a Qwen3MoeForCausalLM in memory
pretrained = QWEN3_MOE.pretrained  # the model.init_from hook: a Hugging Face Qwen3-MoE folder

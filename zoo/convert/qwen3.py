"""Hugging Face Qwen3 (``Qwen3ForCausalLM``) -> zoo Qwen3 (conf/model/qwen3.yaml) and back.

Qwen3 is Llama (no biases) with an RMSNorm on each head's queries and keys before rotary
(``self_attn.q_norm`` / ``k_norm``: the Block's ``qk_norm: head``) and a head width of its own
(``head_dim``, 128 in Qwen3-0.6B's 1024 = 16 heads). Its optional sliding window is Qwen2's
(``use_sliding_window``, ``sliding_window``, ``max_window_layers``, ``layer_types``): the same
``PerLayer`` pattern of causal and causal-local masks (:mod:`zoo.convert.qwen2`).
"""

from __future__ import annotations

from functools import partial

from zoo.convert.decoder import PRE_NORMS, QK_NORMS, Decoder
from zoo.convert.qwen2 import WINDOW_KEYS, masks_of, sliding_config

QWEN3 = Decoder(model="qwen3", model_types=("qwen3",), hf_class="Qwen3ForCausalLM", config_class="Qwen3Config",
                classifier="Qwen3ForSequenceClassification",
                expected={"attention_bias": False}, norms=PRE_NORMS | QK_NORMS, head_dim=128, mask=masks_of, reads=WINDOW_KEYS,
                mask_config=partial(sliding_config, hf_class="Qwen3ForCausalLM"))
MODEL_TYPES = QWEN3.model_types  # the config.json model_type values this converter reads
FAMILY = QWEN3.family()
from_transformers = QWEN3.from_transformers  # a zoo Qwen3 (conf/model/qwen3.yaml) of a Qwen3ForCausalLM in memory
pretrained = QWEN3.pretrained  # the model.init_from hook: a Hugging Face Qwen3 folder

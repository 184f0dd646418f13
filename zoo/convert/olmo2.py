"""Hugging Face OLMo 2 (``Olmo2ForCausalLM``) -> zoo OLMo 2 (conf/model/olmo2.yaml) and back.

OLMo 2 is Llama with its norms moved: none on a sublayer's input, an RMSNorm on each sublayer's
output before the residual add (``post_attention_layernorm``, ``post_feedforward_layernorm``: the
Block's ``attn_out_norm`` / ``ffn_out_norm``), and an RMSNorm over the whole query and key
projections, all heads at once, before rotary (``self_attn.q_norm`` / ``k_norm``: ``qk_norm: all``).
Its mask is causal, its weights otherwise Llama's names.
"""

from __future__ import annotations

from zoo.convert.decoder import QK_NORMS, Decoder

OUT_NORMS = {"attn_out_norm": "post_attention_layernorm", "ffn_out_norm": "post_feedforward_layernorm"}
OLMO2 = Decoder(model="olmo2", model_types=("olmo2",), hf_class="Olmo2ForCausalLM", config_class="Olmo2Config",
                expected={"attention_bias": False}, norms=OUT_NORMS | QK_NORMS)
MODEL_TYPES = OLMO2.model_types  # the config.json model_type values this converter reads
FAMILY = OLMO2.family()
from_transformers = OLMO2.from_transformers  # a zoo OLMo 2 (conf/model/olmo2.yaml) of an Olmo2ForCausalLM in memory
pretrained = OLMO2.pretrained  # the model.init_from hook: a Hugging Face OLMo 2 folder

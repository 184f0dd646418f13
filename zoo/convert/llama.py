"""Hugging Face Llama (``LlamaForCausalLM``) -> zoo Llama (conf/model/llama.yaml)."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.convert.common import build_net, load_mapped


def llama_config_overrides(hf_config, prefix: str = "model.net") -> list[str]:
    """Hydra overrides that give the Llama preset the shape of a Hugging Face Llama config
    (``prefix``: where the language model's net sits in the composed config)."""
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    if head_dim * hf_config.num_attention_heads != hf_config.hidden_size:
        raise ValueError(f"head_dim={head_dim} x {hf_config.num_attention_heads} heads != hidden_size="
                         f"{hf_config.hidden_size}: the zoo Block needs d_model = heads x d_head")
    rope = getattr(hf_config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type={rope['rope_type']!r} is not supported (only the plain rotary table)")
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    if hf_config.hidden_act not in ("silu", "gelu"):
        raise ValueError(f"hidden_act={hf_config.hidden_act!r} is not supported (silu or gelu)")
    return [
        f"{prefix}.n_layers={hf_config.num_hidden_layers}",
        f"{prefix}.context={hf_config.max_position_embeddings}",
        f"{prefix}.rotary_base={theta}",
        f"{prefix}.tie_embeddings={bool(hf_config.tie_word_embeddings)}",
        f"{prefix}.block.d_model={hf_config.hidden_size}",
        f"{prefix}.block.n_heads={hf_config.num_attention_heads}",
        f"{prefix}.block.n_kv_heads={hf_config.num_key_value_heads}",
        f"{prefix}.block.d_ff={hf_config.intermediate_size}",
        f"{prefix}.block.norm_eps={hf_config.rms_norm_eps}",
        f"{prefix}.block.activation={hf_config.hidden_act}",
    ]


def llama_state_dict(hf: dict[str, Tensor], n_layers: int, embed: str = "embedder.tokens.weight") -> dict[str, Tensor]:
    """Rename a LlamaModel's weights (keys without the ``model.`` prefix) plus ``lm_head.weight``
    to the zoo's; ``embed``: where the token embedding sits in the zoo net."""
    out = {embed: hf["embed_tokens.weight"], "stack.norm.weight": hf["norm.weight"],
           "head.proj.weight": hf["lm_head.weight"]}
    for i in range(n_layers):
        h, z = f"layers.{i}.", f"stack.blocks.{i}."
        out |= {
            z + "attn.q.weight": hf[h + "self_attn.q_proj.weight"],
            z + "attn.k.weight": hf[h + "self_attn.k_proj.weight"],
            z + "attn.v.weight": hf[h + "self_attn.v_proj.weight"],
            z + "attn.out.weight": hf[h + "self_attn.o_proj.weight"],
            z + "attn_norm.weight": hf[h + "input_layernorm.weight"],
            z + "ffn_norm.weight": hf[h + "post_attention_layernorm.weight"],
            z + "ffn.gate.weight": hf[h + "mlp.gate_proj.weight"],  # SwiGLU: silu(gate) * up
            z + "ffn.fc_in.weight": hf[h + "mlp.up_proj.weight"],
            z + "ffn.fc_out.weight": hf[h + "mlp.down_proj.weight"],
        }
    return out


@torch.no_grad()
def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo Llama (built from conf/model/llama.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config
    net = build_net("llama", llama_config_overrides(cfg), {"vocab_size": cfg.vocab_size})
    sd = hf_model.state_dict()
    hf = {k.removeprefix("model."): v for k, v in sd.items()}
    load_mapped(net, llama_state_dict(hf, cfg.num_hidden_layers))
    return net

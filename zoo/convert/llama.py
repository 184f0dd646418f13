"""Hugging Face Llama (``LlamaForCausalLM``) -> zoo Llama (conf/model/llama.yaml)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from zoo.convert.common import build_net, check_vocab, init_net, load_mapped, read_checkpoint_dir, refuse, shape_overrides

MODEL_TYPES = ("llama",)  # the config.json model_type values this converter reads


def llama_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under the language model's net, that give the Llama
    preset the shape of a Hugging Face Llama config (as a dict); refuses what the zoo Block
    does not express (biases, rope scaling, d_model != heads x head_dim)."""
    refuse(config, "Llama config", attention_bias=False, mlp_bias=False)
    d, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or d // heads
    if head_dim * heads != d:
        raise ValueError(f"head_dim={head_dim} x {heads} heads != hidden_size={d}: the zoo Block needs "
                         f"d_model = heads x d_head")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise ValueError(f"rope_type={kind!r} is not supported (only the plain rotary table)")
    act = config.get("hidden_act", "silu")
    if act not in ("silu", "gelu"):
        raise ValueError(f"hidden_act={act!r} is not supported (silu or gelu)")
    return {
        "n_layers": config["num_hidden_layers"],
        "context": config["max_position_embeddings"],
        "rotary_base": rope.get("rope_theta", config.get("rope_theta", 10000.0)),
        "tie_embeddings": bool(config.get("tie_word_embeddings", False)),
        "block.d_model": d,
        "block.n_heads": heads,
        "block.n_kv_heads": config.get("num_key_value_heads") or heads,
        "block.d_ff": config["intermediate_size"],
        "block.norm_eps": config.get("rms_norm_eps", 1e-6),
        "block.activation": act,
        "block.attn_dropout": config.get("attention_dropout", 0.0),
    }


def llama_lm_shape(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`llama_shape` plus the keys of ``model=llama`` that depend on it (for a resolved config)."""
    d, vocab = config["hidden_size"], config["vocab_size"]
    return llama_shape(config) | {
        "embedder.vocab_size": vocab, "embedder.d_model": d, "embedder.max_len": config["max_position_embeddings"],
        "head.d_model": d, "head.vocab_size": vocab,
    }


def llama_state_dict(hf: dict[str, Tensor], n_layers: int, embed: str = "embedder.tokens.weight") -> dict[str, Tensor]:
    """Rename a LlamaModel's weights (keys without the ``model.`` prefix) plus ``lm_head.weight``
    to the zoo's; ``embed``: where the token embedding sits in the zoo net."""
    out = {embed: hf["embed_tokens.weight"], "stack.norm.weight": hf["norm.weight"],
           "head.proj.weight": hf.get("lm_head.weight", hf["embed_tokens.weight"])}  # absent when tied
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
    cfg = hf_model.config.to_dict()
    net = build_net("llama", shape_overrides(llama_shape(cfg)), {"vocab_size": cfg["vocab_size"]})
    hf = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items()}
    load_mapped(net, llama_state_dict(hf, cfg["num_hidden_layers"]))
    return net


def pretrained_llama_like(net_cfg: dict[str, Any], path: str, model_types: tuple[str, ...] = MODEL_TYPES,
                          shape_of: Callable[[dict[str, Any]], dict[str, Any]] = llama_lm_shape
                          ) -> tuple[dict[str, Any], nn.Module]:
    """(``net_cfg`` reshaped to the folder at ``path``, the net holding its weights) for a
    checkpoint whose weights have Llama's names (Llama, Mistral); ``shape_of`` maps its
    config.json to the net's shape. The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, model_types)
    shape = shape_of(config)
    check_vocab(net_cfg, "embedder.vocab_size", config["vocab_size"], path)
    hf = {k.removeprefix("model."): v for k, v in state.items()}
    return init_net(net_cfg, shape, llama_state_dict(hf, shape["n_layers"]))


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face Llama folder (see :func:`pretrained_llama_like`)."""
    return pretrained_llama_like(net_cfg, path)

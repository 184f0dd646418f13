"""Hugging Face GPT-NeoX (``GPTNeoXForCausalLM``: Pythia) -> zoo Pythia (conf/model/pythia.yaml) and
back, from a model in memory (:func:`from_transformers`) or a checkpoint folder (:func:`pretrained`,
the ``model.init_from=DIR`` hook).

GPT-NeoX is the Block preset conf/block/gpt_neox.yaml (pre-LN LayerNorm with biases, exact GELU,
biases on attention and feed-forward, ``use_parallel_residual`` -> ``block.parallel``) with rotary
positions on the first ``rotary_pct`` of each head (``Model.rotary_fraction``, base
``rotary_emb_base``) and an untied head (``embed_out``; transformers 5 calls it ``lm_head`` in
memory and writes ``embed_out`` back to a folder). Its fused ``attention.query_key_value`` is laid
out per head, ``[n_heads, 3, head_dim]`` along its rows (each head's query, key and value rows
side by side), unlike Phi-3's ``[q; k; v]`` stack: :data:`QKV_PER_HEAD` says so and
:func:`per_head` cuts it. What the zoo cannot express (a scaled rotary table, another activation,
a rotated width that is odd) is refused in one line.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, copied_from, init_net, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.decoder import rotary
from zoo.convert.family import REQUIRED, Family, at, config_only, copies, plain
from zoo.nn.positions import rotary_width

MODEL_TYPES = ("gpt_neox",)  # the config.json model_type values this converter reads
# GPT-NeoX's ``hidden_act`` -> the Block's (Pythia: exact GELU)
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
# GPTNeoXConfig's values of the rotary keys a config.json may omit (its rotary_pct default is not 1)
ROTARY_DEFAULTS = {"rotary_pct": 0.25, "rotary_emb_base": 10000.0}
# Hugging Face config key -> (zoo net path, its value when config.json omits it): the plain copies, both ways
KEYS: dict[str, tuple[str, Any]] = {
    "num_hidden_layers": ("n_layers", REQUIRED),
    "max_position_embeddings": ("context", REQUIRED),
    "hidden_size": ("block.d_model", REQUIRED),
    "num_attention_heads": ("block.n_heads", REQUIRED),
    "intermediate_size": ("block.d_ff", REQUIRED),
    "layer_norm_eps": ("block.norm_eps", 1e-5),
    "use_parallel_residual": ("block.parallel", True),
    "attention_bias": ("block.bias_q", True),  # all four projections: the rest in :func:`gpt_neox_shape`
    "hidden_dropout": ("block.dropout", 0.0),  # on each residual branch and on the embeddings
    "attention_dropout": ("block.attn_dropout", 0.0),
    "tie_word_embeddings": ("tie_embeddings", False),
    "vocab_size": ("embedder.vocab_size", REQUIRED),
}
# every GPTNeoXConfig key: the plain copies, the activation and the rotary table (either spelling)
# read; the classifier heads' dropout (no LM head reads it) ignored; is_decoder read by no layer
CONFIG_KEYS = ConfigKeys(reads=frozenset(KEYS) | {"hidden_act", "rope_parameters", "rope_scaling", "rotary_pct",
                                                 "rotary_emb_base", "partial_rotary_factor", "rope_theta"},
                         ignores=frozenset({"classifier_dropout", "is_decoder"}))
# zoo layer weight -> GPT-NeoX's (each with its bias where the checkpoint has one)
LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn.out": "attention.dense",
         "ffn.fc_in": "mlp.dense_h_to_4h", "ffn.fc_out": "mlp.dense_4h_to_h"}
# the fused attention weight, and the zoo projections it holds per head, in their order within a head
QKV_PER_HEAD = ("attention.query_key_value", ("attn.q", "attn.k", "attn.v"))


def gpt_neox_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=pythia`` the shape of a
    GPT-NeoX ``config.json`` (as a dict; every dependent key listed, for a resolved config); what the
    zoo net does not express is refused, naming it."""
    check_keys(config, CONFIG_KEYS)
    config = ROTARY_DEFAULTS | dict(config)
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"GPT-NeoX hidden_act={act!r} is not supported: expected one of {sorted(ACTIVATIONS)}")
    out = copies(config, KEYS)
    base, fraction, scale = rotary(config, base_key="rotary_emb_base", fraction_key="rotary_pct")
    if scale != 1:
        raise ValueError(f"gpt_neox config: rope_parameters.rope_type='linear' (factor {scale}) is not implemented by "
                         f"the zoo's GPT-NeoX; it rotates with the plain table (rope_type default)")
    d, heads, vocab = out["block.d_model"], out["block.n_heads"], out["embedder.vocab_size"]
    try:
        rotary_width(d // heads, fraction)  # refuses a rotated part that is odd or empty
    except ValueError as err:  # named with the config's keys, not the zoo's
        raise ValueError(f"gpt_neox config: rotary_pct (partial_rotary_factor)={fraction} of a head of {d // heads} "
                         f"(hidden_size={d} / num_attention_heads={heads}) is not implemented by the zoo: {err}") from None
    bias = bool(out["block.bias_q"])
    return out | {
        "rotary": True,
        "rotary_base": float(base),
        "rotary_fraction": float(fraction),
        "tie_embeddings": bool(out["tie_embeddings"]),
        "block.parallel": bool(out["block.parallel"]),
        "block.activation": ACTIVATIONS[act],
        "block.bias_q": bias, "block.bias_k": bias, "block.bias_v": bias, "block.bias_out": bias,
        "embedder.max_len": out["context"],
        "head.vocab_size": vocab,
    }


def per_head(fused: Tensor, n_heads: int, parts: tuple[str, ...]) -> dict[str, Tensor]:
    """A weight (or bias) whose rows are laid out ``[n_heads, len(parts), head_dim]`` cut into one
    per part, ``(n_heads * head_dim, ...)`` each, heads in order (a copy: the rows are not evenly spaced)."""
    grouped = fused.unflatten(0, (n_heads, len(parts), -1))
    return {part: grouped[:, i].flatten(0, 1) for i, part in enumerate(parts)}


def gpt_neox_state_dict(hf: dict[str, Tensor], n_layers: int, n_heads: int) -> dict[str, Tensor]:
    """Rename a ``GPTNeoXForCausalLM``'s weights (in memory, or as a folder holds them) to the zoo's."""
    sd = {k.removeprefix("gpt_neox."): v for k, v in hf.items()}
    head = sd.get("embed_out.weight", sd.get("lm_head.weight", sd["embed_in.weight"]))  # absent when tied
    out = {"embedder.tokens.weight": sd["embed_in.weight"], "head.proj.weight": head,
           "stack.norm.weight": sd["final_layer_norm.weight"], "stack.norm.bias": sd["final_layer_norm.bias"]}
    fused, parts = QKV_PER_HEAD
    for i in range(n_layers):
        h, z = f"layers.{i}.", f"stack.blocks.{i}."
        for kind in ("weight", "bias"):
            out |= {f"{z}{ours}.{kind}": sd[f"{h}{theirs}.{kind}"] for ours, theirs in LAYER.items()
                    if f"{h}{theirs}.{kind}" in sd}
            if f"{h}{fused}.{kind}" in sd:
                cut = per_head(copied_from(sd[f"{h}{fused}.{kind}"]), n_heads, parts)
                out |= {f"{z}{part}.{kind}": value for part, value in cut.items()}
    return out


def _state_dict(hf: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
    return gpt_neox_state_dict(hf, net["n_layers"], at(net, "block.n_heads"))


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo Pythia (built from conf/model/pythia.yaml) holding ``hf_model``'s weights."""
    shape = gpt_neox_shape(hf_model.config.to_dict())
    net = build_net("pythia", shape_overrides(shape), {"vocab_size": shape["embedder.vocab_size"]})
    load_mapped(net, gpt_neox_state_dict(hf_model.state_dict(), shape["n_layers"], shape["block.n_heads"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the GPT-NeoX folder at ``path``, the net
    holding its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = gpt_neox_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, gpt_neox_state_dict(state, shape["n_layers"], shape["block.n_heads"]))


def rotary_config(net: dict[str, Any]) -> dict[str, Any]:
    """GPTNeoXConfig's rotary table (transformers 5 keeps ``rotary_emb_base`` and ``rotary_pct`` in
    ``rope_parameters``)."""
    return {"rope_parameters": {"rope_type": "default", "rope_theta": at(net, "rotary_base"),
                                "partial_rotary_factor": at(net, "rotary_fraction")}}


FAMILY = Family(
    hf_class="GPTNeoXForCausalLM", config_class="GPTNeoXConfig", keys=plain(KEYS),
    activations=ACTIVATIONS, activation_key="hidden_act", shape=config_only(gpt_neox_shape),
    state_dict=_state_dict, extra=rotary_config)

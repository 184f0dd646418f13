"""Hugging Face BLOOM (``BloomForCausalLM``) -> zoo BLOOM (conf/model/bloom.yaml) and back, from a
model in memory (:func:`from_transformers`) or a checkpoint folder (:func:`pretrained`, the
``model.init_from=DIR`` hook).

BLOOM is GPT-2's Block (conf/block/gpt2.yaml: pre-LN LayerNorm, tanh GELU, biases everywhere, a
feed-forward 4 x wide) with ALiBi in place of position vectors (``Model.bias``: :class:`zoo.nn.alibi.ALiBi`,
the slopes of BLOOM's ``_get_alibi_slopes``), a LayerNorm on the token embeddings
(``word_embeddings_layernorm``: the embedder's ``norm_eps``) and the head tied to the embedding.
Its fused ``self_attention.query_key_value`` is laid out per head like GPT-NeoX's
(``[n_heads, 3, head_dim]`` along its rows): :data:`QKV_PER_HEAD` says so and
:func:`zoo.convert.gpt_neox.per_head` cuts it.

BloomConfig has no context length (ALiBi needs no table); the zoo's is read from ``seq_length``
(the key Megatron-DeepSpeed's BLOOM configs name it by, written back by the export), else BLOOM's
training length, 2048. What the zoo cannot express (the residual taken after the norm) is refused
in one line.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, copied_from, head_tied, init_net,
                               load_mapped, read_checkpoint_dir, shape_overrides)
from zoo.convert.family import REQUIRED, Family, at, config_only, copies, plain
from zoo.convert.gpt_neox import per_head

MODEL_TYPES = ("bloom",)  # the config.json model_type values this converter reads
CONTEXT = 2048  # BLOOM's training length: the zoo's context where config.json names none
# Hugging Face config key -> (zoo net path, its value when config.json omits it): the plain copies, both ways
KEYS: dict[str, tuple[str, Any]] = {
    "n_layer": ("n_layers", REQUIRED),
    "seq_length": ("context", CONTEXT),
    "hidden_size": ("block.d_model", REQUIRED),
    "n_head": ("block.n_heads", REQUIRED),
    "layer_norm_epsilon": ("block.norm_eps", 1e-5),
    "hidden_dropout": ("block.dropout", 0.0),  # on each residual branch
    "attention_dropout": ("block.attn_dropout", 0.0),
    "tie_word_embeddings": ("tie_embeddings", True),
    "vocab_size": ("embedder.vocab_size", REQUIRED),
}
# old spellings BloomConfig still takes (its attribute_map and ``n_embed``)
ALIASES = {"n_layer": "num_hidden_layers", "n_head": "num_attention_heads", "hidden_size": "n_embed"}
# every BloomConfig key: the plain copies read; pretraining_tp and slow_but_exact (the output projection
# summed in slices: the same product) ignored, as are the Megatron-DeepSpeed training switches released
# checkpoints carry (fused kernels, fp32 softmax, ALiBi's offset: softmax does not move under it);
# the residual taken after the norm is not implemented
CONFIG_KEYS = ConfigKeys(
    reads=frozenset(KEYS) | frozenset(ALIASES.values()),
    ignores=frozenset({"pretraining_tp", "slow_but_exact", "attention_softmax_in_fp32", "bias_dropout_fusion",
                       "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv", "unk_token_id"}),
    fixed={"apply_residual_connection_post_layernorm": False, "n_inner": None})
# zoo layer weight -> BLOOM's (each with its bias)
LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn.out": "self_attention.dense",
         "ffn.fc_in": "mlp.dense_h_to_4h", "ffn.fc_out": "mlp.dense_4h_to_h"}
# the fused attention weight, and the zoo projections it holds per head, in their order within a head
QKV_PER_HEAD = ("self_attention.query_key_value", ("attn.q", "attn.k", "attn.v"))


def bloom_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=bloom`` the shape of a
    BLOOM ``config.json`` (as a dict; every dependent key listed, for a resolved config); what the
    zoo net does not express is refused, naming it."""
    check_keys(config, CONFIG_KEYS)
    spelt = {key: config[other] for key, other in ALIASES.items() if key not in config and other in config}
    out = copies(config | spelt, KEYS)
    d, heads, eps = out["block.d_model"], out["block.n_heads"], out["block.norm_eps"]
    return out | {
        "tie_embeddings": bool(out["tie_embeddings"]),
        "rotary": False,
        "bias._target_": "zoo.nn.alibi.ALiBi",
        "bias.n_heads": heads,
        "block.d_ff": 4 * d,
        "block.norm": "layernorm", "block.prenorm": True,
        "block.activation": "gelu_tanh", "block.gated": False,
        "block.bias_q": True, "block.bias_k": True, "block.bias_v": True, "block.bias_out": True,
        "block.bias_ffn": True,
        "embedder.positions": "none",
        "embedder.norm_eps": eps,  # word_embeddings_layernorm, at the layers' eps
        "embedder.max_len": out["context"],
        "head.vocab_size": out["embedder.vocab_size"],
    }


def bloom_state_dict(hf: dict[str, Tensor], n_layers: int, n_heads: int) -> dict[str, Tensor]:
    """Rename a ``BloomForCausalLM``'s weights (in memory, or as a folder holds them, with or
    without the ``transformer.`` prefix) to the zoo's."""
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()}
    embed = sd["word_embeddings.weight"]
    out = {"embedder.tokens.weight": embed, "head.proj.weight": sd.get("lm_head.weight", embed),  # absent when tied
           "embedder.norm.weight": sd["word_embeddings_layernorm.weight"],
           "embedder.norm.bias": sd["word_embeddings_layernorm.bias"],
           "stack.norm.weight": sd["ln_f.weight"], "stack.norm.bias": sd["ln_f.bias"]}
    fused, parts = QKV_PER_HEAD
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        for kind in ("weight", "bias"):
            out |= {f"{z}{ours}.{kind}": sd[f"{h}{theirs}.{kind}"] for ours, theirs in LAYER.items()}
            cut = per_head(copied_from(sd[f"{h}{fused}.{kind}"]), n_heads, parts)
            out |= {f"{z}{part}.{kind}": value for part, value in cut.items()}
    return out


def _tied(config: dict[str, Any], hf: dict[str, Tensor], folder: str | None = None) -> bool:
    """Whether the head is the token embedding as transformers 5 loads ``hf`` (:func:`head_tied`)."""
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()}
    return head_tied(config, sd["word_embeddings.weight"], sd.get("lm_head.weight"), KEYS["tie_word_embeddings"][1],
                     folder)


def _state_dict(hf: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
    return bloom_state_dict(hf, net["n_layers"], at(net, "block.n_heads"))


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo BLOOM (built from conf/model/bloom.yaml) holding ``hf_model``'s weights."""
    config, hf = hf_model.config.to_dict(), hf_model.state_dict()
    shape = bloom_shape(config) | {"tie_embeddings": _tied(config, hf)}
    net = build_net("bloom", shape_overrides(shape), {"vocab_size": shape["embedder.vocab_size"]})
    load_mapped(net, bloom_state_dict(hf, shape["n_layers"], shape["block.n_heads"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the BLOOM folder at ``path``, the net
    holding its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = bloom_shape(config) | {"tie_embeddings": _tied(config, state, path)}
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, bloom_state_dict(state, shape["n_layers"], shape["block.n_heads"]))


FAMILY = Family(hf_class="BloomForCausalLM", config_class="BloomConfig", keys=plain(KEYS),
                shape=config_only(bloom_shape), state_dict=_state_dict)

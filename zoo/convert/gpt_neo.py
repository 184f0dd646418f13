"""Hugging Face GPT-Neo (``GPTNeoForCausalLM``) -> zoo GPT-Neo (conf/model/gpt_neo.yaml), from a
model in memory (:func:`from_transformers`) or a checkpoint folder (:func:`pretrained`, the
``model.init_from=DIR`` hook).

GPT-Neo names its embeddings and LayerNorms as GPT-2 does (shared: ``gpt2_layout``); its
attention and MLP are plain ``nn.Linear`` (no Conv1D transpose, no fused q/k/v). A local
layer's ``window_size=w`` lets query i see keys ``i - w < j <= i`` (its causal bias minus
``tril(bias, -w)``), which is the zoo's ``LocalMask(window=w)`` as is; its logits are not
scaled (``attn_scale=1.0``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, init_net, layer_pattern, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.gpt2 import gpt2_layout
from zoo.convert.family import Family, config_only, layer_masks, tokens

MODEL_TYPES = ("gpt_neo",)  # the config.json model_type values this converter reads
KINDS = ("global", "local")
# every GPTNeoConfig key: those :func:`gpt_neo_shape` reads; ignored: the classifier heads' dropout
CONFIG_KEYS = ConfigKeys(reads=frozenset({"vocab_size", "max_position_embeddings", "hidden_size", "num_layers",
                                          "attention_types", "attention_layers", "num_heads", "intermediate_size", "window_size",
                                          "activation_function", "resid_dropout", "embed_dropout", "attention_dropout",
                                          "layer_norm_epsilon", "tie_word_embeddings"}),
                         ignores=frozenset({"classifier_dropout"}))


def attention_layers(config: dict[str, Any]) -> list[str]:
    """Each layer's attention kind: ``attention_layers`` where config.json has it (transformers 5 keeps
    that value over its own expansion), else ``attention_types`` ``[[kinds, repeat], ...]`` expanded as
    ``GPTNeoConfig`` expands it (``[[["global", "local"], 2]]`` -> global, local, global, local)."""
    return config.get("attention_layers") or [kind for kinds, repeat in config["attention_types"]
                                              for _ in range(repeat) for kind in kinds]


def gpt_neo_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=gpt_neo`` the shape,
    layer pattern and dropout of a GPT-Neo ``config.json`` (as a dict; every dependent key listed,
    for a resolved config); what the zoo net does not express is refused, naming it. A local
    window wider than the context cuts nothing there: those layers are causal (as transformers runs them)."""
    check_keys(config, CONFIG_KEYS)
    if config.get("activation_function", "gelu_new") != "gelu_new":
        raise ValueError(f"activation_function={config['activation_function']!r} is not supported (gelu_new)")
    if not config.get("tie_word_embeddings", True):
        raise ValueError("tie_word_embeddings=False is not supported: the zoo's GPT-Neo ties its head")
    kinds = attention_layers(config)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"attention types {unknown} are not supported (global or local)")
    d, vocab, context = config["hidden_size"], config["vocab_size"], config["max_position_embeddings"]
    causal, window = {"_target_": "zoo.nn.masks.CausalMask"}, config["window_size"]
    masks = {"global": causal, "local": causal if window > context else {"_target_": "zoo.nn.masks.LocalMask",
                                                                          "window": window, "causal": True}}
    return {
        "n_layers": config["num_layers"],
        "context": context,
        "tie_embeddings": True,
        "mask.masks": [masks[kind] for kind in layer_pattern(kinds)],
        "block.d_model": d,
        "block.n_heads": config["num_heads"],
        "block.d_ff": config.get("intermediate_size") or 4 * d,
        "block.norm_eps": config.get("layer_norm_epsilon", 1e-5),
        "block.activation": "gelu_tanh",
        "block.bias_q": False, "block.bias_k": False, "block.bias_v": False,
        "block.attn_scale": 1.0,
        "block.dropout": config.get("resid_dropout", 0.0),
        "block.attn_dropout": config.get("attention_dropout", 0.0),
        "embedder.vocab_size": vocab,
        "embedder.max_len": context,
        "embedder.dropout": config.get("embed_dropout", 0.0),
        "head.vocab_size": vocab,
    }


def gpt_neo_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename GPT-Neo's weights (``GPTNeoForCausalLM.state_dict()``) to the zoo's."""
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()}
    out = gpt2_layout(sd, n_layers)
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        a = h + "attn.attention."
        out |= {
            z + "attn.q.weight": sd[a + "q_proj.weight"], z + "attn.k.weight": sd[a + "k_proj.weight"],
            z + "attn.v.weight": sd[a + "v_proj.weight"],
            z + "attn.out.weight": sd[a + "out_proj.weight"], z + "attn.out.bias": sd[a + "out_proj.bias"],
            z + "ffn.fc_in.weight": sd[h + "mlp.c_fc.weight"], z + "ffn.fc_in.bias": sd[h + "mlp.c_fc.bias"],
            z + "ffn.fc_out.weight": sd[h + "mlp.c_proj.weight"], z + "ffn.fc_out.bias": sd[h + "mlp.c_proj.bias"],
        }
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo GPT-Neo (built from conf/model/gpt_neo.yaml) holding ``hf_model``'s weights."""
    shape = gpt_neo_shape(hf_model.config.to_dict())
    net = build_net("gpt_neo", shape_overrides(shape), {"vocab_size": shape["embedder.vocab_size"]})
    load_mapped(net, gpt_neo_state_dict(hf_model.state_dict(), shape["n_layers"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the GPT-Neo folder at ``path``, its layer
    pattern and window included, the net holding its weights). The data's vocabulary must be the
    checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = gpt_neo_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, gpt_neo_state_dict(state, shape["n_layers"]))


def export_attention(net: dict[str, Any]) -> dict[str, Any]:
    """GPT-Neo's ``attention_types`` (one entry per layer) and ``window_size`` of the zoo net's masks."""
    layers, window = layer_masks(net, {"zoo.nn.masks.CausalMask": "global", "zoo.nn.masks.LocalMask": "local"},
                                 "zoo.nn.masks.LocalMask", "GPTNeoForCausalLM")
    return {"attention_types": [[[kind], 1] for kind in layers], "window_size": window or 256}


FAMILY = Family(
    hf_class="GPTNeoForCausalLM", config_class="GPTNeoConfig",
    keys={"num_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
          "num_heads": "block.n_heads", "intermediate_size": "block.d_ff", "layer_norm_epsilon": "block.norm_eps",
          "vocab_size": "embedder.vocab_size", "tie_word_embeddings": "tie_embeddings",
          "resid_dropout": "block.dropout", "attention_dropout": "block.attn_dropout",
          "embed_dropout": "embedder.dropout"},
    activations={"gelu_new": "gelu_tanh"}, activation_key="activation_function", shape=config_only(gpt_neo_shape),
    state_dict=lambda sd, net: gpt_neo_state_dict(sd, net["n_layers"]),
    example=tokens, extra=export_attention)

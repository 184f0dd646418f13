"""Hugging Face GPT-2 (``GPT2LMHeadModel``) -> zoo GPT: one short, shape-checked mapping, from a
model in memory (:func:`from_transformers`) or a checkpoint folder (:func:`pretrained`, the
``model.init_from=DIR`` hook)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, head_tied, init_net, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.family import REQUIRED, Family, config_only, copies, plain

MODEL_TYPES = ("gpt2",)  # the config.json model_type values this converter reads
# GPT-2's ``activation_function`` -> the zoo's activation names.
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# GPT-2 config key -> (zoo net path, its value when config.json omits it): the plain copies, both ways
KEYS = {"n_layer": ("n_layers", REQUIRED), "n_positions": ("context", REQUIRED), "n_embd": ("block.d_model", REQUIRED),
        "n_head": ("block.n_heads", REQUIRED), "n_inner": ("block.d_ff", None),  # None: 4 x n_embd
        "layer_norm_epsilon": ("block.norm_eps", 1e-5), "vocab_size": ("embedder.vocab_size", REQUIRED),
        "tie_word_embeddings": ("tie_embeddings", True), "resid_pdrop": ("block.dropout", 0.1),
        "attn_pdrop": ("block.attn_dropout", 0.1), "embd_pdrop": ("embedder.dropout", 0.1)}


# every GPT2Config key: the plain copies and the activation read; the scaling of the scores fixed;
# the sequence-summary head of GPT2DoubleHeadsModel (no LM head reads it) ignored, and the fp32
# upcast of the scores (the zoo computes them in fp32 already)
CONFIG_KEYS = ConfigKeys(reads=frozenset(KEYS) | {"activation_function"},
                         ignores=frozenset({"summary_type", "summary_use_proj", "summary_activation",
                                            "summary_proj_to_labels", "summary_first_dropout",
                                            "reorder_and_upcast_attn", "n_ctx"}),
                         fixed={"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False})


def gpt2_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=gpt`` the shape
    (and dropout) of a GPT-2 ``config.json``; refuses what the zoo Block does not express."""
    check_keys(config, CONFIG_KEYS)
    act = config.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise ValueError(f"GPT-2 activation_function={act!r} is not supported: expected one of {sorted(ACTIVATIONS)}")
    out = copies(config, KEYS)
    d = out["block.d_model"]
    return out | {
        "tie_embeddings": bool(out["tie_embeddings"]),
        "block.d_ff": out["block.d_ff"] or 4 * d,
        "block.activation": ACTIVATIONS[act],
        "embedder.max_len": out["context"],
        "head.vocab_size": out["embedder.vocab_size"],
    }


def gpt2_layout(sd: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """What GPT-2 and GPT-Neo name alike (keys without ``transformer.``): token and learned
    position embeddings, the two LayerNorms of each block, the final LayerNorm, and the head:
    the token embedding (tied) unless the checkpoint has its own ``lm_head.weight``."""
    out = {
        "embedder.tokens.weight": sd["wte.weight"],
        "embedder.positions.weight": sd["wpe.weight"],
        "stack.norm.weight": sd["ln_f.weight"],
        "stack.norm.bias": sd["ln_f.bias"],
        "head.proj.weight": sd.get("lm_head.weight", sd["wte.weight"]),
    }
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        out |= {
            z + "attn_norm.weight": sd[h + "ln_1.weight"], z + "attn_norm.bias": sd[h + "ln_1.bias"],
            z + "ffn_norm.weight": sd[h + "ln_2.weight"], z + "ffn_norm.bias": sd[h + "ln_2.bias"],
        }
    return out


def gpt2_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename GPT-2's weights to the zoo's. GPT-2 stores Conv1D weights as (in, out)
    and q, k, v as one matrix: transpose and split them."""
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()}
    out = gpt2_layout(sd, n_layers)
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        q, k, v = sd[h + "attn.c_attn.weight"].t().chunk(3, dim=0)
        qb, kb, vb = sd[h + "attn.c_attn.bias"].chunk(3)
        out |= {
            z + "attn.q.weight": q, z + "attn.k.weight": k, z + "attn.v.weight": v,
            z + "attn.q.bias": qb, z + "attn.k.bias": kb, z + "attn.v.bias": vb,
            z + "attn.out.weight": sd[h + "attn.c_proj.weight"].t(), z + "attn.out.bias": sd[h + "attn.c_proj.bias"],
            z + "ffn.fc_in.weight": sd[h + "mlp.c_fc.weight"].t(), z + "ffn.fc_in.bias": sd[h + "mlp.c_fc.bias"],
            z + "ffn.fc_out.weight": sd[h + "mlp.c_proj.weight"].t(), z + "ffn.fc_out.bias": sd[h + "mlp.c_proj.bias"],
        }
    return out


def tied(config: dict[str, Any], hf: dict[str, Tensor], folder: str | None = None) -> bool:
    """Whether the head is the token embedding as transformers 5 loads ``hf`` (:func:`head_tied`)."""
    embedding = hf.get("transformer.wte.weight", hf.get("wte.weight"))
    return head_tied(config, embedding, hf.get("lm_head.weight"), KEYS["tie_word_embeddings"][1], folder)


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo GPT (built from conf/model/gpt.yaml) holding ``hf_model``'s weights."""
    cfg, hf = hf_model.config.to_dict(), hf_model.state_dict()
    shape = gpt2_shape(cfg) | {"tie_embeddings": tied(cfg, hf)}
    net = build_net("gpt", shape_overrides(shape), {"vocab_size": cfg["vocab_size"]})
    load_mapped(net, gpt2_state_dict(hf, cfg["n_layer"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the GPT-2 folder at ``path``, the net
    holding its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = gpt2_shape(config) | {"tie_embeddings": tied(config, state, path)}
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, gpt2_state_dict(state, shape["n_layers"]))


FAMILY = Family(
    hf_class="GPT2LMHeadModel", config_class="GPT2Config",
    keys=plain(KEYS),
    activations=ACTIVATIONS, activation_key="activation_function", shape=config_only(gpt2_shape),
    state_dict=lambda sd, net: gpt2_state_dict(sd, net["n_layers"]))

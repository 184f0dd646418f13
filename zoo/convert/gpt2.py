"""Hugging Face GPT-2 (``GPT2LMHeadModel``) -> zoo GPT: one short, shape-checked mapping, from a
model in memory (:func:`from_transformers`) or a checkpoint folder (:func:`pretrained`, the
``model.init_from=DIR`` hook)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import build_net, check_vocab, init_net, load_mapped, read_checkpoint_dir, refuse, shape_overrides
from zoo.convert.family import Family, config_only

MODEL_TYPES = ("gpt2",)  # the config.json model_type values this converter reads
# GPT-2's ``activation_function`` -> the zoo's activation names.
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def gpt2_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=gpt`` the shape
    (and dropout) of a GPT-2 ``config.json``; refuses what the zoo Block does not express."""
    refuse(config, "GPT-2 config", scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
           add_cross_attention=False)
    act = config.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise ValueError(f"GPT-2 activation_function={act!r} is not supported: expected one of {sorted(ACTIVATIONS)}")
    d, vocab, context = config["n_embd"], config["vocab_size"], config["n_positions"]
    return {
        "n_layers": config["n_layer"],
        "context": context,
        "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
        "block.d_model": d,
        "block.n_heads": config["n_head"],
        "block.d_ff": config.get("n_inner") or 4 * d,
        "block.norm_eps": config.get("layer_norm_epsilon", 1e-5),
        "block.activation": ACTIVATIONS[act],
        "block.dropout": config.get("resid_pdrop", 0.1),
        "block.attn_dropout": config.get("attn_pdrop", 0.1),
        "embedder.vocab_size": vocab,
        "embedder.d_model": d,
        "embedder.max_len": context,
        "embedder.dropout": config.get("embd_pdrop", 0.1),
        "head.d_model": d,
        "head.vocab_size": vocab,
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


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo GPT (built from conf/model/gpt.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    net = build_net("gpt", shape_overrides(gpt2_shape(cfg)), {"vocab_size": cfg["vocab_size"]})
    load_mapped(net, gpt2_state_dict(hf_model.state_dict(), cfg["n_layer"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the GPT-2 folder at ``path``, the net
    holding its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = gpt2_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, gpt2_state_dict(state, shape["n_layers"]))


FAMILY = Family(
    hf_class="GPT2LMHeadModel", config_class="GPT2Config",
    keys={"n_layer": "n_layers", "n_positions": "context", "n_embd": "block.d_model", "n_head": "block.n_heads",
          "n_inner": "block.d_ff", "layer_norm_epsilon": "block.norm_eps", "vocab_size": "embedder.vocab_size",
          "tie_word_embeddings": "tie_embeddings", "resid_pdrop": "block.dropout", "attn_pdrop": "block.attn_dropout",
          "embd_pdrop": "embedder.dropout"},
    activations=ACTIVATIONS, activation_key="activation_function", shape=config_only(gpt2_shape),
    state_dict=lambda sd, net: gpt2_state_dict(sd, net["n_layers"]))

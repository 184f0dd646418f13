"""Hugging Face BERT (``BertForMaskedLM`` / ``BertModel``) -> zoo BERT: one short,
shape-checked mapping, and a loader for checkpoint directories.

Three ways in:

- :func:`from_transformers`: an in-memory ``BertForMaskedLM`` -> zoo BERT (the exactness test).
- :func:`load_checkpoint_dir`: a checkpoint directory (``config.json`` + ``model.safetensors``
  or ``pytorch_model.bin``) -> zoo BERT; the tokenizer next to it comes from
  :meth:`zoo.data.tokenizers.HFTokenizer.from_pretrained_dir`.
- :func:`pretrained`: the hook ``model.init_from=DIR`` calls (see ``Objective``): it turns a
  training run's net config into the checkpoint's shape and builds the net with its weights.
"""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import build_net, check_vocab, init_net, load_mapped, read_checkpoint_dir
from zoo.convert.family import REQUIRED, Family, config_only, copies, plain

# Hugging Face ``hidden_act`` -> the zoo's activation names.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
HEAD_PREFIX = "head."
MODEL_TYPES = ("bert",)  # the config.json model_type values this converter reads
# BERT config key -> (zoo net path, its value when config.json omits it): the plain copies, both ways (BigBird's too)
KEYS = {"num_hidden_layers": ("n_layers", REQUIRED), "max_position_embeddings": ("context", REQUIRED),
        "hidden_size": ("block.d_model", REQUIRED), "num_attention_heads": ("block.n_heads", REQUIRED),
        "intermediate_size": ("block.d_ff", REQUIRED), "layer_norm_eps": ("block.norm_eps", 1e-12),
        "vocab_size": ("embedder.vocab_size", REQUIRED), "type_vocab_size": ("embedder.n_segments", 2)}


def bert_shape(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=bert`` the shape
    of a Hugging Face BERT ``config.json``. Every dependent key is listed explicitly, so the
    same values apply to a resolved config (where ``${..block.d_model}`` is already a number)."""
    position_kind = hf_config.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        raise ValueError(f"position_embedding_type={position_kind!r}: only 'absolute' BERT positions are supported")
    act = hf_config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} is not supported: expected one of {sorted(ACTIVATIONS)}")
    out = copies(hf_config, KEYS)
    d, eps = out["block.d_model"], out["block.norm_eps"]
    return out | {
        "block.activation": ACTIVATIONS[act],
        "embedder.d_model": d,
        "embedder.max_len": out["context"],
        "embedder.norm_eps": eps,
        "head.d_model": d,
        "head.vocab_size": out["embedder.vocab_size"],
        "head.activation": ACTIVATIONS[act],
        "head.norm_eps": eps,
    }


def bert_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename BERT's weights to the zoo's. The pooler and the next-sentence head have no
    counterpart (the zoo BERT is trained without NSP) and are left out. Without MLM head
    weights (a ``BertModel`` checkpoint) the result has no ``head.*`` entries."""
    sd = {k.removeprefix("bert.").replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
          for k, v in hf.items()}  # old TF-converted checkpoints name LayerNorm weights gamma/beta
    e = "embeddings."
    out = {
        "embedder.tokens.weight": sd[e + "word_embeddings.weight"],
        "embedder.positions.weight": sd[e + "position_embeddings.weight"],
        "embedder.segments.weight": sd[e + "token_type_embeddings.weight"],
        "embedder.norm.weight": sd[e + "LayerNorm.weight"],
        "embedder.norm.bias": sd[e + "LayerNorm.bias"],
    }
    for i in range(n_layers):
        h, z = f"encoder.layer.{i}.", f"stack.blocks.{i}."
        for hf_name, zoo_name in (
            ("attention.self.query", "attn.q"), ("attention.self.key", "attn.k"), ("attention.self.value", "attn.v"),
            ("attention.output.dense", "attn.out"), ("attention.output.LayerNorm", "attn_norm"),
            ("intermediate.dense", "ffn.fc_in"), ("output.dense", "ffn.fc_out"), ("output.LayerNorm", "ffn_norm"),
        ):
            out[z + zoo_name + ".weight"] = sd[h + hf_name + ".weight"]
            out[z + zoo_name + ".bias"] = sd[h + hf_name + ".bias"]
    p = "cls.predictions."
    if p + "bias" in sd:
        out |= {
            "head.dense.weight": sd[p + "transform.dense.weight"], "head.dense.bias": sd[p + "transform.dense.bias"],
            "head.norm.weight": sd[p + "transform.LayerNorm.weight"], "head.norm.bias": sd[p + "transform.LayerNorm.bias"],
            "head.decoder.weight": out["embedder.tokens.weight"],  # tied
            "head.decoder.bias": sd[p + "bias"],
        }
    return out


def load_mlm(net: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """load_mapped, keeping the net's fresh MLM head where the checkpoint has none (a checkpoint
    of the bare encoder: ``BertModel``, ``ModernBertModel``, ...)."""
    if not any(k.startswith(HEAD_PREFIX) for k in state):
        warnings.warn(f"{source} has no MLM head (an encoder-only checkpoint): the head starts from scratch")
        state = state | {k: v for k, v in net.state_dict().items() if k.startswith(HEAD_PREFIX)}
        state[HEAD_PREFIX + "decoder.weight"] = state["embedder.tokens.weight"]  # keep it tied
    load_mapped(net, state)


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo BERT (built from conf/model/bert.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    return _from_config_and_state(cfg, hf_model.state_dict(), type(hf_model).__name__)


def _from_config_and_state(config: dict[str, Any], state: dict[str, Tensor], source: str) -> nn.Module:
    """The checkpoint's shape and also its dropout, so that the zoo BERT trains as the original does."""
    shape = bert_shape(config)
    dropout = {"block.dropout": config.get("hidden_dropout_prob", 0.1), "embedder.dropout": config.get("hidden_dropout_prob", 0.1),
               "block.attn_dropout": config.get("attention_probs_dropout_prob", 0.1)}
    overrides = [f"model.net.{k}={v}" for k, v in (shape | dropout).items()]
    net = build_net("bert", overrides, {"vocab_size": config["vocab_size"]})
    load_mlm(net, bert_state_dict(state, shape["n_layers"]), source)
    return net.eval()


@torch.no_grad()
def load_checkpoint_dir(path: str | Path) -> nn.Module:
    """The zoo BERT of a Hugging Face BERT checkpoint directory, in eval mode."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    return _from_config_and_state(config, state, str(path))


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the checkpoint at ``path``, the net
    built from it holding the checkpoint's weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = bert_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, bert_state_dict(state, shape["n_layers"]), partial(load_mlm, source=path))


# written by the export, not read by the import (a fine-tuning run keeps its own dropout)
DROPOUT_KEYS = {"hidden_dropout_prob": "block.dropout", "attention_probs_dropout_prob": "block.attn_dropout"}
FAMILY = Family(hf_class="BertForMaskedLM", config_class="BertConfig", keys=plain(KEYS) | DROPOUT_KEYS,
                activations=ACTIVATIONS, activation_key="hidden_act", shape=config_only(bert_shape),
                state_dict=lambda sd, net: bert_state_dict(sd, net["n_layers"]))

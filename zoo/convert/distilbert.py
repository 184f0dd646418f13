"""Hugging Face DistilBERT (``DistilBertForMaskedLM`` / ``DistilBertModel``) -> zoo ``model=distilbert``:
BERT without token types (:mod:`zoo.convert.bert`'s shape and its mapping by a table of names), under
its own names (``q_lin``, ``sa_layer_norm``, ``ffn.lin1``, ``vocab_transform``, ``vocab_projector``, ...)
and config keys (``dim``, ``hidden_dim``, ``n_heads``, ``activation``). Every LayerNorm's eps is
1e-12, fixed in the reference. ``sinusoidal_pos_embds=True`` is the zoo's ``sinusoidal`` positions
(the same interleaved table, which the checkpoint stores and the converter copies)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.bert import ACTIVATIONS, Layout, activation, dependent, encoder_state_dict, init_encoder, load_mlm
from zoo.convert.common import ConfigKeys, build_net, check_keys, check_vocab, read_checkpoint_dir, shape_overrides
from zoo.convert.family import REQUIRED, Family, copies, plain

MODEL_TYPES = ("distilbert",)  # the config.json model_type values this converter reads
EPS = 1e-12  # every DistilBERT LayerNorm's, not a config key
# DistilBERT config key -> (zoo net path, its value when config.json omits it)
KEYS = {"n_layers": ("n_layers", REQUIRED), "max_position_embeddings": ("context", REQUIRED),
        "dim": ("block.d_model", REQUIRED), "n_heads": ("block.n_heads", REQUIRED),
        "hidden_dim": ("block.d_ff", REQUIRED), "vocab_size": ("embedder.vocab_size", REQUIRED)}
# every DistilBertConfig key: the plain copies, the activation and the kind of positions read; the
# dropouts ignored (the task heads' too), and the released configs' tie_weights_ (transformers 5 reads
# tie_word_embeddings alone); the MLM decoder is the token table (tie_word_embeddings true)
CONFIG_KEYS = ConfigKeys(reads=frozenset(KEYS) | {"activation", "sinusoidal_pos_embds"},
                         ignores=frozenset({"dropout", "attention_dropout", "qa_dropout", "seq_classif_dropout",
                                            "tie_weights_"}),
                         fixed={"tie_word_embeddings": True})
DISTILBERT = Layout(
    prefix="distilbert.",
    embedder={"tokens.weight": "embeddings.word_embeddings.weight",
              "positions.weight": "embeddings.position_embeddings.weight",
              "norm.weight": "embeddings.LayerNorm.weight", "norm.bias": "embeddings.LayerNorm.bias"},
    layer="transformer.layer.{}.",
    blocks={"attn.q": "attention.q_lin", "attn.k": "attention.k_lin", "attn.v": "attention.v_lin",
            "attn.out": "attention.out_lin", "attn_norm": "sa_layer_norm",
            "ffn.fc_in": "ffn.lin1", "ffn.fc_out": "ffn.lin2", "ffn_norm": "output_layer_norm"},
    head={"dense": "vocab_transform", "norm": "vocab_layer_norm"},
    head_bias=("vocab_projector.bias",), decoder="vocab_projector.weight")


# task=classify: DistilBertForSequenceClassification's head (pre_classifier + ReLU on [CLS], then classifier)
DISTILBERT_CLASSIFIER = {"dense": ("pre_classifier",), "proj": ("classifier",)}


def distilbert_shape(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=distilbert`` the
    shape of a Hugging Face DistilBERT ``config.json`` (every dependent key listed)."""
    check_keys(hf_config, CONFIG_KEYS)
    shape = dependent(copies(hf_config, KEYS) | {"block.norm_eps": EPS}, activation(hf_config, "activation"))
    return shape | {"embedder.positions": "sinusoidal" if hf_config.get("sinusoidal_pos_embds") else "learned"}


def distilbert_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename DistilBERT's weights to the zoo's (:func:`~zoo.convert.bert.encoder_state_dict`)."""
    return encoder_state_dict(hf, n_layers, DISTILBERT)


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo DistilBERT holding ``hf_model``'s weights, in eval mode."""
    config = hf_model.config.to_dict()
    shape = distilbert_shape(config)
    net = build_net("distilbert", shape_overrides(shape), {"vocab_size": config["vocab_size"]})
    load_mlm(net, distilbert_state_dict(hf_model.state_dict(), shape["n_layers"]), type(hf_model).__name__)
    return net.eval()


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face DistilBERT folder. The data's vocabulary must be the
    checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = distilbert_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_encoder(net_cfg, path, shape, distilbert_state_dict(state, shape["n_layers"]), state,
                        DISTILBERT_CLASSIFIER)


FAMILY = Family(hf_class="DistilBertForMaskedLM", config_class="DistilBertConfig",
                keys=plain(KEYS) | {"dropout": "block.dropout", "attention_dropout": "block.attn_dropout"},
                activations=ACTIVATIONS, activation_key="activation",
                shape=lambda config, net: distilbert_shape(config),
                state_dict=lambda sd, net: distilbert_state_dict(sd, net["n_layers"]),
                extra=lambda net: {"sinusoidal_pos_embds": net["embedder"]["positions"] == "sinusoidal"},
                classifier="DistilBertForSequenceClassification", encoder="DistilBertModel",
                question_answering="DistilBertForQuestionAnswering", tagger="DistilBertForTokenClassification")

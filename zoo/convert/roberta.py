"""Hugging Face RoBERTa and XLM-R (``RobertaForMaskedLM``, ``XLMRobertaForMaskedLM``; ``model_type``
``roberta`` / ``xlm-roberta``, one layout) -> zoo ``model=roberta``: BERT's Blocks and MLM objective
(:mod:`zoo.convert.bert`, its shape and its mapping by a table of names), with three differences,
all data:

- positions are counted from the ids (fairseq's ``make_positions``): real tokens read rows
  ``pad_token_id + 1`` onwards, padding reads row ``pad_token_id``, so ``max_position_embeddings``
  (514) holds a context of 512: the embedder's ``position_offset`` and ``position_pad_id``;
- one token type (``type_vocab_size=1``), still a weight, added to every token;
- the head's names (``lm_head.dense``, ``lm_head.layer_norm``, ``lm_head.bias``), and its activation
  is always the exact GELU whatever ``hidden_act`` says.

The export writes ``RobertaForMaskedLM``; :mod:`zoo.convert.xlm_roberta` declares the same under XLM-R's
class names: a run with ``model.converter=zoo.convert.xlm_roberta.pretrained`` is written as ``XLMRobertaForMaskedLM``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert import bert
from zoo.convert.bert import BERT, Layout, encoder_state_dict, init_encoder, load_mlm
from zoo.convert.common import build_net, check_keys, check_vocab, read_checkpoint_dir, shape_overrides
from zoo.convert.family import Family, plain

MODEL_TYPES = ("roberta", "xlm-roberta")  # the config.json model_type values this converter reads
ROBERTA = Layout(prefix="roberta.", embedder=BERT.embedder, layer=BERT.layer, blocks=BERT.blocks,
                 head={"dense": "lm_head.dense", "norm": "lm_head.layer_norm"},
                 head_bias=("lm_head.bias", "lm_head.decoder.bias"),  # tied: save_pretrained writes one
                 decoder="lm_head.decoder.weight")


# task=classify: RobertaForSequenceClassification's head (dense + tanh on <s>, then out_proj)
ROBERTA_CLASSIFIER = {"dense": ("classifier.dense",), "proj": ("classifier.out_proj",)}


def roberta_shape(hf_config: dict[str, Any]) -> dict[str, Any]:
    """:func:`~zoo.convert.bert.encoder_shape` with RoBERTa's positions (the table's first
    ``pad_token_id + 1`` rows are no position) and its head's fixed GELU; a key the converter does
    not implement is refused by name (BERT's :data:`~zoo.convert.bert.CONFIG_KEYS`, the padding id read)."""
    check_keys(hf_config, bert.CONFIG_KEYS)
    pad = hf_config.get("pad_token_id", 1)
    table = hf_config["max_position_embeddings"]
    if pad is None or not 0 <= pad < table - 1:
        raise ValueError(f"pad_token_id={pad!r}: RoBERTa's positions start after the padding row, which must "
                         f"be one of the {table} rows of max_position_embeddings")
    return bert.encoder_shape(hf_config) | {
        "context": table - pad - 1, "embedder.max_len": table,
        "embedder.position_offset": pad + 1, "embedder.position_pad_id": pad, "head.activation": "gelu"}


def roberta_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename RoBERTa's weights to the zoo's (:func:`~zoo.convert.bert.encoder_state_dict`)."""
    return encoder_state_dict(hf, n_layers, ROBERTA)


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo RoBERTa holding ``hf_model``'s weights (a ``RobertaForMaskedLM`` / ``XLMRobertaForMaskedLM``
    or their bare encoders), in eval mode."""
    config = hf_model.config.to_dict()
    shape = roberta_shape(config)
    net = build_net("roberta", shape_overrides(shape), {"vocab_size": config["vocab_size"],
                                                        "pad_id": shape["embedder.position_pad_id"]})
    load_mlm(net, roberta_state_dict(hf_model.state_dict(), shape["n_layers"]), type(hf_model).__name__)
    return net.eval()


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face RoBERTa or XLM-R folder. The data's vocabulary must be
    the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = roberta_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_encoder(net_cfg, path, shape, roberta_state_dict(state, shape["n_layers"]), state, ROBERTA_CLASSIFIER)


KEYS = {k: v for k, v in plain(bert.KEYS).items() if k != "max_position_embeddings"} | bert.DROPOUT_KEYS | {
    "max_position_embeddings": "embedder.max_len", "pad_token_id": "embedder.position_pad_id"}
FAMILY = Family(hf_class="RobertaForMaskedLM", config_class="RobertaConfig", keys=KEYS,
                activations=bert.ACTIVATIONS, activation_key="hidden_act",
                shape=lambda config, net: roberta_shape(config),
                state_dict=lambda sd, net: roberta_state_dict(sd, net["n_layers"]),
                classifier="RobertaForSequenceClassification", encoder="RobertaModel",
                question_answering="RobertaForQuestionAnswering", tagger="RobertaForTokenClassification")

"""Hugging Face BigBird (``BigBirdForMaskedLM``, ``attention_type="block_sparse"``) -> zoo
``model=bigbird``: BERT's weights and shapes (the same names, :mod:`zoo.convert.bert`) under
:class:`~zoo.nn.sparse.BigBirdMask`."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from zoo.convert import bert
from zoo.convert.bert import load_mlm, encoder_shape, bert_state_dict
from zoo.convert.common import ConfigKeys, build_net, check_keys, check_vocab, init_net, read_checkpoint_dir
from zoo.convert.family import Family, config_only, plain, tokens

MODEL_TYPES = ("big_bird",)
# BERT's keys plus the block-sparse pattern's two sizes; the pattern itself, BigBird's unscaled
# embeddings and its attention biases are the one computation the zoo has
CONFIG_KEYS = bert.CONFIG_KEYS | ConfigKeys(
    reads=frozenset({"block_size", "num_random_blocks"}),
    fixed={"attention_type": "block_sparse", "rescale_embeddings": False, "use_bias": True})


def big_bird_shape(hf_config: dict[str, Any]) -> dict[str, Any]:
    """:func:`~zoo.convert.bert.encoder_shape` plus the block-sparse pattern's settings. A config the
    zoo would compute differently is refused, naming the key (:data:`CONFIG_KEYS`)."""
    check_keys(hf_config, CONFIG_KEYS)
    return encoder_shape(hf_config) | {"mask.block_size": hf_config["block_size"],
                                    "mask.n_random": hf_config["num_random_blocks"]}


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo BigBird holding ``hf_model``'s weights (the exactness test), in eval mode."""
    config = hf_model.config.to_dict()
    shape = big_bird_shape(config)
    net = build_net("bigbird", [f"model.net.{k}={v}" for k, v in shape.items()], {"vocab_size": config["vocab_size"]})
    load_mlm(net, bert_state_dict(hf_model.state_dict(), shape["n_layers"]), type(hf_model).__name__)
    return net.eval()


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook for a Hugging Face BigBird folder (see :func:`zoo.convert.bert.pretrained`)."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = big_bird_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, bert_state_dict(state, shape["n_layers"]), partial(load_mlm, source=path))


FAMILY = Family(
    hf_class="BigBirdForMaskedLM", config_class="BigBirdConfig",
    keys=plain(bert.KEYS) | bert.DROPOUT_KEYS | {"block_size": "mask.block_size", "num_random_blocks": "mask.n_random"},
    activations=bert.ACTIVATIONS, activation_key="hidden_act", shape=config_only(big_bird_shape),
    state_dict=lambda sd, net: bert_state_dict(sd, net["n_layers"]),
    # long enough for block-sparse attention (Hugging Face falls back to full attention below)
    example=lambda net: tokens(net, length=(6 + 2 * net["mask"]["n_random"]) * net["mask"]["block_size"]),
    extra=lambda net: {"attention_type": "block_sparse"})

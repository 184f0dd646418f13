"""Hugging Face ModernBERT (``ModernBertForMaskedLM`` / ``ModernBertModel``) -> zoo ModernBERT
(conf/model/modernbert.yaml).

Conventions translated here:

- ``layer_types`` (``full_attention`` / ``sliding_attention``, a global layer every
  ``global_attn_every_n_layers``) -> a ``PerLayer`` pattern of ``NoMask`` and a bidirectional
  ``LocalMask``. ``local_attention=w`` lets token i see j when ``|i - j| <= w // 2``
  (``sliding_window`` is ``w // 2``; masking_utils' bidirectional overlay is inclusive), which is
  the zoo's bidirectional ``LocalMask(window=w)`` as is.
- ``rope_parameters`` per layer type -> ``rotary_base``, a pattern of bases over the same layers.
- ``Wqkv`` (3 D, D) splits into q, k, v; ``mlp.Wi`` (2 F, D) is (input, gate) with
  ``act(input) * gate``, which is the zoo's (``gate``, ``fc_in``) with ``act(gate(x)) * fc_in(x)``.
- Layer 0 has no attention norm (``first_attn_norm=false``): the embedder's norm is it.

Dropout: ModernBERT drops after the attention output (``attention_dropout``, also on the
weights) but not after the MLP; the zoo's ``block.dropout`` is on both residual branches, so
a checkpoint trains with dropout on the weights and inside the MLP only (both are 0 in
ModernBERT-base). In eval mode the two are the same function.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.bert import ACTIVATIONS, classifier_state, load_classifier, load_mlm, without_head
from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, init_net, layer_pattern,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.family import Family, config_only, is_classifier, layer_masks, tokens
from zoo.nn.masks import tile

MODEL_TYPES = ("modernbert",)  # the config.json model_type values this converter reads
KINDS = ("full_attention", "sliding_attention")
# every ModernBertConfig key (and the released configs' older ones, global_attn_every_n_layers and
# the two rope thetas, which it reads in place of layer_types and rope_parameters): the shape, masks,
# bases, biases and activations read; the dropouts (the import's net is for eval), the init's
# cutoff, the flash kernel's determinism, the classifier's pooling (the sequence classifier's, not
# the MLM's) and the sparse prediction (with labels only) ignored, and the released configs' keys
# transformers keeps but never reads (layer_norm_eps, position_embedding_type, gradient_checkpointing,
# reference_compile, repad_logits_with_grad)
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "hidden_activation", "max_position_embeddings", "norm_eps", "norm_bias", "attention_bias",
                     "layer_types", "rope_parameters", "local_attention", "mlp_bias", "decoder_bias",
                     "classifier_bias", "classifier_activation", "tie_word_embeddings", "global_attn_every_n_layers",
                     "global_rope_theta", "local_rope_theta"}),
    ignores=frozenset({"initializer_cutoff_factor", "attention_dropout", "embedding_dropout", "mlp_dropout",
                       "classifier_dropout", "classifier_pooling", "deterministic_flash_attn", "sparse_prediction",
                       "sparse_pred_ignore_index", "layer_norm_eps", "position_embedding_type",
                       "gradient_checkpointing", "reference_compile", "repad_logits_with_grad"}))


def _activation(config: dict[str, Any], key: str) -> str:
    act = config.get(key, "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"{key}={act!r} is not supported: expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[act]


def modernbert_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=modernbert`` the
    shape of a Hugging Face ModernBERT ``config.json`` (every dependent key listed); a key the
    converter does not implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    n_layers = config["num_hidden_layers"]
    every = config.get("global_attn_every_n_layers", 3)
    kinds = config.get("layer_types") or ["sliding_attention" if i % every else "full_attention" for i in range(n_layers)]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"layer_types {unknown} are not supported: expected {list(KINDS)}")
    rope = config.get("rope_parameters") or {}
    bases = {}
    for kind in KINDS:
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise ValueError(f"rope_parameters[{kind!r}].rope_type={params['rope_type']!r} is not supported (default)")
        fallback = config.get("global_rope_theta" if kind == "full_attention" else "local_rope_theta")
        bases[kind] = float(params.get("rope_theta", fallback or (160000.0 if kind == "full_attention" else 10000.0)))
    if not config.get("decoder_bias", True):
        raise ValueError("decoder_bias=False is not supported: the zoo's MLM head has a decoder bias")
    window = config.get("local_attention", 128)
    masks = {"full_attention": {"_target_": "zoo.nn.masks.NoMask"},
             "sliding_attention": {"_target_": "zoo.nn.masks.LocalMask", "window": window, "causal": False}}
    pattern = layer_pattern(kinds)
    d, vocab, eps = config["hidden_size"], config["vocab_size"], config.get("norm_eps", 1e-5)
    norm_bias, bias = config.get("norm_bias", False), config.get("attention_bias", False)
    act = _activation(config, "hidden_activation")
    return {
        "n_layers": n_layers,
        "context": config["max_position_embeddings"],
        "mask.masks": [masks[kind] for kind in pattern],
        "rotary_base": [bases[kind] for kind in pattern],
        "tie_embeddings": config.get("tie_word_embeddings", True),
        "block.d_model": d,
        "block.n_heads": config["num_attention_heads"],
        "block.d_ff": config["intermediate_size"],
        "block.norm_eps": eps,
        "block.norm_bias": norm_bias,
        "block.activation": act,
        "block.bias_q": bias, "block.bias_k": bias, "block.bias_v": bias, "block.bias_out": bias,
        "block.bias_ffn": config.get("mlp_bias", False),
        "block.dropout": 0.0,
        "block.attn_dropout": config.get("attention_dropout", 0.0),
        "block.ffn_dropout": config.get("mlp_dropout", 0.0),
        "embedder.vocab_size": vocab,
        "embedder.max_len": config["max_position_embeddings"],
        "embedder.norm_eps": eps,
        "embedder.norm_bias": norm_bias,
        "embedder.dropout": config.get("embedding_dropout", 0.0),
        "head.vocab_size": vocab,
        "head.activation": _activation(config, "classifier_activation"),
        "head.norm_eps": eps,
        "head.bias": config.get("classifier_bias", False),
        "head.norm_bias": norm_bias,
    }


# task=classify: the zoo ClassifierHead's modules <- ModernBertForSequenceClassification's (its head:
# dense, activation, norm; then the classifier). A ModernBertForMaskedLM's head has the same names.
MODERNBERT_CLASSIFIER = {"dense": ("head.dense",), "pooler_norm": ("head.norm",), "proj": ("classifier",)}


def classifier_shape(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`modernbert_shape` under task=classify: ModernBertForSequenceClassification's head (its
    pooling, the dense layer's bias and activation, the norm) in place of the MLM head's keys."""
    shape = modernbert_shape(config)
    return without_head(shape) | {
        "tie_embeddings": False, "head.pool": config.get("classifier_pooling", "cls"), "head.prefix_tokens": 0,
        "head.pooler": _activation(config, "classifier_activation"),
        "head.pooler_bias": config.get("classifier_bias", False),
        "head.pooler_norm_eps": shape["block.norm_eps"], "head.norm_bias": shape["block.norm_bias"]}


def classifier_state_dict(hf: dict[str, Tensor], n_layers: int, num_classes: int) -> dict[str, Tensor]:
    """A ModernBERT folder's weights under the zoo's names with the sequence classifier's head."""
    return classifier_state(hf, modernbert_state_dict(hf, n_layers), MODERNBERT_CLASSIFIER, num_classes)


def modernbert_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ModernBERT's weights to the zoo's (biases where the checkpoint has them). Without
    MLM head weights (a ``ModernBertModel`` checkpoint) the result has no ``head.*`` entries."""
    sd = {k.removeprefix("model."): v for k, v in hf.items()}
    out: dict[str, Tensor] = {}

    def copy(hf_name: str, zoo_name: str) -> None:
        for part in ("weight", "bias"):
            if f"{hf_name}.{part}" in sd:
                out[f"{zoo_name}.{part}"] = sd[f"{hf_name}.{part}"]

    def split(hf_name: str, zoo_names: tuple[str, ...]) -> None:
        for part in ("weight", "bias"):
            if f"{hf_name}.{part}" in sd:
                for zoo_name, value in zip(zoo_names, sd[f"{hf_name}.{part}"].chunk(len(zoo_names), dim=0)):
                    out[f"{zoo_name}.{part}"] = value

    copy("embeddings.tok_embeddings", "embedder.tokens")
    copy("embeddings.norm", "embedder.norm")
    for i in range(n_layers):
        h, z = f"layers.{i}.", f"stack.blocks.{i}."
        copy(h + "attn_norm", z + "attn_norm")  # absent in layer 0
        split(h + "attn.Wqkv", (z + "attn.q", z + "attn.k", z + "attn.v"))
        copy(h + "attn.Wo", z + "attn.out")
        copy(h + "mlp_norm", z + "ffn_norm")
        split(h + "mlp.Wi", (z + "ffn.gate", z + "ffn.fc_in"))
        copy(h + "mlp.Wo", z + "ffn.fc_out")
    copy("final_norm", "stack.norm")
    if "decoder.bias" in sd:
        copy("head.dense", "head.dense")
        copy("head.norm", "head.norm")
        copy("decoder", "head.decoder")
        # save_pretrained writes a tied matrix once, under the embedding's name
        out.setdefault("head.decoder.weight", out["embedder.tokens.weight"])
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo ModernBERT holding ``hf_model``'s weights (in eval mode)."""
    config = hf_model.config.to_dict()
    shape = modernbert_shape(config)
    net = build_net("modernbert", shape_overrides(shape), {"vocab_size": config["vocab_size"]})
    load_mlm(net, modernbert_state_dict(hf_model.state_dict(), shape["n_layers"]), type(hf_model).__name__)
    return net.eval()


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face ModernBERT folder. The data's vocabulary must be
    the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = modernbert_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    if is_classifier(net_cfg):
        head = classifier_state_dict(state, shape["n_layers"], net_cfg["head"]["num_classes"])
        return init_net(net_cfg, classifier_shape(config), head, partial(load_classifier, source=path))
    return init_net(net_cfg, shape, modernbert_state_dict(state, shape["n_layers"]), partial(load_mlm, source=path))


def export_layers(net: dict[str, Any]) -> dict[str, Any]:
    """ModernBERT's ``layer_types``, ``local_attention`` and per-kind ``rope_parameters`` of the zoo
    net's per-layer masks and rotary bases (one base per kind of layer), and its head's activation."""
    kinds = {"zoo.nn.masks.NoMask": "full_attention", "zoo.nn.masks.LocalMask": "sliding_attention"}
    layers, window = layer_masks(net, kinds, "zoo.nn.masks.LocalMask", "ModernBertForMaskedLM")
    base = net["rotary_base"]
    bases = tile(base, len(layers), "rotary base") if isinstance(base, list) else [base] * len(layers)
    theta: dict[str, float] = {}
    for kind, layer_base in zip(layers, bases):
        if theta.setdefault(kind, layer_base) != layer_base:
            raise ValueError(f"ModernBertForMaskedLM has one rotary base per kind of layer: this net's {kind} layers "
                             f"rotate at {theta[kind]} and {layer_base}")
    default = {"full_attention": 160000.0, "sliding_attention": 10000.0}
    act = net["head"].get("activation") or net["head"]["pooler"]  # the MLM head's, or the classifier's
    head_act = [hf for hf, zoo in ACTIVATIONS.items() if zoo == act]
    # ModernBERT's default special ids are its 50k-token vocabulary's: export() sets the checkpoint's own
    ids = dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"))
    return ids | {"layer_types": layers, "local_attention": window or 128, "classifier_activation": head_act[0],
                  "rope_parameters": {kind: {"rope_type": "default", "rope_theta": theta.get(kind, default[kind])}
                                      for kind in default}}


FAMILY = Family(
    hf_class="ModernBertForMaskedLM", config_class="ModernBertConfig",
    keys={"num_hidden_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
          "num_attention_heads": "block.n_heads", "intermediate_size": "block.d_ff", "norm_eps": "block.norm_eps",
          "norm_bias": "block.norm_bias", "attention_bias": "block.bias_q", "mlp_bias": "block.bias_ffn",
          "vocab_size": "embedder.vocab_size", "tie_word_embeddings": "tie_embeddings", "classifier_bias": "head.bias",
          "attention_dropout": "block.attn_dropout", "mlp_dropout": "block.ffn_dropout",
          "embedding_dropout": "embedder.dropout"},
    activations=ACTIVATIONS, activation_key="hidden_activation", shape=config_only(modernbert_shape),
    state_dict=lambda sd, net: modernbert_state_dict(sd, net["n_layers"]),
    example=tokens, extra=export_layers, classifier="ModernBertForSequenceClassification")

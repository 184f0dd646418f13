"""Hugging Face BART (``BartForConditionalGeneration``) -> zoo BART (conf/model/bart.yaml) and back;
the mapping mBART shares (:mod:`zoo.convert.mbart`).

Both are an EncoderDecoder of one Block: tokens (one table, shared by both towers and tied to
the head, x sqrt(d) where ``scale_embedding``) + learned positions read two rows on
(``BartLearnedPositionalEmbedding``'s offset) -> ``layernorm_embedding`` (the embedder's norm) ->
Blocks, post-LN (BART) or pre-LN with a final ``layer_norm`` per tower (mBART) -> the tied head
plus ``final_logits_bias`` (the head's bias). The layer names are the same in both.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_one_block, check_vocab, init_net, load_mapped, read_checkpoint_dir,
                               shape_overrides)
from zoo.convert.family import Family, tokens

MODEL_TYPES = ("bart",)  # the config.json model_type values this converter reads
EMBEDDERS = ("encoder_embedder", "decoder_embedder")
# Hugging Face layer -> zoo Block names; each Linear and LayerNorm has a weight and a bias.
SELF = {"self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
        "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_norm", "fc1": "ffn.fc_in",
        "fc2": "ffn.fc_out", "final_layer_norm": "ffn_norm"}
CROSS = {"encoder_attn.q_proj": "cross_attn.q", "encoder_attn.k_proj": "cross_attn.k",
         "encoder_attn.v_proj": "cross_attn.v", "encoder_attn.out_proj": "cross_attn.out",
         "encoder_attn_layer_norm": "cross_norm"}
# every BartConfig (and MBartConfig: the same fields) key: the shape and the activation read; the
# dropouts and layer drops (the import's net is for eval), the init's scale ignored, and the
# fairseq-era keys of the released configs that the transformers classes keep but never read
# (mBART's pre-LN and final norms are its class's, whatever add_final_layer_norm says); the head is
# the token table (tie_word_embeddings true)
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"vocab_size", "max_position_embeddings", "encoder_layers", "encoder_ffn_dim",
                     "encoder_attention_heads", "decoder_layers", "decoder_ffn_dim", "decoder_attention_heads",
                     "activation_function", "d_model", "scale_embedding"}),
    ignores=frozenset({"encoder_layerdrop", "decoder_layerdrop", "dropout", "attention_dropout", "activation_dropout",
                       "classifier_dropout", "classif_dropout", "init_std", "add_bias_logits", "add_final_layer_norm",
                       "normalize_before", "normalize_embedding", "static_position_embeddings", "num_hidden_layers",
                       "extra_pos_embeddings", "output_past", "gradient_checkpointing",
                       "force_bos_token_to_be_generated"}),
    fixed={"tie_word_embeddings": True})


def bart_shape(config: dict[str, Any], prenorm: bool = False) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=bart`` (``prenorm``:
    ``model=mbart``) the shape (and dropout) of a Hugging Face ``config.json``; every dependent key
    is listed, so the same values apply to a resolved config. A key the converter does not
    implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    check_one_block(config)
    c = config
    d, vocab, context = c["d_model"], c["vocab_size"], c["max_position_embeddings"]
    embedder = {"vocab_size": vocab, "max_len": context + 2, "positions": "learned",
                "position_offset": 2, "scale": bool(c.get("scale_embedding", False)), "norm_eps": 1e-5}
    return {
        "n_encoder_layers": c["encoder_layers"],
        "n_decoder_layers": c["decoder_layers"],
        "context": context,
        "final_norm": prenorm,
        "share_embeddings": True,
        "tie_embeddings": True,
        **{f"{part}.{k}": v for part in EMBEDDERS for k, v in embedder.items()},
        "head.vocab_size": vocab,
        "head.bias": True,
        "block.d_model": d,
        "block.n_heads": c["encoder_attention_heads"],
        "block.d_ff": c["encoder_ffn_dim"],
        "block.prenorm": prenorm,
        "block.norm_eps": 1e-5,  # nn.LayerNorm's default, which every BART norm uses
        "block.activation": c.get("activation_function", "gelu"),
        "block.dropout": c.get("dropout", 0.1),
        "block.attn_dropout": c.get("attention_dropout", 0.0),
        "block.ffn_dropout": c.get("activation_dropout", 0.0),
    }


def bart_state_dict(hf: dict[str, Tensor], n_encoder_layers: int, n_decoder_layers: int,
                    final_norm: bool = False) -> dict[str, Tensor]:
    """Rename BART's (``final_norm``: mBART's) weights to the zoo's (no transposes: both store
    Linear as (out, in)). The position tables are copied whole, their two unread rows included."""
    sd = {k.removeprefix("model."): v for k, v in hf.items()}
    shared = sd["shared.weight"] if "shared.weight" in sd else sd["encoder.embed_tokens.weight"]
    out = {"encoder.embedder.tokens.weight": shared, "decoder.embedder.tokens.weight": shared,
           "head.proj.weight": shared, "head.proj.bias": sd["final_logits_bias"][0]}
    for tower, n, names in (("encoder", n_encoder_layers, SELF), ("decoder", n_decoder_layers, SELF | CROSS)):
        out[f"{tower}.embedder.positions.weight"] = sd[f"{tower}.embed_positions.weight"]
        pairs = [("layernorm_embedding", "embedder.norm")] + [("layer_norm", "stack.norm")] * final_norm
        pairs += [(f"layers.{i}.{h}", f"stack.blocks.{i}.{z}") for i in range(n) for h, z in names.items()]
        out |= {f"{tower}.{z}.{p}": sd[f"{tower}.{h}.{p}"] for h, z in pairs for p in ("weight", "bias")}
    return out


@torch.no_grad()
def from_transformers(hf_model, model: str = "bart") -> nn.Module:
    """A zoo BART (``model``: ``bart`` or ``mbart``, the config it is built from) holding a
    ``BartForConditionalGeneration``'s (``MBartForConditionalGeneration``'s) weights."""
    cfg, prenorm = hf_model.config.to_dict(), model == "mbart"
    net = build_net(model, shape_overrides(bart_shape(cfg, prenorm)), {"vocab_size": cfg["vocab_size"]})
    load_mapped(net, bart_state_dict(hf_model.state_dict(), cfg["encoder_layers"], cfg["decoder_layers"], prenorm))
    return net


def read_folder(net_cfg: dict[str, Any], path: str, model_types: tuple[str, ...],
                prenorm: bool) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` of a BART or mBART folder: (``net_cfg`` reshaped to it, the net holding
    its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, model_types)
    shape = bart_shape(config, prenorm)
    check_vocab(net_cfg, "head.vocab_size", config["vocab_size"], path)
    return init_net(net_cfg, shape, bart_state_dict(state, shape["n_encoder_layers"], shape["n_decoder_layers"],
                                                    prenorm))


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face BART folder (see :func:`read_folder`)."""
    return read_folder(net_cfg, path, MODEL_TYPES, prenorm=False)


def family(hf_class: str, config_class: str, prenorm: bool) -> Family:
    """The export's description of BART (``prenorm=False``) or mBART."""
    keys = {"encoder_layers": "n_encoder_layers", "decoder_layers": "n_decoder_layers", "d_model": "block.d_model",
            "encoder_attention_heads": "block.n_heads", "decoder_attention_heads": "block.n_heads",
            "encoder_ffn_dim": "block.d_ff", "decoder_ffn_dim": "block.d_ff", "max_position_embeddings": "context",
            "vocab_size": "head.vocab_size", "scale_embedding": "encoder_embedder.scale", "dropout": "block.dropout",
            "attention_dropout": "block.attn_dropout", "activation_dropout": "block.ffn_dropout"}
    return Family(
        hf_class=hf_class, config_class=config_class, keys=keys,
        activations={"gelu": "gelu", "relu": "relu", "silu": "silu", "gelu_new": "gelu_tanh"},
        activation_key="activation_function",
        shape=lambda config, net: bart_shape(config, prenorm),
        state_dict=lambda sd, net: bart_state_dict(sd, net["n_encoder_layers"], net["n_decoder_layers"], prenorm),
        example=lambda net: (tokens(net, "head.vocab_size"), tokens(net, "head.vocab_size", 12)),
        outputs=lambda hf, x: hf(input_ids=x[0], decoder_input_ids=x[1]).logits,
        # BART's default special ids are its 50k-token vocabulary's: export() sets the checkpoint's own
        extra=lambda net: {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None,
                           "decoder_start_token_id": None, "forced_eos_token_id": None})


FAMILY = family("BartForConditionalGeneration", "BartConfig", prenorm=False)

"""Hugging Face Whisper (``WhisperForConditionalGeneration``) -> zoo Whisper: one short,
shape-checked mapping onto ``model=whisper`` (an EncoderDecoder of the same Block), from a model
in memory or a checkpoint folder (:func:`pretrained`, the ``model.init_from=DIR`` hook)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import build_net, check_vocab, init_net, load_mapped, read_checkpoint_dir, refuse, shape_overrides

MODEL_TYPES = ("whisper",)  # the config.json model_type values this converter reads


def whisper_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=whisper`` the
    shape (and dropout) of a Hugging Face Whisper ``config.json``; every dependent key is listed,
    so the same values apply to a resolved config."""
    c = config
    if (c["encoder_attention_heads"], c["encoder_ffn_dim"]) != (c["decoder_attention_heads"], c["decoder_ffn_dim"]):
        raise ValueError(
            f"encoder (heads {c['encoder_attention_heads']}, ffn {c['encoder_ffn_dim']}) and decoder (heads "
            f"{c['decoder_attention_heads']}, ffn {c['decoder_ffn_dim']}) differ: both zoo stacks share one Block config"
        )
    refuse(c, "Whisper config", scale_embedding=False, tie_word_embeddings=True)
    d, vocab, context = c["d_model"], c["vocab_size"], c["max_target_positions"]
    return {
        "n_encoder_layers": c["encoder_layers"],
        "n_decoder_layers": c["decoder_layers"],
        "context": context,
        "encoder_embedder.n_mels": c["num_mel_bins"],
        "encoder_embedder.max_len": c["max_source_positions"],
        "encoder_embedder.d_model": d,
        "decoder_embedder.d_model": d,
        "decoder_embedder.max_len": context,
        "decoder_embedder.vocab_size": vocab,
        "head.d_model": d,
        "head.vocab_size": vocab,
        "block.d_model": d,
        "block.n_heads": c["encoder_attention_heads"],
        "block.d_ff": c["encoder_ffn_dim"],
        "block.activation": c.get("activation_function", "gelu"),
        "block.dropout": c.get("dropout", 0.0),
        "block.attn_dropout": c.get("attention_dropout", 0.0),
        "block.ffn_dropout": c.get("activation_dropout", 0.0),
    }


def _layer(sd: dict[str, Tensor], h: str, z: str, cross: bool) -> dict[str, Tensor]:
    """One Whisper layer (prefix ``h``) -> one zoo Block (prefix ``z``)."""
    attentions = [("self_attn", "attn")] + ([("encoder_attn", "cross_attn")] if cross else [])
    out: dict[str, Tensor] = {}
    for hf_attn, zoo_attn in attentions:
        for hf_proj, zoo_proj in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "out")):
            out[f"{z}{zoo_attn}.{zoo_proj}.weight"] = sd[f"{h}{hf_attn}.{hf_proj}.weight"]
            if hf_proj != "k_proj":  # Whisper's keys have no bias
                out[f"{z}{zoo_attn}.{zoo_proj}.bias"] = sd[f"{h}{hf_attn}.{hf_proj}.bias"]
        zoo_norm = "attn_norm" if zoo_attn == "attn" else "cross_norm"
        out[f"{z}{zoo_norm}.weight"] = sd[f"{h}{hf_attn}_layer_norm.weight"]
        out[f"{z}{zoo_norm}.bias"] = sd[f"{h}{hf_attn}_layer_norm.bias"]
    for hf_name, zoo_name in (("fc1", "ffn.fc_in"), ("fc2", "ffn.fc_out"), ("final_layer_norm", "ffn_norm")):
        out[f"{z}{zoo_name}.weight"] = sd[f"{h}{hf_name}.weight"]
        out[f"{z}{zoo_name}.bias"] = sd[f"{h}{hf_name}.bias"]
    return out


def whisper_state_dict(hf: dict[str, Tensor], n_encoder_layers: int, n_decoder_layers: int) -> dict[str, Tensor]:
    """Rename Whisper's weights to the zoo's. The encoder's sinusoidal table is stored in
    the checkpoint as weights and is copied as is (not recomputed)."""
    sd = {k.removeprefix("model."): v for k, v in hf.items()}
    out = {
        "encoder.embedder.conv1.weight": sd["encoder.conv1.weight"],
        "encoder.embedder.conv1.bias": sd["encoder.conv1.bias"],
        "encoder.embedder.conv2.weight": sd["encoder.conv2.weight"],
        "encoder.embedder.conv2.bias": sd["encoder.conv2.bias"],
        "encoder.embedder.positions.weight": sd["encoder.embed_positions.weight"],
        "encoder.stack.norm.weight": sd["encoder.layer_norm.weight"],
        "encoder.stack.norm.bias": sd["encoder.layer_norm.bias"],
        "decoder.embedder.tokens.weight": sd["decoder.embed_tokens.weight"],
        "decoder.embedder.positions.weight": sd["decoder.embed_positions.weight"],
        "decoder.stack.norm.weight": sd["decoder.layer_norm.weight"],
        "decoder.stack.norm.bias": sd["decoder.layer_norm.bias"],
    }
    for i in range(n_encoder_layers):
        out |= _layer(sd, f"encoder.layers.{i}.", f"encoder.stack.blocks.{i}.", cross=False)
    for i in range(n_decoder_layers):
        out |= _layer(sd, f"decoder.layers.{i}.", f"decoder.stack.blocks.{i}.", cross=True)
    out["head.proj.weight"] = out["decoder.embedder.tokens.weight"]  # tied (proj_out is the same matrix)
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo Whisper (built from conf/model/whisper.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    net = build_net("whisper", shape_overrides(whisper_shape(cfg)), {"vocab_size": cfg["vocab_size"]})
    load_mapped(net, whisper_state_dict(hf_model.state_dict(), cfg["encoder_layers"], cfg["decoder_layers"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the Whisper folder at ``path``, the net
    holding its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = whisper_shape(config)
    check_vocab(net_cfg, "decoder_embedder.vocab_size", config["vocab_size"], path)
    return init_net(net_cfg, shape, whisper_state_dict(state, shape["n_encoder_layers"], shape["n_decoder_layers"]))

"""Hugging Face Whisper (``WhisperForConditionalGeneration``) -> zoo Whisper: one short,
shape-checked mapping onto ``model=whisper`` (an EncoderDecoder of the same Block)."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.convert.common import build_net, load_mapped


def whisper_config_overrides(hf_config) -> list[str]:
    """Hydra overrides that give ``model=whisper`` the shape of a Hugging Face Whisper config."""
    c = hf_config
    if (c.encoder_attention_heads, c.encoder_ffn_dim) != (c.decoder_attention_heads, c.decoder_ffn_dim):
        raise ValueError(
            f"encoder (heads {c.encoder_attention_heads}, ffn {c.encoder_ffn_dim}) and decoder (heads "
            f"{c.decoder_attention_heads}, ffn {c.decoder_ffn_dim}) differ: both zoo stacks share one Block config"
        )
    if c.scale_embedding:
        raise ValueError("scale_embedding=True is not a Whisper checkpoint setting and is not supported")
    return [
        f"model.net.n_encoder_layers={c.encoder_layers}",
        f"model.net.n_decoder_layers={c.decoder_layers}",
        f"model.net.context={c.max_target_positions}",
        f"model.net.encoder_embedder.n_mels={c.num_mel_bins}",
        f"model.net.encoder_embedder.max_len={c.max_source_positions}",
        f"model.net.block.d_model={c.d_model}",
        f"model.net.block.n_heads={c.encoder_attention_heads}",
        f"model.net.block.d_ff={c.encoder_ffn_dim}",
        f"model.net.block.activation={c.activation_function}",
    ]


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
        "encoder_embedder.conv1.weight": sd["encoder.conv1.weight"],
        "encoder_embedder.conv1.bias": sd["encoder.conv1.bias"],
        "encoder_embedder.conv2.weight": sd["encoder.conv2.weight"],
        "encoder_embedder.conv2.bias": sd["encoder.conv2.bias"],
        "encoder_embedder.positions.weight": sd["encoder.embed_positions.weight"],
        "encoder.norm.weight": sd["encoder.layer_norm.weight"],
        "encoder.norm.bias": sd["encoder.layer_norm.bias"],
        "decoder_embedder.tokens.weight": sd["decoder.embed_tokens.weight"],
        "decoder_embedder.positions.weight": sd["decoder.embed_positions.weight"],
        "decoder.norm.weight": sd["decoder.layer_norm.weight"],
        "decoder.norm.bias": sd["decoder.layer_norm.bias"],
    }
    for i in range(n_encoder_layers):
        out |= _layer(sd, f"encoder.layers.{i}.", f"encoder.blocks.{i}.", cross=False)
    for i in range(n_decoder_layers):
        out |= _layer(sd, f"decoder.layers.{i}.", f"decoder.blocks.{i}.", cross=True)
    out["head.proj.weight"] = out["decoder_embedder.tokens.weight"]  # tied (proj_out is the same matrix)
    return out


@torch.no_grad()
def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo Whisper (built from conf/model/whisper.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config
    if not cfg.tie_word_embeddings:
        raise ValueError("an untied Whisper (tie_word_embeddings=False) does not fit model=whisper's tied head")
    net = build_net("whisper", whisper_config_overrides(cfg), {"vocab_size": cfg.vocab_size})
    load_mapped(net, whisper_state_dict(hf_model.state_dict(), cfg.encoder_layers, cfg.decoder_layers))
    return net

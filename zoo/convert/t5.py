"""Hugging Face T5 (``T5ForConditionalGeneration``, v1.0 and v1.1) -> zoo T5.

:func:`from_transformers` converts a loaded model; :func:`load_pretrained` reads a
checkpoint directory (``config.json`` + ``model.safetensors``) without needing
``transformers``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from zoo.convert.common import build_net, load_mapped

EXTRA = 102  # model=t5 adds sentinels + eos + start to the data's vocabulary (conf/model/t5.yaml)


def head_is_tied(state: dict[str, Tensor]) -> bool:
    """Whether the checkpoint's output head is the shared embedding (v1.0) or its own (v1.1)."""
    shared = state["shared.weight"] if "shared.weight" in state else state["encoder.embed_tokens.weight"]
    return "lm_head.weight" not in state or torch.equal(state["lm_head.weight"], shared)


def t5_config_overrides(config: dict, tied: bool) -> tuple[str, list[str]]:
    """(model preset, Hydra overrides) that give zoo T5 the shape of an HF T5 ``config.json``.

    The head's input is scaled by d_model^-0.5 in v1.0 (``tie_word_embeddings`` true in its
    config; newer ``transformers`` record it as ``scale_decoder_outputs``), not in v1.1."""
    gated = config.get("feed_forward_proj", "relu").startswith("gated")
    act = config.get("feed_forward_proj", "relu").removeprefix("gated-")
    activation = {"relu": "relu", "gelu": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
    if act not in activation:
        raise ValueError(f"unsupported T5 feed_forward_proj {config.get('feed_forward_proj')!r}")
    scaled = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True))
    d, vocab = config["d_model"], config["vocab_size"]
    overrides = [
        f"model.net.n_encoder_layers={config['num_layers']}",
        f"model.net.context={config.get('n_positions', 512)}",  # T5 has no limit; 512 is its training length
        f"model.net.n_decoder_layers={config.get('num_decoder_layers') or config['num_layers']}",
        f"model.net.tie_embeddings={tied}",
        f"model.net.head.scale={d ** -0.5 if scaled else 1.0}",
        f"model.net.block.d_model={d}",
        f"model.net.block.n_heads={config['num_heads']}",
        f"model.net.block.head_dim={config['d_kv']}",
        f"model.net.block.d_ff={config['d_ff']}",
        f"model.net.block.norm_eps={config.get('layer_norm_epsilon', 1e-6)}",
        f"model.net.block.activation={activation[act]}",
        f"model.net.block.gated={gated}",
        f"model.net.block.dropout={config.get('dropout_rate', 0.1)}",
        f"model.net.block.attn_dropout={config.get('dropout_rate', 0.1)}",
        f"model.net.block.ffn_dropout={config.get('dropout_rate', 0.1)}",
        f"model.net.encoder_bias.num_buckets={config.get('relative_attention_num_buckets', 32)}",
        f"model.net.encoder_bias.max_distance={config.get('relative_attention_max_distance', 128)}",
        f"model.net.decoder_bias.num_buckets={config.get('relative_attention_num_buckets', 32)}",
        f"model.net.decoder_bias.max_distance={config.get('relative_attention_max_distance', 128)}",
        *[f"model.net.{part}.vocab_size={vocab}" for part in ("encoder_embedder", "decoder_embedder", "head")],
    ]
    return "t5", overrides


def t5_state_dict(hf: dict[str, Tensor], n_encoder: int, n_decoder: int, gated: bool, tied: bool) -> dict[str, Tensor]:
    """Rename T5's weights to the zoo's (no transposes: both store Linear as (out, in))."""
    shared = hf["shared.weight"] if "shared.weight" in hf else hf["encoder.embed_tokens.weight"]
    out = {
        "encoder_embedder.tokens.weight": shared,
        "decoder_embedder.tokens.weight": shared,
        "head.proj.weight": shared if tied else hf["lm_head.weight"],
        "encoder.norm.weight": hf["encoder.final_layer_norm.weight"],
        "decoder.norm.weight": hf["decoder.final_layer_norm.weight"],
        "encoder_bias.embedding.weight": hf["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
        "decoder_bias.embedding.weight": hf["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
    }

    def attention(src: str, dst: str) -> dict[str, Tensor]:
        return {f"{dst}.{z}.weight": hf[f"{src}.{h}.weight"] for z, h in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))}

    def ffn(src: str, dst: str) -> dict[str, Tensor]:
        names = (("gate", "wi_0"), ("fc_in", "wi_1"), ("fc_out", "wo")) if gated else (("fc_in", "wi"), ("fc_out", "wo"))
        return {f"{dst}.{z}.weight": hf[f"{src}.{h}.weight"] for z, h in names}

    for stack, n in (("encoder", n_encoder), ("decoder", n_decoder)):
        for i in range(n):
            h, z = f"{stack}.block.{i}.layer", f"{stack}.blocks.{i}"
            out |= attention(f"{h}.0.SelfAttention", f"{z}.attn")
            out[f"{z}.attn_norm.weight"] = hf[f"{h}.0.layer_norm.weight"]
            ff = 1
            if stack == "decoder":
                out |= attention(f"{h}.1.EncDecAttention", f"{z}.cross_attn")
                out[f"{z}.cross_norm.weight"] = hf[f"{h}.1.layer_norm.weight"]
                ff = 2
            out |= ffn(f"{h}.{ff}.DenseReluDense", f"{z}.ffn")
            out[f"{z}.ffn_norm.weight"] = hf[f"{h}.{ff}.layer_norm.weight"]
    return out


@torch.no_grad()
def from_state(config: dict, state: dict[str, Tensor]) -> torch.nn.Module:
    """A zoo T5 with the shape of ``config`` (an HF T5 config dict) holding ``state``."""
    tied = head_is_tied(state)
    preset, overrides = t5_config_overrides(config, tied)
    net = build_net(preset, overrides, {"vocab_size": config["vocab_size"] - EXTRA})
    gated = config.get("feed_forward_proj", "relu").startswith("gated")
    n_dec = config.get("num_decoder_layers") or config["num_layers"]
    load_mapped(net, t5_state_dict(state, config["num_layers"], n_dec, gated, tied))
    return net.eval()


def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo T5 holding a ``T5ForConditionalGeneration``'s weights."""
    return from_state(hf_model.config.to_dict(), hf_model.state_dict())


def load_pretrained(directory: str | Path) -> torch.nn.Module:
    """A zoo T5 from an HF checkpoint directory: ``config.json`` + ``model.safetensors``
    (or shards listed in ``model.safetensors.index.json``)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} is missing: not a Hugging Face checkpoint directory")
    config = json.loads(config_path.read_text())
    if config.get("model_type", "t5") != "t5":
        raise ValueError(f"{config_path} describes a {config['model_type']!r} model, not t5")
    index = directory / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (directory / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{directory} has neither model.safetensors nor model.safetensors.index.json")
    state: dict[str, Tensor] = {}
    for name in files:
        state |= load_file(str(directory / name))
    return from_state(config, state)

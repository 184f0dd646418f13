"""Hugging Face ``VideoMAEForVideoClassification`` -> the zoo VideoMAE classifier
(conf/model/videomae.yaml): one short, shape-checked renaming, from a model in memory or a
checkpoint directory.

VideoMAE's sinusoid position table is not among its weights (Hugging Face recomputes it in
numpy): from a model in memory the converter copies that table; from a directory the zoo's
own table stands in (equal to it but for an odd last-bit rounding in fp32).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import load_mapped, read_checkpoint_dir
from zoo.convert.vit import hf_block_weights, rename_parts
from zoo.convert.vivit import _square, video_net

# Checkpoint files keep the q and v biases as lone tensors (transformers 4 names).
FILE_NAMES = (("attention.q_bias", "attention.query.bias"), ("attention.v_bias", "attention.value.bias"))


def videomae_state_dict(hf: dict[str, Tensor], n_layers: int, positions: Tensor) -> dict[str, Tensor]:
    """Rename ``VideoMAEForVideoClassification``'s weights to the zoo's; ``positions`` (N, D) is the
    sinusoid table. Mean pooling puts a LayerNorm after the pooling (``fc_norm``); the other
    pooling (the first vector) a final LayerNorm after the stack (``videomae.layernorm``)."""
    p = "videomae.embeddings.patch_embeddings.projection."
    out = {
        "embedder.positions.weight": positions,
        "embedder.patchify.weight": hf[p + "weight"],
        "embedder.patchify.bias": hf[p + "bias"],
        "head.proj.weight": hf["classifier.weight"],
        "head.proj.bias": hf["classifier.bias"],
    }
    for hf_name, zoo_name in (("fc_norm", "head.norm"), ("videomae.layernorm", "stack.norm")):
        out |= {f"{zoo_name}.{kind}": hf[f"{hf_name}.{kind}"] for kind in ("weight", "bias") if f"{hf_name}.{kind}" in hf}
    attn = {"q": "attention.attention.query", "k": "attention.attention.key", "v": "attention.attention.value",
            "out": "attention.output.dense"}
    ffn = {"fc_in": "intermediate.dense", "fc_out": "output.dense"}
    for i in range(n_layers):
        out |= hf_block_weights(hf, f"videomae.encoder.layer.{i}.", f"stack.blocks.{i}.", attn, ffn)
    return out


@torch.no_grad()
def from_config_and_state(config: dict[str, Any], state: dict[str, Tensor],
                          positions: Tensor | None = None) -> nn.Module:
    """A zoo VideoMAE classifier from a ``VideoMAEConfig`` (as a dict) and its model's state dict;
    ``positions``: the reference's sinusoid table (N, D), else the zoo's own."""
    mean = config["use_mean_pooling"]
    pooling = ["model.net.final_norm=false", "model.net.head.pool=mean", "model.net.head.norm_eps=1e-5"] if mean else \
        ["model.net.final_norm=true", "model.net.head.pool=cls", "model.net.head.norm_eps=null"]
    net = video_net("videomae", config, config["tubelet_size"], _square(config["patch_size"], "patch_size"),
                    config["qv_bias"], ["model.net.block.bias_k=false", *pooling])
    table = net.embedder.positions.weight if positions is None else positions
    load_mapped(net, videomae_state_dict(state, config["num_hidden_layers"], table))
    return net.eval()


def from_transformers(hf_model) -> nn.Module:
    """A zoo VideoMAE classifier holding a ``VideoMAEForVideoClassification``'s weights and its position table."""
    table = hf_model.videomae.embeddings.position_embeddings[0]
    return from_config_and_state(hf_model.config.to_dict(), hf_model.state_dict(), table)


def load_checkpoint_dir(path: str | Path) -> nn.Module:
    """The zoo VideoMAE classifier of a Hugging Face checkpoint directory (``config.json`` + weights)."""
    config, state = read_checkpoint_dir(path, ("videomae",))
    return from_config_and_state(config, rename_parts(state, FILE_NAMES))

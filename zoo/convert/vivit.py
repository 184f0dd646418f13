"""Hugging Face ``VivitForVideoClassification`` -> the zoo ViViT (conf/model/vivit.yaml): one
short, shape-checked renaming, from a model in memory or a checkpoint directory. The shape
helpers here serve the VideoMAE converter too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import build_net, load_mapped, read_checkpoint_dir
from zoo.convert.vit import FILE_NAMES, HF_ACTIVATIONS, _shape_overrides, hf_vit_state_dict, rename_parts

# ViViT's default ``gelu_fast`` is the tanh approximation with sqrt(2 / pi) cut to 10 digits
# (0.7978845608): a 3e-12 relative difference from the Block's gelu_tanh, far below fp32 rounding.
ACTIVATIONS = HF_ACTIVATIONS | {"gelu_fast": "gelu_tanh"}
def _square(value: int | list[int], what: str) -> int:
    """``image_size`` / a patch side given as one int or an (h, w) pair; the zoo's are square."""
    sides = [value] * 2 if isinstance(value, int) else list(value)
    if sides[0] != sides[1]:
        raise ValueError(f"{what}={value}: the zoo's tubelets and frames are square")
    return sides[0]


def video_net(model: str, config: dict[str, Any], tubelet: int, patch: int, qkv_bias: bool,
              overrides: list[str]) -> nn.Module:
    """``model=<model>`` (vivit / videomae) shaped like a Hugging Face video ``config.json`` (as a dict)."""
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} has no zoo activation (known: {sorted(ACTIVATIONS)})")
    shape = _shape_overrides(config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                             config["intermediate_size"], patch, config["layer_norm_eps"], qkv_bias)
    shape += [f"model.net.embedder.tubelet_size={tubelet}", f"model.net.block.activation={ACTIVATIONS[act]}"]
    dims = {"num_classes": len(config["id2label"]), "num_frames": config["num_frames"],
            "image_size": _square(config["image_size"], "image_size"), "channels": config["num_channels"]}
    return build_net(model, shape + overrides, dims)


def vivit_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ``VivitForVideoClassification``'s weights (transformers >= 5 names) to the zoo's: they are
    ``ViTForImageClassification``'s under ``vivit.`` (a Conv3d patchify in place of the Conv2d)."""
    return hf_vit_state_dict(rename_parts(hf, (("vivit.", "vit."),)), n_layers)


@torch.no_grad()
def from_config_and_state(config: dict[str, Any], state: dict[str, Tensor]) -> nn.Module:
    """A zoo ViViT from a ``VivitConfig`` (as a dict) and its model's state dict."""
    tubelet = list(config["tubelet_size"])
    net = video_net("vivit", config, tubelet[0], _square(tubelet[1:], "tubelet_size[1:]"), config["qkv_bias"], [])
    load_mapped(net, vivit_state_dict(state, config["num_hidden_layers"]))
    return net.eval()


def from_transformers(hf_model) -> nn.Module:
    """A zoo ViViT holding a ``VivitForVideoClassification``'s weights."""
    return from_config_and_state(hf_model.config.to_dict(), hf_model.state_dict())


def load_checkpoint_dir(path: str | Path) -> nn.Module:
    """The zoo ViViT of a Hugging Face ViViT checkpoint directory (``config.json`` + weights)."""
    config, state = read_checkpoint_dir(path, ("vivit",))
    return from_config_and_state(config, rename_parts(state, FILE_NAMES))

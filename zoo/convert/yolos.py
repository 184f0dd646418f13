"""Hugging Face ``YolosForObjectDetection`` -> the zoo YOLOS (conf/model/yolos.yaml): one short,
shape-checked renaming, from a model in memory or a checkpoint directory.

Only ``use_mid_position_embeddings=False`` converts: the mid-position variant adds a second
position table after every layer but the last, which is a step between Blocks that the zoo's
stack of Blocks does not take (and the Block gets no branch for it), so it is refused by name.
The image size must be the checkpoint's own: the zoo does not interpolate positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import build_net, load_mapped, read_checkpoint_dir
from zoo.convert.vit import HF_ACTIVATIONS, _shape_overrides, hf_block_weights
from zoo.convert.vivit import _square

MODEL_TYPES = ("yolos",)  # the config.json model_type values this converter reads
# The layer names YOLOS keeps (transformers 5 did not rename them): zoo name -> module under the layer
ATTENTION = {"q": "attention.attention.query", "k": "attention.attention.key", "v": "attention.attention.value",
             "out": "attention.output.dense"}
FFN = {"fc_in": "intermediate.dense", "fc_out": "output.dense"}
MLPS = {"classes": "class_labels_classifier", "boxes": "bbox_predictor"}  # zoo head part -> HF module


def yolos_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ``YolosForObjectDetection``'s weights to the zoo's."""
    e = "vit.embeddings."
    out = {
        "embedder.cls": hf[e + "cls_token"],
        "embedder.detections": hf[e + "detection_tokens"],
        "embedder.positions.weight": hf[e + "position_embeddings"][0],
        "embedder.patchify.weight": hf[e + "patch_embeddings.projection.weight"],
        "embedder.patchify.bias": hf[e + "patch_embeddings.projection.bias"],
        "stack.norm.weight": hf["vit.layernorm.weight"],
        "stack.norm.bias": hf["vit.layernorm.bias"],
    }
    for i in range(n_layers):
        out |= hf_block_weights(hf, f"vit.encoder.layer.{i}.", f"stack.blocks.{i}.", ATTENTION, FFN)
    for zoo, name in MLPS.items():
        out |= {f"head.{zoo}.{k[len(name) + 1:]}": v for k, v in hf.items() if k.startswith(name + ".")}
    return out


def yolos_overrides(config: dict[str, Any]) -> list[str]:
    """Hydra overrides that give ``model=yolos`` the shape of a Hugging Face ``YolosConfig`` (as a
    dict); what the zoo cannot hold is refused, naming the setting."""
    if config.get("use_mid_position_embeddings", True):
        raise ValueError("use_mid_position_embeddings=True (YolosConfig's default): positions added again "
                         "after each layer are not supported by the zoo's YOLOS; convert a model built with "
                         "use_mid_position_embeddings=False")
    act = config.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} has no zoo activation (known: {sorted(HF_ACTIVATIONS)})")
    patch = _square(config["patch_size"], "patch_size")
    shape = _shape_overrides(config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                             config["intermediate_size"], patch, config["layer_norm_eps"], config["qkv_bias"])
    return shape + [f"model.net.block.activation={HF_ACTIVATIONS[act]}",
                    f"model.net.embedder.n_detections={config['num_detection_tokens']}"]


def yolos_net(config: dict[str, Any]) -> nn.Module:
    """``model=yolos`` shaped like a Hugging Face ``YolosConfig`` (as a dict) (:func:`yolos_overrides`)."""
    overrides = yolos_overrides(config)
    dims = {"num_classes": len(config["id2label"]), "image_size": _square(config["image_size"], "image_size"),
            "channels": config["num_channels"]}
    return build_net("yolos", overrides, dims)


@torch.no_grad()
def from_config_and_state(config: dict[str, Any], state: dict[str, Tensor]) -> nn.Module:
    """A zoo YOLOS from a ``YolosConfig`` (as a dict) and its model's state dict."""
    net = yolos_net(config)
    load_mapped(net, yolos_state_dict(state, config["num_hidden_layers"]))
    return net.eval()


def from_transformers(hf_model) -> nn.Module:
    """A zoo YOLOS holding a ``YolosForObjectDetection``'s weights."""
    return from_config_and_state(hf_model.config.to_dict(), hf_model.state_dict())


def load_checkpoint_dir(path: str | Path) -> nn.Module:
    """The zoo YOLOS of a Hugging Face YOLOS checkpoint directory (``config.json`` + weights)."""
    return from_config_and_state(*read_checkpoint_dir(path, MODEL_TYPES))

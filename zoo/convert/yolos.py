"""Hugging Face ``YolosForObjectDetection`` -> the zoo YOLOS (conf/model/yolos.yaml): one short,
shape-checked renaming, from a model in memory, a checkpoint directory, or (:func:`pretrained`,
the ``model.init_from=DIR`` hook) a folder reshaping a training run's net.

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

from zoo.convert import vit
from zoo.convert.common import (ConfigKeys, build_net, check_keys, leave_out, load_mapped, read_checkpoint_dir,
                               shape_overrides, square_side)
from zoo.convert.family import Family, config_only, image, image_processor
from zoo.convert.vit import classifier_pretrained, hf_block_weights, vit_shape

MODEL_TYPES = ("yolos",)  # the config.json model_type values this converter reads
# The layer names YOLOS keeps (transformers 5 did not rename them): zoo name -> module under the layer
ATTENTION = {"q": "attention.attention.query", "k": "attention.attention.key", "v": "attention.attention.value",
             "out": "attention.output.dense"}
FFN = {"fc_in": "intermediate.dense", "fc_out": "output.dense"}
MLPS = {"classes": "class_labels_classifier", "boxes": "bbox_predictor"}  # zoo head part -> HF module
# every YolosConfig key the converter reads (:func:`yolos_shape`; use_mid_position_embeddings=True is
# refused there) or ignores: the Hungarian matcher's costs and the loss's weights (training only: the
# detections do not change)
CONFIG_KEYS = ConfigKeys(
    reads=vit.CONFIG_KEYS.reads | {"num_detection_tokens", "use_mid_position_embeddings"},
    ignores=frozenset({"auxiliary_loss", "class_cost", "bbox_cost", "giou_cost", "bbox_loss_coefficient",
                       "giou_loss_coefficient", "eos_coefficient"}))


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


def yolos_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=yolos`` the shape (and
    dropout) of a Hugging Face ``YolosConfig`` (as a dict): the ViT's (:func:`~zoo.convert.vit.vit_shape`)
    with square sides and the detection tokens; what the zoo cannot hold is refused, naming the setting
    (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    if config.get("use_mid_position_embeddings", True):
        raise ValueError("use_mid_position_embeddings=True (YolosConfig's default): positions added again "
                         "after each layer are not supported by the zoo's YOLOS; convert a model built with "
                         "use_mid_position_embeddings=False")
    n = config["num_detection_tokens"]
    return vit_shape(config) | {"embedder.image_size": square_side(config["image_size"], "image_size"),
                                "embedder.patch_size": square_side(config["patch_size"], "patch_size"),
                                "embedder.n_detections": n, "head.n_detections": n}


def yolos_net(config: dict[str, Any]) -> nn.Module:
    """``model=yolos`` shaped like a ``YolosConfig`` (as a dict), freshly initialised."""
    shape = yolos_shape(config)
    dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
            "channels": shape["embedder.channels"]}
    return build_net("yolos", shape_overrides(shape), dims)


@torch.no_grad()
def from_config_and_state(config: dict[str, Any], state: dict[str, Tensor]) -> nn.Module:
    """A zoo YOLOS from a ``YolosConfig`` (as a dict) and its model's state dict."""
    net = yolos_net(config)
    load_mapped(net, yolos_state_dict(state, yolos_shape(config)["n_layers"]))
    return net.eval()


def from_transformers(hf_model) -> nn.Module:
    """A zoo YOLOS holding a ``YolosForObjectDetection``'s weights."""
    return from_config_and_state(hf_model.config.to_dict(), hf_model.state_dict())


def load_checkpoint_dir(path: str | Path) -> nn.Module:
    """The zoo YOLOS of a Hugging Face YOLOS checkpoint directory (``config.json`` + weights)."""
    return from_config_and_state(*read_checkpoint_dir(path, MODEL_TYPES))


def _load_detector(net: nn.Module, state: dict[str, Tensor]) -> None:
    """load_mapped; where the data has another number of classes than the checkpoint (which
    :func:`~zoo.convert.vit.classifier_pretrained` warns of), the class MLP keeps the net's fresh
    weights: it starts from scratch, the box MLP and the rest are the checkpoint's."""
    fresh = net.state_dict()
    classes = {k: v for k, v in fresh.items() if k.startswith("head.classes.")}
    if any(k in state and state[k].shape != v.shape for k, v in classes.items()):
        state = leave_out(state, "head.classes.") | classes
    load_mapped(net, state)


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the ``YolosForObjectDetection`` folder at
    ``path``, the net holding its weights). The data's images must have the checkpoint's size and
    channels; with another label set the class MLP starts from scratch (fine-tuning on new classes)."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = yolos_shape(config)
    return classifier_pretrained(net_cfg, path, shape, yolos_state_dict(state, shape["n_layers"]),
                                 ("embedder.image_size", "embedder.channels"), _load_detector)


def _outputs(hf: nn.Module, x: Tensor) -> Tensor:
    """(B, Q, num_classes + 1 + 4): a detector's class logits and boxes side by side."""
    out = hf(x)
    return torch.cat([out.logits, out.pred_boxes], -1)


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The zoo letterboxes into its square (longer side scaled, padding at the bottom and right)."""
    size = net["embedder"]["image_size"]
    config = image_processor("YolosImageProcessor", size, hparams)
    return {"preprocessor_config.json": config | {
        "size": {"shortest_edge": size, "longest_edge": size}, "do_pad": True,
        "pad_size": {"height": size, "width": size}, "format": "coco_detection"}}


FAMILY = Family(
    hf_class="YolosForObjectDetection", config_class="YolosConfig",
    keys=vit.KEYS | {"qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size",
                     "num_detection_tokens": "embedder.n_detections"},
    activations=vit.HF_ACTIVATIONS, activation_key="hidden_act", shape=config_only(yolos_shape),
    state_dict=lambda sd, net: yolos_state_dict(sd, net["n_layers"]), example=image, outputs=_outputs,
    extra=lambda net: {"use_mid_position_embeddings": False, "image_size": [net["embedder"]["image_size"]] * 2},
    ours=lambda net, x: torch.cat(net(x), -1),  # Detections (logits, boxes)
    processors=_processors)

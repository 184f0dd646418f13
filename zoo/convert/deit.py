"""Hugging Face ``DeiTForImageClassificationWithTeacher`` (distilled DeiT) -> the zoo DeiT
(conf/model/deit.yaml): the ViT's renaming (:func:`~zoo.convert.vit.hf_vit_state_dict`) under the
``deit.`` prefix, with the distillation token and the two classifiers."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert import vit
from zoo.convert.common import build_net, check_keys, load_mapped, read_checkpoint_dir, shape_overrides
from zoo.convert.family import Family, config_only, image, image_processor
from zoo.convert.vit import FILE_NAMES, classifier_pretrained, hf_vit_state_dict, rename_parts, vit_shape

MODEL_TYPES = ("deit",)  # the config.json model_type values this converter reads
HEADS = (("head.proj", "cls_classifier"), ("head.dist", "distillation_classifier"))  # zoo head, HF linear
# DeiTConfig holds ViTConfig's keys, read and ignored alike
CONFIG_KEYS = vit.CONFIG_KEYS


def deit_shape(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`~zoo.convert.vit.vit_shape` of a ``DeiTConfig``, after refusing by name a key the
    converter does not implement (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    return vit_shape(config)


def deit_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ``DeiTForImageClassificationWithTeacher``'s weights (transformers >= 5 names) to the zoo's;
    a DeiT without the distillation head (``DeiTForImageClassification``) is refused by name."""
    if "distillation_classifier.weight" not in hf:
        raise ValueError("this DeiT has no distillation head (a DeiTForImageClassification, not ...WithTeacher): "
                         "the zoo DeiT is the distilled one; read a non-distilled DeiT with model=vit")
    return hf_vit_state_dict(hf, n_layers, "deit.", HEADS) | {
        "embedder.distillation": hf["deit.embeddings.distillation_token"]}


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo DeiT (built from conf/model/deit.yaml) holding a ``DeiTForImageClassificationWithTeacher``'s weights."""
    shape = deit_shape(hf_model.config.to_dict())
    dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
            "channels": shape["embedder.channels"]}
    net = build_net("deit", shape_overrides(shape), dims)
    load_mapped(net, deit_state_dict(hf_model.state_dict(), shape["n_layers"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the folder at ``path``, the net holding its
    weights); with another label set both classifiers start from scratch."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = deit_shape(config)
    return classifier_pretrained(net_cfg, path, shape, deit_state_dict(rename_parts(state, FILE_NAMES), shape["n_layers"]),
                                 ("embedder.image_size", "embedder.channels"), classifiers=("head.proj.", "head.dist."))


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """DeiT's processor centre-crops by default: the zoo resizes only."""
    config = image_processor("DeiTImageProcessor", net["embedder"]["image_size"], hparams)
    return {"preprocessor_config.json": config | {"do_center_crop": False}}


FAMILY = Family(
    hf_class="DeiTForImageClassificationWithTeacher", config_class="DeiTConfig",
    keys=vit.KEYS | {"qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size"},
    activations=vit.HF_ACTIVATIONS, activation_key="hidden_act", shape=config_only(deit_shape),
    state_dict=lambda sd, net: deit_state_dict(sd, net["n_layers"]), example=image, processors=_processors)

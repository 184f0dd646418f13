"""Hugging Face ``VivitForVideoClassification`` -> the zoo ViViT (conf/model/vivit.yaml): one
short, shape-checked renaming, from a model in memory or (`model.init_from`, :func:`pretrained`) a
checkpoint directory. The shape
helpers here serve the VideoMAE converter too."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from zoo.convert import vit
from zoo.convert.common import (ConfigKeys, build_net, check_keys, load_mapped, read_checkpoint_dir, shape_overrides,
                               square_side)
from zoo.convert.family import Family, config_only, image_processor, video
from zoo.convert.vit import FILE_NAMES, HF_ACTIVATIONS, classifier_pretrained, hf_vit_state_dict, rename_parts

MODEL_TYPES = ("vivit",)  # the config.json model_type values this converter reads

# ViViT's default ``gelu_fast`` is the tanh approximation with sqrt(2 / pi) cut to 10 digits
# (0.7978845608): a 3e-12 relative difference from the Block's gelu_tanh, far below fp32 rounding.
ACTIVATIONS = HF_ACTIVATIONS | {"gelu_fast": "gelu_tanh"}
# the keys of a video classifier's config (ViViT's, VideoMAE's) that :func:`video_shape` reads, and
# the dropouts it ignores (they do not change the logits; the zoo video nets train without them)
VIDEO_KEYS = ConfigKeys(reads=frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                         "hidden_act", "layer_norm_eps", "num_frames", "image_size", "num_channels"}),
                        ignores=frozenset({"hidden_dropout_prob", "attention_probs_dropout_prob"}))
# every VivitConfig key the converter reads or ignores: the pooler's (VivitForVideoClassification has none)
CONFIG_KEYS = VIDEO_KEYS | ConfigKeys(reads=frozenset({"qkv_bias", "tubelet_size"}),
                                      ignores=frozenset({"pooler_act", "pooler_output_size"}))


def video_shape(config: dict[str, Any], tubelet: int, patch: int, qkv_bias: bool) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give a video classifier (vivit /
    videomae) the shape of a Hugging Face video ``config.json`` (as a dict); every dependent key
    is listed, for a resolved config."""
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} has no zoo activation (known: {sorted(ACTIVATIONS)})")
    d = config["hidden_size"]
    return {
        "n_layers": config["num_hidden_layers"],
        "block.d_model": d,
        "block.n_heads": config["num_attention_heads"],
        "block.d_ff": config["intermediate_size"],
        "block.norm_eps": config["layer_norm_eps"],
        "block.activation": ACTIVATIONS[act],
        "block.bias_q": qkv_bias, "block.bias_k": qkv_bias, "block.bias_v": qkv_bias,
        "embedder.tubelet_size": tubelet,
        "embedder.patch_size": patch,
        "embedder.frames": config["num_frames"],
        "embedder.image_size": square_side(config["image_size"], "image_size"),
        "embedder.channels": config["num_channels"],
        "head.num_classes": len(config["id2label"]),
    }


def video_net(model: str, shape: dict[str, Any]) -> nn.Module:
    """``model=<model>`` (vivit / videomae) with ``shape`` (from :func:`video_shape`)."""
    dims = {"num_classes": shape["head.num_classes"], "num_frames": shape["embedder.frames"],
            "image_size": shape["embedder.image_size"], "channels": shape["embedder.channels"]}
    return build_net(model, shape_overrides(shape), dims)


VIDEO_INPUTS = ("embedder.frames", "embedder.image_size", "embedder.channels")  # what the data must match


def vivit_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ``VivitForVideoClassification``'s weights (transformers >= 5 names) to the zoo's: they are
    ``ViTForImageClassification``'s under ``vivit.`` (a Conv3d patchify in place of the Conv2d)."""
    return hf_vit_state_dict(rename_parts(hf, (("vivit.", "vit."),)), n_layers)


def vivit_shape(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`video_shape` of a ``VivitConfig`` (as a dict): square tubelets only; a key the converter
    does not implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    tubelet = list(config["tubelet_size"])
    return video_shape(config, tubelet[0], square_side(tubelet[1:], "tubelet_size[1:]"), config["qkv_bias"])


@torch.no_grad()
def from_config_and_state(config: dict[str, Any], state: dict[str, Tensor]) -> nn.Module:
    """A zoo ViViT from a ``VivitConfig`` (as a dict) and its model's state dict."""
    net = video_net("vivit", vivit_shape(config))
    load_mapped(net, vivit_state_dict(state, config["num_hidden_layers"]))
    return net.eval()


def from_transformers(hf_model) -> nn.Module:
    """A zoo ViViT holding a ``VivitForVideoClassification``'s weights."""
    return from_config_and_state(hf_model.config.to_dict(), hf_model.state_dict())


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook for a ViViT folder (see :func:`zoo.convert.vit.classifier_pretrained`)."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = vivit_shape(config)
    state = vivit_state_dict(rename_parts(state, FILE_NAMES), shape["n_layers"])
    return classifier_pretrained(net_cfg, path, shape, state, VIDEO_INPUTS)


KEYS = vit.KEYS | {"num_frames": "embedder.frames"}  # the plain copies of a video classifier's config


def video_processors(kind: str) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, dict[str, Any]]]:
    """The processor files of a video classifier whose image processor is ``kind``: the zoo's clips,
    centre-cropped square, resized bilinear, pixel / 255 (ViViT's own processor's default offset
    maps them to [-1, 1])."""
    def files(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
        config = image_processor(kind, net["embedder"]["image_size"], hparams) | {"do_center_crop": False,
                                                                                   "resample": 2}
        # The video-classification pipeline reads with a video processor, built from this file unless
        # video_preprocessor_config.json names one; ViViT's (VivitVideoProcessor) always offsets,
        # whatever its config says, so the video file names VideoMAE's, which reads pixel / 255
        clip = {k: v for k, v in config.items() if k != "image_processor_type"}
        return {"preprocessor_config.json": config | {"offset": False},
                "video_preprocessor_config.json": clip | {"video_processor_type": "VideoMAEVideoProcessor",
                                                          "do_sample_frames": False}}
    return files


FAMILY = Family(
    hf_class="VivitForVideoClassification", config_class="VivitConfig", keys=KEYS | {"qkv_bias": "block.bias_q"},
    activations=ACTIVATIONS, activation_key="hidden_act", shape=config_only(vivit_shape),
    state_dict=lambda sd, net: vivit_state_dict(sd, net["n_layers"]), example=video,
    extra=lambda net: {"tubelet_size": [net["embedder"]["tubelet_size"], *[net["embedder"]["patch_size"]] * 2]},
    processors=video_processors("VivitImageProcessor"))

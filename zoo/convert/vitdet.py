"""Hugging Face ViTDet (``VitDetModel``, the backbone) -> zoo ``model=vitdet``, from a model in
memory (:func:`from_transformers`: the backbone alone) or a checkpoint folder (:func:`pretrained`,
the ``model.init_from=DIR`` hook: the backbone under a fresh classifier head).

ViTDet's windowed layers are :class:`~zoo.nn.masks.GridWindowMask` layers of a
:class:`~zoo.nn.masks.PerLayer` pattern (``window_block_indices``); its fused ``qkv`` is split
into the Block's q, k and v. What the zoo net would compute differently is refused: relative
positions, the residual conv blocks, interpolated positions (``pretrain_image_size`` must be the
image size) and a grid the window does not divide (ViTDet zero-pads inside partial windows).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.bert import ACTIVATIONS
from zoo.convert.common import (ConfigKeys, build_net, check_keys, layer_pattern, load_mapped, read_checkpoint_dir,
                               refuse, shape_overrides)
from zoo.convert.vit import classifier_pretrained
from zoo.convert.family import Family, config_only, image, image_processor, layer_masks

MODEL_TYPES = ("vitdet",)  # the config.json model_type values this converter reads
HEAD_PREFIX = "head."
# every VitDetConfig key the converter reads (:func:`vitdet_shape`, which refuses the settings the zoo
# net does not compute) or ignores: stochastic depth and dropout (training only) and the stages a
# VitDetBackbone returns (VitDetModel returns the last layer's)
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "mlp_ratio", "hidden_act",
                     "layer_norm_eps", "qkv_bias", "image_size", "pretrain_image_size", "patch_size", "num_channels",
                     "window_size", "window_block_indices", "residual_block_indices",
                     "use_relative_position_embeddings", "use_absolute_position_embeddings"}),
    ignores=frozenset({"drop_path_rate", "dropout_prob", "out_features", "out_indices", "stage_names"}))


def vitdet_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values under ``model.net`` that give ``model=vitdet`` the shape of a ``VitDetConfig``
    (every dependent key listed, for a resolved config); a key the converter does not implement is
    refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    refuse(config, "VitDetConfig", use_relative_position_embeddings=False, residual_block_indices=[],
           use_absolute_position_embeddings=True, pretrain_image_size=config["image_size"])
    if config["hidden_act"] not in ACTIVATIONS:
        raise ValueError(f"VitDetConfig hidden_act={config['hidden_act']!r}: expected one of {sorted(ACTIVATIONS)}")
    side, window = config["image_size"] // config["patch_size"], config["window_size"]
    windowed = set(config["window_block_indices"])
    if windowed and side % window:
        raise ValueError(f"VitDetConfig window_size={window} does not divide the {side}x{side} patch grid: ViTDet "
                         f"zero-pads partial windows, which the zoo's GridWindowMask does not")
    masks = {"window": {"_target_": "zoo.nn.masks.GridWindowMask", "window": window},
             "global": {"_target_": "zoo.nn.masks.NoMask"}}
    kinds = ["window" if i in windowed else "global" for i in range(config["num_hidden_layers"])]
    d, qkv_bias, eps = config["hidden_size"], config["qkv_bias"], config["layer_norm_eps"]
    return {
        "n_layers": config["num_hidden_layers"], "mask.masks": [masks[kind] for kind in layer_pattern(kinds)],
        "embedder.image_size": config["image_size"], "embedder.channels": config["num_channels"],
        "embedder.patch_size": config["patch_size"],
        "block.d_model": d, "block.n_heads": config["num_attention_heads"], "block.d_ff": int(d * config["mlp_ratio"]),
        "block.norm_eps": eps, "block.activation": ACTIVATIONS[config["hidden_act"]],
        "block.bias_q": qkv_bias, "block.bias_k": qkv_bias, "block.bias_v": qkv_bias,
    }


def vitdet_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ``VitDetModel``'s weights to the zoo's (no head: the backbone has none). The
    position table's first row, kept for a CLS token ViTDet does not have, is dropped."""
    out = {"embedder.patchify.weight": hf["embeddings.projection.weight"],
           "embedder.patchify.bias": hf["embeddings.projection.bias"],
           "embedder.positions.weight": hf["embeddings.position_embeddings"][0, 1:]}
    for i in range(n_layers):
        h, z = f"encoder.layer.{i}.", f"stack.blocks.{i}."
        for kind in ("weight", "bias"):
            if f"{h}attention.qkv.{kind}" in hf:
                q, k, v = hf[f"{h}attention.qkv.{kind}"].chunk(3)
                out |= {f"{z}attn.q.{kind}": q, f"{z}attn.k.{kind}": k, f"{z}attn.v.{kind}": v}
            for hf_name, zoo_name in (("attention.proj", "attn.out"), ("norm1", "attn_norm"), ("norm2", "ffn_norm"),
                                      ("mlp.fc1", "ffn.fc_in"), ("mlp.fc2", "ffn.fc_out")):
                out[f"{z}{zoo_name}.{kind}"] = hf[f"{h}{hf_name}.{kind}"]
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo ViTDet holding ``hf_model``'s weights, its head the identity: (B, N, D) patch vectors,
    row-major (``VitDetModel`` returns them as (B, D, H, W))."""
    shape = vitdet_shape(hf_model.config.to_dict())
    dims = {"num_classes": 1, "image_size": shape["embedder.image_size"], "channels": shape["embedder.channels"]}
    net = build_net("vitdet", [*shape_overrides(shape), "model.net.head={_target_:torch.nn.Identity}"], dims)
    load_mapped(net, vitdet_state_dict(hf_model.state_dict(), shape["n_layers"]))
    return net.eval()


def _load_backbone(net: nn.Module, state: dict[str, Tensor]) -> None:
    """load_mapped of a backbone's weights, the net's classifier head kept as built (fresh)."""
    load_mapped(net, {k: v for k, v in net.state_dict().items() if k.startswith(HEAD_PREFIX)} | state)


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the ``VitDetModel`` folder at ``path``, the
    net holding its weights). The data's images must have the checkpoint's size and channels; the
    backbone has no classifier, so the head (pooled norm and linear layer) starts from scratch."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = vitdet_shape(config)
    data_classes = {"head.num_classes": net_cfg["head"]["num_classes"]}  # the backbone imposes no label set
    built = classifier_pretrained(net_cfg, path, shape | data_classes, vitdet_state_dict(state, shape["n_layers"]),
                                  ("embedder.image_size", "embedder.channels"), _load_backbone)
    warnings.warn(f"{path} is a ViTDet backbone (no classifier): the classifier head starts from scratch")
    return built


def export_layers(net: dict[str, Any]) -> dict[str, Any]:
    """ViTDet's ``window_block_indices`` and ``window_size`` of the zoo net's per-layer masks, and its
    ``mlp_ratio``."""
    layers, window = layer_masks(net, {"zoo.nn.masks.GridWindowMask": "window", "zoo.nn.masks.NoMask": "global"},
                                 "zoo.nn.masks.GridWindowMask", "VitDetModel")
    d, d_ff = net["block"]["d_model"], net["block"]["d_ff"]
    if d_ff % d:
        raise ValueError(f"VitDetModel's MLP is a whole mlp_ratio x hidden_size: block.d_ff={d_ff} is not a "
                         f"multiple of block.d_model={d}")
    return {"window_block_indices": [i for i, kind in enumerate(layers) if kind == "window"],
            "window_size": window or 0, "mlp_ratio": d_ff // d, "use_relative_position_embeddings": False,
            "use_absolute_position_embeddings": True}


FAMILY = Family(
    hf_class="VitDetModel", config_class="VitDetConfig",
    keys={"num_hidden_layers": "n_layers", "hidden_size": "block.d_model", "num_attention_heads": "block.n_heads",
          "layer_norm_eps": "block.norm_eps", "qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size",
          "image_size": "embedder.image_size", "pretrain_image_size": "embedder.image_size",
          "num_channels": "embedder.channels", "dropout_prob": "block.dropout"},
    activations=ACTIVATIONS, activation_key="hidden_act",
    # the backbone: no head (a zoo ViTDet classifier's head has no place in VitDetModel)
    shape=config_only(lambda c: {k: v for k, v in vitdet_shape(c).items() if not k.startswith("head.")}),
    state_dict=lambda sd, net: vitdet_state_dict(sd, net["n_layers"]), example=image,
    outputs=lambda hf, x: hf(x).last_hidden_state.flatten(2).transpose(1, 2),  # (B, D, H, W) -> the zoo's (B, N, D)
    extra=export_layers,
    processors=lambda net, hparams: {"preprocessor_config.json": image_processor(
        "ViTImageProcessor", net["embedder"]["image_size"], hparams)},
    marks_checkpoints=False)  # the backbone: a zoo ViTDet classifier has no class (hf_class=VitDetModel names it)

"""Hugging Face DINOv2 (``Dinov2Model``, ``Dinov2ForImageClassification``, and with registers
``Dinov2WithRegistersModel`` / ``...ForImageClassification``) -> the zoo DINOv2
(conf/model/dinov2.yaml): the ViT's renaming (:func:`~zoo.convert.vit.hf_vit_state_dict`) with
each layer's two layer scales and the register tokens. A bare backbone (``...Model``) has no
classifier: the zoo's starts from scratch. The giant models' SwiGLU feed-forward is refused by name.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from zoo.convert import vit
from zoo.convert.common import (ConfigKeys, build_net, check_keys, leave_out, load_mapped, read_checkpoint_dir,
                               shape_overrides)
from zoo.convert.family import Family, config_only, image, image_processor
from zoo.convert.vit import FILE_NAMES, classifier_pretrained, hf_vit_state_dict, rename_parts, vit_shape

MODEL_TYPES = ("dinov2", "dinov2_with_registers")  # the config.json model_type values this converter reads
# how each resamples its position table to another grid (Hugging Face's interpolate_pos_encoding)
RESAMPLING = {"dinov2": "bicubic", "dinov2_with_registers": "bicubic_antialias"}
PREFIXES = ("dinov2.", "dinov2_with_registers.", "")  # the backbone's, in a classifier or bare
# every Dinov2Config key the converter reads (:func:`dinov2_shape`; use_swiglu_ffn is refused there)
# or ignores: stochastic depth (training only), the mask token's presence (masked pre-training only:
# the token is left out) and what Dinov2Backbone alone reads (its stages, their final norm and layout)
CONFIG_KEYS = ConfigKeys(
    reads=vit.CONFIG_KEYS.reads - {"intermediate_size"} | {"mlp_ratio", "layerscale_value", "use_swiglu_ffn"},
    ignores=frozenset({"drop_path_rate", "use_mask_token", "out_features", "out_indices", "stage_names",
                       "apply_layernorm", "reshape_hidden_states"}))
# a Dinov2WithRegistersConfig's: Dinov2Config's and the register count
WITH_REGISTERS = CONFIG_KEYS | ConfigKeys(reads=frozenset({"num_register_tokens"}))


def dinov2_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=dinov2`` the shape of
    a Hugging Face ``Dinov2Config`` or ``Dinov2WithRegistersConfig`` (as a dict)."""
    if config.get("use_swiglu_ffn"):
        raise ValueError("use_swiglu_ffn=True (DINOv2 giant's SwiGLU feed-forward, its hidden width rounded to "
                         "a multiple of 8) is not supported: convert a DINOv2 with the GELU MLP (small, base, large)")
    kind = config.get("model_type", "dinov2")
    if kind not in RESAMPLING:
        raise ValueError(f"model_type={kind!r}: the DINOv2 converter reads {sorted(RESAMPLING)}")
    check_keys(config, WITH_REGISTERS if kind == "dinov2_with_registers" else CONFIG_KEYS)
    registers = config.get("num_register_tokens", 0) if kind == "dinov2_with_registers" else 0
    d_ff = int(config["hidden_size"] * config.get("mlp_ratio", 4))
    return vit_shape(config | {"intermediate_size": d_ff}) | {
        "block.layer_scale": float(config.get("layerscale_value", 1.0)),
        "embedder.registers": registers, "embedder.interpolate": RESAMPLING[kind],
        "head.prefix_tokens": 1 + registers}


def dinov2_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename a DINOv2's weights (in memory or as its files store them) to the zoo's; the mask token
    (masked-image pre-training only) is left out; a bare backbone gives no classifier."""
    hf = rename_parts(hf, FILE_NAMES)
    prefix = next(p for p in PREFIXES if f"{p}embeddings.cls_token" in hf)
    hf = leave_out(hf, f"{prefix}embeddings.mask_token")
    heads = (("head.proj", "classifier"),) if "classifier.weight" in hf else ()
    out = hf_vit_state_dict(hf, n_layers, prefix, heads, ("norm1", "norm2"))
    for i in range(n_layers):
        h, z = f"{prefix}layers.{i}.", f"stack.blocks.{i}."
        out |= {f"{z}attn_out_norm.gamma": hf[f"{h}layer_scale1.lambda1"],
                f"{z}ffn_out_norm.gamma": hf[f"{h}layer_scale2.lambda1"]}
    if f"{prefix}embeddings.register_tokens" in hf:
        out["embedder.registers"] = hf[f"{prefix}embeddings.register_tokens"]
    return out


def _with_fresh_head(load):
    """``load``, the net's own (fresh) classifier taking the place of the one a backbone lacks."""
    def loading(net: nn.Module, state: dict[str, Tensor]) -> None:
        fresh = {k: v for k, v in net.state_dict().items() if k.startswith("head.")}
        load(net, fresh | state)
    return loading


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo DINOv2 holding a Hugging Face DINOv2's weights (a backbone's: under a fresh classifier)."""
    shape = dinov2_shape(hf_model.config.to_dict())
    dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
            "channels": shape["embedder.channels"]}
    net = build_net("dinov2", shape_overrides(shape), dims)
    state = dinov2_state_dict(hf_model.state_dict(), shape["n_layers"])
    (load_mapped if "head.proj.weight" in state else _with_fresh_head(load_mapped))(net, state)
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the DINOv2 folder at ``path``, the net
    holding its weights). The data's images may have any size (the positions are resampled to
    their grid), the channels must be the checkpoint's; a backbone's classifier starts from scratch."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = dinov2_shape(config)
    state = dinov2_state_dict(state, shape["n_layers"])
    load = load_mapped
    if "head.proj.weight" not in state:
        warnings.warn(f"{path} is a DINOv2 backbone (no classifier): the classifier starts from scratch")
        shape, load = shape | {"head.num_classes": OmegaConf.create(net_cfg).head.num_classes}, _with_fresh_head(load)
    # (the table keeps the checkpoint's grid, embedder.image_size; the data's images are resampled to)
    return classifier_pretrained(net_cfg, path, shape, state, ("embedder.channels",), load)


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """DINOv2's processor (BitImageProcessor) resizes the shorter side and centre-crops: the zoo resizes only."""
    config = image_processor("BitImageProcessor", net["embedder"]["image_size"], hparams)
    return {"preprocessor_config.json": config | {"do_center_crop": False, "do_convert_rgb": True}}


KEYS = {k: v for k, v in vit.KEYS.items() if k != "intermediate_size"} | {
    "qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size", "layerscale_value": "block.layer_scale"}


def _mlp_ratio(net: dict[str, Any]) -> dict[str, Any]:
    """Dinov2Config's feed-forward width: a whole multiple of the model's."""
    d_ff, d_model = net["block"]["d_ff"], net["block"]["d_model"]
    if d_ff % d_model:
        raise ValueError(f"block.d_ff={d_ff} is not a whole multiple of block.d_model={d_model}: Dinov2Config's "
                         f"mlp_ratio is an integer")
    return {"mlp_ratio": d_ff // d_model}


FAMILY = Family(
    hf_class="Dinov2ForImageClassification", config_class="Dinov2Config", keys=KEYS,
    activations=vit.HF_ACTIVATIONS, activation_key="hidden_act", shape=config_only(dinov2_shape),
    state_dict=lambda sd, net: dinov2_state_dict(sd, net["n_layers"]), example=image, extra=_mlp_ratio,
    processors=_processors)

"""Hugging Face ``SwinForImageClassification`` -> the zoo Swin (conf/model/swin.yaml, a staged hierarchy:
``zoo.models.staged.Staged``): each stage's layers renamed as the ViT's (:func:`~zoo.convert.vit.hf_block_weights`)
with their relative position tables, each stage's patch merging as the next stage's embedder."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert import vit
from zoo.convert.beit import ATTN
from zoo.convert.common import ConfigKeys, build_net, check_keys, load_mapped, read_checkpoint_dir, shape_overrides
from zoo.convert.family import Family, config_only, image, image_processor
from zoo.convert.vit import classifier_pretrained, hf_block_weights, rename_parts

MODEL_TYPES = ("swin",)  # the config.json model_type values this converter reads
# Checkpoint files keep the transformers 4 names; in memory transformers 5 renames them (in order)
FILE_NAMES = (("attention.self.relative_position_bias_table", "attention.relative_position_bias.relative_position_bias_table"),
              ("attention.self.query", "attention.q_proj"), ("attention.self.key", "attention.k_proj"),
              ("attention.self.value", "attention.v_proj"), ("attention.output.dense", "attention.o_proj"),
              ("intermediate.dense", "mlp.fc1"), ("output.dense", "mlp.fc2"))
EMBEDDINGS_EPS = 1e-5  # Swin's LayerNorm after the patchify conv: torch's default, whatever layer_norm_eps says
# every SwinConfig key the converter reads (:func:`swin_shape`; use_absolute_embeddings is refused there)
# or ignores: stochastic depth (training only), the masked-image decoder's stride, what the backbone
# alone reads (its stages), hidden_size and num_layers, which SwinForImageClassification derives
# from embed_dim and depths instead of reading them, and path_norm, which the released checkpoints'
# configs hold (microsoft/swin-tiny-patch4-window7-224's) and no transformers code reads
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"embed_dim", "depths", "num_heads", "window_size", "mlp_ratio", "qkv_bias", "hidden_act",
                     "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "image_size",
                     "patch_size", "num_channels", "use_absolute_embeddings"}),
    ignores=frozenset({"drop_path_rate", "encoder_stride", "out_features", "out_indices", "stage_names",
                       "hidden_size", "num_layers", "path_norm"}))


def swin_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=swin`` the shape of a Hugging
    Face ``SwinConfig`` (as a dict). Every dependent key is listed, so they apply to a resolved config.
    A key the converter does not implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    if config.get("use_absolute_embeddings"):
        raise ValueError("use_absolute_embeddings=True (Swin adds its positions after the patch norm, the zoo's "
                         "PatchEmbedder before it) is not supported: convert a Swin without absolute positions")
    act, d = config.get("hidden_act", "gelu"), config["embed_dim"]
    if act not in vit.HF_ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} has no zoo activation (known: {sorted(vit.HF_ACTIVATIONS)})")
    d_ff, depths, heads = config.get("mlp_ratio", 4.0) * d, list(config["depths"]), list(config["num_heads"])
    if d_ff != int(d_ff):
        raise ValueError(f"mlp_ratio={config.get('mlp_ratio')} of embed_dim={d} is not a whole feed-forward width")
    bias, dropout = config.get("qkv_bias", True), config.get("hidden_dropout_prob", 0.0)
    check_windows(config["image_size"], config["patch_size"], config["window_size"], len(depths))
    return {
        "depths": depths, "heads": heads, "window": config["window_size"], "final_norm": True,
        "block.d_model": d, "block.n_heads": heads[0], "block.d_ff": int(d_ff),
        "block.norm_eps": config.get("layer_norm_eps", 1e-5), "block.activation": vit.HF_ACTIVATIONS[act],
        "block.bias_q": bias, "block.bias_k": bias, "block.bias_v": bias, "block.dropout": dropout,
        "block.attn_dropout": config.get("attention_probs_dropout_prob", 0.0),
        "embedder.image_size": config["image_size"], "embedder.patch_size": config["patch_size"],
        "embedder.channels": config.get("num_channels", 3),
        "embedder.norm_eps": EMBEDDINGS_EPS,
        "head.num_classes": len(config.get("id2label") or {0: 0, 1: 1}),  # transformers' default: 2 labels
    }


def check_windows(image_size: int | list[int], patch_size: int | list[int], window: int, stages: int) -> None:
    """Refuse a ``window_size`` larger than a stage's patch grid (the image's patches, halved by each
    patch merging, an odd side padded): the stage would use one window of the grid's side, which
    the relative position table of ``window_size`` does not fit (transformers fails on it too)."""
    side = min(image_size if isinstance(image_size, list) else [image_size])
    patch = max(patch_size if isinstance(patch_size, list) else [patch_size])
    grid = side // patch
    for stage in range(stages):
        if grid < window:
            raise ValueError(f"swin config: window_size={window} is larger than stage {stage + 1}'s grid of {grid} x "
                             f"{grid} patches (image_size={image_size} / patch_size={patch_size}, halved {stage} times): "
                             f"its relative position table does not fit that grid; use a window_size <= {grid}")
        grid = -(-grid // 2)


def swin_state_dict(hf: dict[str, Tensor], depths: list[int]) -> dict[str, Tensor]:
    """Rename ``SwinForImageClassification``'s weights (in memory, or as its files store them) to the zoo's;
    the mask token (masked-image modelling only) is left out."""
    hf = rename_parts(hf, FILE_NAMES)
    e, last = "swin.embeddings.", len(depths) - 1
    out = {"stages.0.embedder.patchify.weight": hf[e + "patch_embeddings.projection.weight"],
           "stages.0.embedder.patchify.bias": hf[e + "patch_embeddings.projection.bias"],
           "stages.0.embedder.norm.weight": hf[e + "norm.weight"], "stages.0.embedder.norm.bias": hf[e + "norm.bias"],
           f"stages.{last}.stack.norm.weight": hf["swin.layernorm.weight"],
           f"stages.{last}.stack.norm.bias": hf["swin.layernorm.bias"],
           "head.proj.weight": hf["classifier.weight"], "head.proj.bias": hf["classifier.bias"]}
    for i, depth in enumerate(depths):
        h, z = f"swin.encoder.layers.{i}.", f"stages.{i}."
        for j in range(depth):
            out |= hf_block_weights(hf, f"{h}blocks.{j}.", f"{z}stack.blocks.{j}.", ATTN,
                                    {"fc_in": "mlp.fc1", "fc_out": "mlp.fc2"})
            out[f"{z}bias.{j}.table"] = hf[f"{h}blocks.{j}.attention.relative_position_bias.relative_position_bias_table"]
        if i:  # the stage before's patch merging is this stage's embedder
            d = f"swin.encoder.layers.{i - 1}.downsample."
            out |= {f"{z}embedder.norm.weight": hf[d + "norm.weight"], f"{z}embedder.norm.bias": hf[d + "norm.bias"],
                    f"{z}embedder.reduction.weight": hf[d + "reduction.weight"]}
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo Swin (built from conf/model/swin.yaml) holding a ``SwinForImageClassification``'s weights."""
    shape = swin_shape(hf_model.config.to_dict())
    dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
            "channels": shape["embedder.channels"]}
    net = build_net("swin", shape_overrides(shape), dims)
    load_mapped(net, swin_state_dict(hf_model.state_dict(), shape["depths"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the ``SwinForImageClassification`` folder at
    ``path``, the net holding its weights); the data's images must have the checkpoint's size (the
    stages' windows tile its grids); another label set starts the classifier from scratch."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = swin_shape(config)
    return classifier_pretrained(net_cfg, path, shape, swin_state_dict(state, shape["depths"]),
                                 ("embedder.image_size", "embedder.channels"))


def _extra(net: dict[str, Any]) -> dict[str, Any]:
    """SwinConfig's keys that are not plain copies of one zoo value."""
    return {"depths": list(net["depths"]), "num_heads": list(net["heads"]), "use_absolute_embeddings": False,
            "mlp_ratio": net["block"]["d_ff"] / net["block"]["d_model"], "drop_path_rate": 0.0}


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"preprocessor_config.json": image_processor("ViTImageProcessor", net["embedder"]["image_size"], hparams)}


FAMILY = Family(
    hf_class="SwinForImageClassification", config_class="SwinConfig",
    keys={"embed_dim": "block.d_model", "window_size": "window", "layer_norm_eps": "block.norm_eps",
          "qkv_bias": "block.bias_q", "hidden_dropout_prob": "block.dropout",
          "attention_probs_dropout_prob": "block.attn_dropout", "image_size": "embedder.image_size",
          "patch_size": "embedder.patch_size", "num_channels": "embedder.channels", "num_labels": "head.num_classes"},
    activations=vit.HF_ACTIVATIONS, activation_key="hidden_act", shape=config_only(swin_shape),
    state_dict=lambda sd, net: swin_state_dict(sd, list(net["depths"])), example=image, extra=_extra,
    processors=_processors)

"""Hugging Face ``BeitForImageClassification`` -> the zoo BEiT (conf/model/beit.yaml): the ViT's layer
renaming (:func:`~zoo.convert.vit.hf_block_weights`) with each layer's two layer scales, no key bias, and
the relative position bias tables (one per layer, or the one shared table) as the net's ``bias``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert import vit
from zoo.convert.common import ConfigKeys, build_net, check_keys, load_mapped, read_checkpoint_dir, shape_overrides
from zoo.convert.family import Family, config_only, image, image_processor
from zoo.convert.vit import FILE_NAMES, classifier_pretrained, hf_block_weights, rename_parts, vit_shape

MODEL_TYPES = ("beit",)  # the config.json model_type values this converter reads
# the files' names of the bias tables (transformers 4) -> in memory (5), before the ViT's renaming
BIAS_NAMES = (("encoder.relative_position_bias.", "shared_position_bias."),
              ("attention.attention.relative_position_bias.", "relative_position_bias."))
ATTN = {"q": "attention.q_proj", "k": "attention.k_proj", "v": "attention.v_proj", "out": "attention.o_proj"}
TABLE = "relative_position_bias_table"
# every BeitConfig key the converter reads (:func:`beit_shape`; BEiT's query and value always have a
# bias, its key none) or ignores: stochastic depth (training only), what masked-image pre-training
# alone reads (the mask token, the visual-token vocabulary) and what the backbone and the semantic
# segmentation heads alone read (stages, FPN, pyramid pooling, auxiliary head)
CONFIG_KEYS = ConfigKeys(
    reads=vit.CONFIG_KEYS.reads - {"qkv_bias"} | {"use_relative_position_bias", "use_shared_relative_position_bias",
                                                  "layer_scale_init_value", "use_mean_pooling",
                                                  "use_absolute_position_embeddings"},
    ignores=frozenset({"drop_path_rate", "use_mask_token", "vocab_size", "out_features", "out_indices", "stage_names",
                       "reshape_hidden_states", "add_fpn", "pool_scales", "use_auxiliary_head",
                       "auxiliary_loss_weight", "auxiliary_channels", "auxiliary_num_convs", "auxiliary_concat_input",
                       "semantic_loss_ignore_index"}))


def beit_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=beit`` the shape of a
    Hugging Face ``BeitConfig`` (as a dict). A BEiT with both bias kinds, or neither, is refused, as is
    a key the converter does not implement (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    shared, per_layer = config.get("use_shared_relative_position_bias", False), config.get(
        "use_relative_position_bias", False)
    if shared == per_layer:
        raise ValueError(f"use_relative_position_bias={per_layer} and use_shared_relative_position_bias={shared}: "
                         f"the zoo BEiT has one relative position bias kind, per layer or shared (set exactly one)")
    shape = vit_shape(config)
    scale, mean_pooling = config.get("layer_scale_init_value", 0.1), config.get("use_mean_pooling", True)
    grid = shape["embedder.image_size"] // shape["embedder.patch_size"]
    return shape | {
        "final_norm": not mean_pooling,
        "block.bias_q": True, "block.bias_k": False, "block.bias_v": True,  # BEiT's key has no bias
        "block.layer_scale": float(scale) if scale > 0 else None,  # 0: Hugging Face's layer without lambdas
        "embedder.absolute_positions": config.get("use_absolute_position_embeddings", False),
        "bias.n_heads": shape["block.n_heads"], "bias.window": grid, "bias.n_layers": shape["n_layers"],
        "bias.shared": shared, "bias.class_token": True,
        "head.pool": "mean" if mean_pooling else "cls", "head.prefix_tokens": 1,
        "head.norm_eps": shape["block.norm_eps"] if mean_pooling else None,
    }


def beit_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename ``BeitForImageClassification``'s weights (in memory, or as its files store them) to the
    zoo's; the mask token (masked-image pre-training only) has no zoo home and is left out."""
    hf = rename_parts(hf, BIAS_NAMES + FILE_NAMES)
    e = "beit.embeddings."
    out = {"embedder.cls": hf[e + "cls_token"], "embedder.patchify.weight": hf[e + "patch_embeddings.projection.weight"],
           "embedder.patchify.bias": hf[e + "patch_embeddings.projection.bias"],
           "head.proj.weight": hf["classifier.weight"], "head.proj.bias": hf["classifier.bias"]}
    if e + "position_embeddings" in hf:
        out["embedder.positions.weight"] = hf[e + "position_embeddings"][0]
    for zoo, name in (("stack.norm", "beit.layernorm"), ("head.norm", "beit.pooler.layernorm")):  # by use_mean_pooling
        out |= {f"{zoo}.{kind}": hf[f"{name}.{kind}"] for kind in ("weight", "bias") if f"{name}.{kind}" in hf}
    if f"beit.shared_position_bias.{TABLE}" in hf:
        out["bias.table"] = hf[f"beit.shared_position_bias.{TABLE}"]
    for i in range(n_layers):
        h, z = f"beit.layers.{i}.", f"stack.blocks.{i}."
        out |= hf_block_weights(hf, h, z, ATTN, {"fc_in": "mlp.fc1", "fc_out": "mlp.fc2"})
        out |= {f"{z}{zoo}.gamma": hf[h + name] for zoo, name in (("attn_out_norm", "lambda_1"),
                                                                  ("ffn_out_norm", "lambda_2")) if h + name in hf}
        if f"{h}relative_position_bias.{TABLE}" in hf:
            out[f"bias.{i}.table"] = hf[f"{h}relative_position_bias.{TABLE}"]
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo BEiT (built from conf/model/beit.yaml) holding a ``BeitForImageClassification``'s weights."""
    shape = beit_shape(hf_model.config.to_dict())
    dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
            "channels": shape["embedder.channels"]}
    net = build_net("beit", shape_overrides(shape), dims)
    load_mapped(net, beit_state_dict(hf_model.state_dict(), shape["n_layers"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the ``BeitForImageClassification`` folder at
    ``path``, the net holding its weights); the data's images must have the checkpoint's size (the
    bias tables span its patch grid); another label set starts the classifier from scratch."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = beit_shape(config)
    return classifier_pretrained(net_cfg, path, shape, beit_state_dict(state, shape["n_layers"]),
                                 ("embedder.image_size", "embedder.channels"))


def _extra(net: dict[str, Any]) -> dict[str, Any]:
    """BeitConfig's switches that are not plain copies of one zoo value."""
    return {"use_relative_position_bias": not net["bias"]["shared"], "use_mean_pooling": not net["final_norm"],
            "layer_scale_init_value": net["block"]["layer_scale"] or 0.0}


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """BEiT's processor centre-crops by default: the zoo resizes only."""
    config = image_processor("BeitImageProcessor", net["embedder"]["image_size"], hparams)
    return {"preprocessor_config.json": config | {"do_center_crop": False}}


FAMILY = Family(
    hf_class="BeitForImageClassification", config_class="BeitConfig",
    keys=vit.KEYS | {"patch_size": "embedder.patch_size", "use_absolute_position_embeddings": "embedder.absolute_positions",
                     "use_shared_relative_position_bias": "bias.shared"},
    activations=vit.HF_ACTIVATIONS, activation_key="hidden_act", shape=config_only(beit_shape),
    state_dict=lambda sd, net: beit_state_dict(sd, net["n_layers"]), example=image, extra=_extra,
    processors=_processors)

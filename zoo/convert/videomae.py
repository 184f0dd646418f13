"""Hugging Face ``VideoMAEForVideoClassification`` -> the zoo VideoMAE classifier
(conf/model/videomae.yaml): one short, shape-checked renaming, from a model in memory or (`model.init_from`,
:func:`pretrained`) a checkpoint directory.

VideoMAE's sinusoid position table is not among its weights (Hugging Face recomputes it in
numpy): from a model in memory the converter copies that table; from a directory the zoo's
own table stands in (equal to it but for an odd last-bit rounding in fp32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert import vivit
from zoo.convert.common import ConfigKeys, check_keys, load_mapped, read_checkpoint_dir, square_side
from zoo.convert.family import Family, config_only, video
from zoo.convert.vit import classifier_pretrained, hf_block_weights, rename_parts
from zoo.convert.vivit import VIDEO_INPUTS, VIDEO_KEYS, video_net, video_shape

MODEL_TYPES = ("videomae",)  # the config.json model_type values this converter reads

# Checkpoint files keep the q and v biases as lone tensors (transformers 4 names).
FILE_NAMES = (("attention.q_bias", "attention.query.bias"), ("attention.v_bias", "attention.value.bias"))
# every VideoMAEConfig key the converter reads (:func:`videomae_shape`; qkv_bias: the released configs'
# spelling of qv_bias, which transformers reads as it) or ignores: the pre-training decoder's sizes
# and loss (VideoMAEForVideoClassification builds neither)
CONFIG_KEYS = VIDEO_KEYS | ConfigKeys(
    reads=frozenset({"qv_bias", "qkv_bias", "tubelet_size", "patch_size", "use_mean_pooling"}),
    ignores=frozenset({"decoder_hidden_size", "decoder_intermediate_size", "decoder_num_attention_heads",
                       "decoder_num_hidden_layers", "norm_pix_loss"}))


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


def videomae_shape(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`video_shape` of a ``VideoMAEConfig`` (as a dict): no key bias; mean pooling puts a
    LayerNorm after the pooling, the other pooling (the first vector) one after the stack; a key the
    converter does not implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    mean = config["use_mean_pooling"]
    pooling = {"final_norm": False, "head.pool": "mean", "head.norm_eps": 1e-5} if mean else \
        {"final_norm": True, "head.pool": "cls", "head.norm_eps": None}
    shape = video_shape(config, config["tubelet_size"], square_side(config["patch_size"], "patch_size"),
                        config.get("qv_bias", config.get("qkv_bias", True)))
    return shape | {"block.bias_k": False} | pooling


def _own_table(net: nn.Module, state: dict[str, Tensor]) -> None:
    """load_mapped with the zoo's own sinusoid table (the files do not hold one)."""
    load_mapped(net, state | {"embedder.positions.weight": net.embedder.positions.weight})


@torch.no_grad()
def from_config_and_state(config: dict[str, Any], state: dict[str, Tensor],
                          positions: Tensor | None = None) -> nn.Module:
    """A zoo VideoMAE classifier from a ``VideoMAEConfig`` (as a dict) and its model's state dict;
    ``positions``: the reference's sinusoid table (N, D), else the zoo's own."""
    net = video_net("videomae", videomae_shape(config))
    table = net.embedder.positions.weight if positions is None else positions
    load_mapped(net, videomae_state_dict(state, config["num_hidden_layers"], table))
    return net.eval()


def from_transformers(hf_model) -> nn.Module:
    """A zoo VideoMAE classifier holding a ``VideoMAEForVideoClassification``'s weights and its position table."""
    table = hf_model.videomae.embeddings.position_embeddings[0]
    return from_config_and_state(hf_model.config.to_dict(), hf_model.state_dict(), table)


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook for a VideoMAE folder (see :func:`zoo.convert.vit.classifier_pretrained`)."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = videomae_shape(config)
    renamed = rename_parts(state, FILE_NAMES)
    state = {k: v for k, v in videomae_state_dict(renamed, shape["n_layers"], torch.empty(0)).items()
             if k != "embedder.positions.weight"}
    return classifier_pretrained(net_cfg, path, shape, state, VIDEO_INPUTS, _own_table)


FAMILY = Family(
    hf_class="VideoMAEForVideoClassification", config_class="VideoMAEConfig",
    keys=vivit.KEYS | {"qv_bias": "block.bias_q", "tubelet_size": "embedder.tubelet_size",
                       "patch_size": "embedder.patch_size"},
    activations=vivit.ACTIVATIONS, activation_key="hidden_act", shape=config_only(videomae_shape),
    state_dict=lambda sd, net: {k: v for k, v in videomae_state_dict(sd, net["n_layers"], torch.empty(0)).items()
                                if k != "embedder.positions.weight"},
    example=video, extra=lambda net: {"use_mean_pooling": net["head"]["pool"] == "mean"},
    computed=("embedder.positions.weight",),  # the fixed sinusoid table, recomputed by Hugging Face
    processors=vivit.video_processors("VideoMAEImageProcessor"))

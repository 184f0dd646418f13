"""Hugging Face ViTDet (``VitDetModel``, the backbone) -> zoo ``model=vitdet``.

ViTDet's windowed layers are :class:`~zoo.nn.masks.GridWindowMask` layers of a
:class:`~zoo.nn.masks.PerLayer` pattern (``window_block_indices``); its fused ``qkv`` is split
into the Block's q, k and v. What the zoo net would compute differently is refused: relative
positions, the residual conv blocks, interpolated positions (``pretrain_image_size`` must be the
image size) and a grid the window does not divide (ViTDet zero-pads inside partial windows).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.convert.bert import ACTIVATIONS
from zoo.convert.common import build_net, layer_pattern, load_mapped, refuse, shape_overrides

MASKS = {"window": "{_target_:zoo.nn.masks.GridWindowMask,window:%d}", "global": "{_target_:zoo.nn.masks.NoMask}"}


def vitdet_shape(config: dict) -> dict:
    """The values under ``model.net`` that give ``model=vitdet`` the shape of a ``VitDetConfig``."""
    refuse(config, "VitDetConfig", use_relative_position_embeddings=False, residual_block_indices=[],
           use_absolute_position_embeddings=True, pretrain_image_size=config["image_size"])
    if config["hidden_act"] not in ACTIVATIONS:
        raise ValueError(f"VitDetConfig hidden_act={config['hidden_act']!r}: expected one of {sorted(ACTIVATIONS)}")
    side, window = config["image_size"] // config["patch_size"], config["window_size"]
    windowed = set(config["window_block_indices"])
    if windowed and side % window:
        raise ValueError(f"VitDetConfig window_size={window} does not divide the {side}x{side} patch grid: ViTDet "
                         f"zero-pads partial windows, which the zoo's GridWindowMask does not")
    kinds = ["window" if i in windowed else "global" for i in range(config["num_hidden_layers"])]
    masks = [MASKS[kind] % window if kind == "window" else MASKS[kind] for kind in layer_pattern(kinds)]
    d, qkv_bias, eps = config["hidden_size"], config["qkv_bias"], config["layer_norm_eps"]
    return {
        "n_layers": config["num_hidden_layers"], "mask.masks": f"[{','.join(masks)}]",
        "embedder.patch_size": config["patch_size"], "embedder.d_model": d, "head.d_model": d,
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
    config = hf_model.config.to_dict()
    shape = vitdet_shape(config)
    dims = {"num_classes": 1, "image_size": config["image_size"], "channels": config["num_channels"]}
    net = build_net("vitdet", [*shape_overrides(shape), "model.net.head={_target_:torch.nn.Identity}"], dims)
    load_mapped(net, vitdet_state_dict(hf_model.state_dict(), config["num_hidden_layers"]))
    return net.eval()

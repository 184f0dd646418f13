"""Hugging Face SigLIP (``SiglipModel``) <-> the zoo's two towers (conf/model/siglip.yaml): a
bidirectional text tower read at its last position -> a Linear head; a ViT without CLS whose
vectors are pooled by an attention probe (``zoo.nn.attention_pool``); logits with a learned scale
and bias, trained by the sigmoid loss. The layer and text-tower names are CLIP's
(``zoo.convert.clip``)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from zoo.convert.clip import (TEXT_CONFIG_KEYS, TEXT_KEYS, VISION_CONFIG_KEYS, VISION_KEYS, block_shape,
                              caption_tokenizer, check_towers, encoder_layers, example, logits_per_image, text_shape,
                              text_tower_state_dict, two_tower_from_transformers, two_tower_pretrained,
                              vision_activation)
from zoo.convert.common import ConfigKeys
from zoo.convert.family import Family, image_processor
from zoo.convert.vit import HF_ACTIVATIONS

MODEL_TYPES = ("siglip",)  # the config.json model_type values this converter reads
# SigLIP's keys: CLIP's towers', plus the text head's width and the vision tower's attention probe
# (read: refused without it); the init's scale ignored
SIGLIP_KEYS = ConfigKeys(reads=frozenset({"text_config", "vision_config"}), ignores=frozenset({"initializer_factor"}))
SIGLIP_TEXT_KEYS = TEXT_CONFIG_KEYS | ConfigKeys(reads=frozenset({"projection_size"}))
SIGLIP_VISION_KEYS = VISION_CONFIG_KEYS | ConfigKeys(reads=frozenset({"vision_use_head"}))


def siglip_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=siglip`` the shape of a
    Hugging Face ``SiglipConfig`` (as a dict); a key of it or a tower's that the converter does not
    implement is refused by name."""
    check_towers(config, SIGLIP_KEYS, SIGLIP_TEXT_KEYS, SIGLIP_VISION_KEYS)
    t, v = config["text_config"], config["vision_config"]
    if not v.get("vision_use_head", True):
        raise ValueError("vision_config.vision_use_head=false: a SigLIP vision tower without its attention-pooling "
                         "head has no image vector to compare; the zoo reads SiglipModel with its head")
    d, side = v["hidden_size"], v["image_size"] // v["patch_size"]
    width = t.get("projection_size") or t["hidden_size"]
    if width != d:
        raise ValueError(f"text_config.projection_size={width} but vision_config.hidden_size={d}: SigLIP compares the "
                         f"text head's vector with the attention pool's, they must be one width")
    vision = block_shape(v, "vision.")
    return text_shape(t) | vision | {
        "head.out_features": width,
        "vision.context": side * side, "vision.embedder.image_size": v["image_size"],
        "vision.embedder.patch_size": v["patch_size"], "vision.embedder.channels": v.get("num_channels", 3),
        "vision.head.n_heads": v["num_attention_heads"], "vision.head.d_ff": v["intermediate_size"],
        "vision.head.activation": vision["vision.block.activation"], "vision.head.norm_eps": vision["vision.block.norm_eps"]}


def siglip_state_dict(hf: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
    """Rename a ``SiglipModel``'s weights to the zoo's (``net``: the net config, for the depths). The
    probe's ``nn.MultiheadAttention`` keeps q, k, v in one matrix: split it."""
    v, h = "vision_model.", "vision_model.head."
    vision = encoder_layers(hf, v, net["vision"]["n_layers"]) | {
        "embedder.patchify.weight": hf[v + "embeddings.patch_embedding.weight"],
        "embedder.patchify.bias": hf[v + "embeddings.patch_embedding.bias"],
        "embedder.positions.weight": hf[v + "embeddings.position_embedding.weight"],
        "stack.norm.weight": hf[v + "post_layernorm.weight"], "stack.norm.bias": hf[v + "post_layernorm.bias"],
        "head.probe": hf[h + "probe"], "head.norm.weight": hf[h + "layernorm.weight"],
        "head.norm.bias": hf[h + "layernorm.bias"],
        "head.attn.out.weight": hf[h + "attention.out_proj.weight"], "head.attn.out.bias": hf[h + "attention.out_proj.bias"]}
    for kind in ("weight", "bias"):
        vision |= dict(zip((f"head.attn.q.{kind}", f"head.attn.k.{kind}", f"head.attn.v.{kind}"),
                           hf[f"{h}attention.in_proj_{kind}"].chunk(3)))
        vision |= {f"head.ffn.fc_in.{kind}": hf[f"{h}mlp.fc1.{kind}"], f"head.ffn.fc_out.{kind}": hf[f"{h}mlp.fc2.{kind}"]}
    return text_tower_state_dict(hf, "text_model.", net["n_layers"]) | {f"vision.{k}": w for k, w in vision.items()} | {
        "head.weight": hf["text_model.head.weight"], "head.bias": hf["text_model.head.bias"],
        "logit_scale": hf["logit_scale"].view(()), "logit_bias": hf["logit_bias"].view(())}


def from_transformers(hf_model) -> nn.Module:
    """A zoo SigLIP (built from conf/model/siglip.yaml) holding ``hf_model``'s (a ``SiglipModel``) weights."""
    return two_tower_from_transformers(hf_model, "siglip", siglip_shape, siglip_state_dict)


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a ``SiglipModel`` folder (config.json + weights)."""
    return two_tower_pretrained(net_cfg, path, MODEL_TYPES, siglip_shape, siglip_state_dict)


def _extra(net: dict[str, Any]) -> dict[str, Any]:
    """The sub-configs' kinds and the vision tower's activation."""
    return vision_activation(net) | {"text_config.model_type": "siglip_text_model",
                                     "vision_config.model_type": "siglip_vision_model"}


FAMILY = Family(
    hf_class="SiglipModel", config_class="SiglipConfig",
    keys=TEXT_KEYS | VISION_KEYS | {"text_config.projection_size": "head.out_features"},
    activations=HF_ACTIVATIONS, activation_key="text_config.hidden_act",
    shape=lambda config, net: siglip_shape(config), state_dict=siglip_state_dict, example=example,
    outputs=logits_per_image, ours=lambda net, x: net(*x), extra=_extra, ids_prefix="text_config.",
    # the image read as zoo classify reads it (zoo.data.images.to_tensor), by SiglipProcessor's parts
    processors=lambda net, hparams: {"preprocessor_config.json": image_processor(
        "SiglipImageProcessor", net["vision"]["embedder"]["image_size"], {}) | {
        "do_convert_rgb": True, "processor_class": "SiglipProcessor"}},
    tokenizer_files=caption_tokenizer)

"""Hugging Face CLIP (``CLIPModel``) <-> the zoo's two towers (conf/model/clip.yaml): a causal text
tower pooled at its end-of-text token, a ViT pooled at its CLS token, each with a projection.

The pieces SigLIP (``zoo.convert.siglip``) and LLaVA's CLIP vision tower (``zoo.convert.llava``)
share live here once: a CLIP-style encoder layer's names, a text tower's, a vision tower's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, init_net, load_mapped, read_checkpoint_dir,
                               shape_overrides)
from zoo.convert.family import Family, image_processor
from zoo.convert.vit import HF_ACTIVATIONS

MODEL_TYPES = ("clip",)  # the config.json model_type values this converter reads
LEGACY_EOS = 2  # a CLIP text config with this eos_token_id pools at the largest id (Hugging Face's rule)

# every key of a CLIP-style tower's config (CLIP's and SigLIP's text and vision, LLaVA's vision):
# the Block's read (:func:`block_shape`); the dropouts (the import's net is for eval), the init's
# scale, a released config's gradient_checkpointing and the tower's own projection_dim (CLIPModel
# projects to the top-level one) ignored
TOWER_KEYS = ConfigKeys(
    reads=frozenset({"num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "layer_norm_eps",
                     "hidden_act"}),
    ignores=frozenset({"attention_dropout", "dropout", "initializer_factor", "projection_dim",
                       "gradient_checkpointing"}))
TEXT_CONFIG_KEYS = TOWER_KEYS | ConfigKeys(reads=frozenset({"vocab_size", "max_position_embeddings"}))
VISION_CONFIG_KEYS = TOWER_KEYS | ConfigKeys(reads=frozenset({"num_channels", "image_size", "patch_size"}))
# CLIPConfig's own keys: the projection's width read, the logit scale's init (the weights hold it)
# ignored; transformers 4's text_config_dict / vision_config_dict (null in the released configs)
CLIP_KEYS = ConfigKeys(reads=frozenset({"projection_dim", "text_config", "vision_config"}),
                       ignores=frozenset({"logit_scale_init_value", "initializer_factor"}),
                       fixed={"text_config_dict": None, "vision_config_dict": None})

# zoo Block module -> Hugging Face module, in every CLIP-style encoder layer (CLIP, SigLIP, both towers)
LAYER = (("attn.q", "self_attn.q_proj"), ("attn.k", "self_attn.k_proj"), ("attn.v", "self_attn.v_proj"),
         ("attn.out", "self_attn.out_proj"), ("attn_norm", "layer_norm1"), ("ffn_norm", "layer_norm2"),
         ("ffn.fc_in", "mlp.fc1"), ("ffn.fc_out", "mlp.fc2"))


def encoder_layers(hf: dict[str, Tensor], prefix: str, n_layers: int) -> dict[str, Tensor]:
    """The Blocks ``stack.blocks.N.*`` of ``n_layers`` CLIP-style encoder layers at ``prefix``
    (``<prefix>encoder.layers.N.``)."""
    out = {}
    for i in range(n_layers):
        h, z = f"{prefix}encoder.layers.{i}.", f"stack.blocks.{i}."
        for ours, theirs in LAYER:
            for kind in ("weight", "bias"):
                out[f"{z}{ours}.{kind}"] = hf[f"{h}{theirs}.{kind}"]
    return out


def text_tower_state_dict(hf: dict[str, Tensor], prefix: str, n_layers: int) -> dict[str, Tensor]:
    """A CLIP-style text model at ``prefix`` (token and learned position tables, layers, final norm)
    as the zoo text tower's embedder and stack."""
    e = prefix + "embeddings."
    return encoder_layers(hf, prefix, n_layers) | {
        "embedder.tokens.weight": hf[e + "token_embedding.weight"],
        "embedder.positions.weight": hf[e + "position_embedding.weight"],
        "stack.norm.weight": hf[prefix + "final_layer_norm.weight"],
        "stack.norm.bias": hf[prefix + "final_layer_norm.bias"]}


def clip_vision_state_dict(hf: dict[str, Tensor], n_layers: int, prefix: str = "") -> dict[str, Tensor]:
    """Rename a CLIPVisionTransformer's weights (at ``prefix``) to a zoo ViT Model's: CLS, patches
    without bias, positions, ``pre_layrnorm`` (the embedder's norm), layers, ``post_layernorm`` (the
    final norm: a per-position norm, so normalising every position and reading the CLS is CLIP's)."""
    e = prefix + "embeddings."
    return encoder_layers(hf, prefix, n_layers) | {
        "embedder.cls": hf[e + "class_embedding"].view(1, 1, -1),
        "embedder.patchify.weight": hf[e + "patch_embedding.weight"],
        "embedder.positions.weight": hf[e + "position_embedding.weight"],
        "embedder.norm.weight": hf[prefix + "pre_layrnorm.weight"], "embedder.norm.bias": hf[prefix + "pre_layrnorm.bias"],
        "stack.norm.weight": hf[prefix + "post_layernorm.weight"], "stack.norm.bias": hf[prefix + "post_layernorm.bias"]}


def block_shape(c: dict[str, Any], at_path: str = "") -> dict[str, Any]:
    """A tower's depth and Block (under ``at_path``) from a CLIP-style text or vision config."""
    act = c.get("hidden_act", "quick_gelu")
    if act not in HF_ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} has no zoo activation (known: {sorted(HF_ACTIVATIONS)})")
    return {f"{at_path}n_layers": c["num_hidden_layers"], f"{at_path}block.d_model": c["hidden_size"],
            f"{at_path}block.n_heads": c["num_attention_heads"], f"{at_path}block.d_ff": c["intermediate_size"],
            f"{at_path}block.norm_eps": c.get("layer_norm_eps", 1e-5), f"{at_path}block.activation": HF_ACTIVATIONS[act],
            f"{at_path}block.dropout": 0.0, f"{at_path}block.attn_dropout": c.get("attention_dropout", 0.0)}


def text_shape(t: dict[str, Any]) -> dict[str, Any]:
    """The text tower (the net itself): depth, Block, token and position tables, context."""
    length = t["max_position_embeddings"]
    return block_shape(t) | {"context": length, "embedder.vocab_size": t["vocab_size"], "embedder.max_len": length}


def vision_shape(v: dict[str, Any]) -> dict[str, Any]:
    """The vision tower (``vision``): depth, Block, patches; its context is its positions."""
    side = v["image_size"] // v["patch_size"]
    return block_shape(v, "vision.") | {
        "vision.context": side * side + 1, "vision.embedder.image_size": v["image_size"],
        "vision.embedder.patch_size": v["patch_size"], "vision.embedder.channels": v.get("num_channels", 3),
        "vision.embedder.norm_eps": v.get("layer_norm_eps", 1e-5)}


def clip_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=clip`` the shape of a
    Hugging Face ``CLIPConfig`` (as a dict). The text tower pools at the first end-of-text id, or,
    for an ``eos_token_id`` of 2 (configs written before the id was right), at the largest id. A key
    of the config or a tower's that the converter does not implement is refused by name."""
    t, v, width = config["text_config"], config["vision_config"], config["projection_dim"]
    check_towers(config, CLIP_KEYS, TEXT_CONFIG_KEYS, VISION_CONFIG_KEYS)
    eos = t.get("eos_token_id", 49407)
    return text_shape(t) | vision_shape(v) | {
        "head.out_features": width, "vision.head.out_features": width,
        "text_pool": "argmax" if eos == LEGACY_EOS else "eos", "eos_id": eos}


def check_towers(config: dict[str, Any], keys: ConfigKeys, text: ConfigKeys, vision: ConfigKeys) -> None:
    """:func:`check_keys` of a two-tower config and of each tower's against its own declaration."""
    kind = config.get("model_type", "this")
    check_keys(config, keys)
    check_keys(config["text_config"], text, f"{kind} text_config")
    check_keys(config["vision_config"], vision, f"{kind} vision_config")


def clip_state_dict(hf: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
    """Rename a ``CLIPModel``'s weights to the zoo's (``net``: the net config, for the depths)."""
    vision = clip_vision_state_dict(hf, net["vision"]["n_layers"], "vision_model.")
    return text_tower_state_dict(hf, "text_model.", net["n_layers"]) | {f"vision.{k}": w for k, w in vision.items()} | {
        "head.weight": hf["text_projection.weight"], "vision.head.weight": hf["visual_projection.weight"],
        "logit_scale": hf["logit_scale"].view(())}


def net_config(hf_model) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Hugging Face config as a dict, the dims the zoo config reads) of a two-tower model."""
    cfg = hf_model.config.to_dict()
    text = cfg["text_config"]
    return cfg, {"vocab_size": text["vocab_size"], "eos_id": text.get("eos_token_id"), "class_names": [],
                 "class_prompts": []}


def depths(shape: dict[str, Any]) -> dict[str, Any]:
    """The part of the net config a two-tower state dict reads: each tower's depth."""
    return {"n_layers": shape["n_layers"], "vision": {"n_layers": shape["vision.n_layers"]}}


@torch.no_grad()
def two_tower_from_transformers(hf_model, model: str, shape_of, state_dict_of) -> nn.Module:
    """A zoo ``model`` (conf/model/<model>.yaml) holding a two-tower Hugging Face model's weights,
    through the family's ``shape_of`` (config -> shape) and ``state_dict_of`` (weights -> the zoo's)."""
    cfg, dims = net_config(hf_model)
    shape = shape_of(cfg)
    net = build_net(model, shape_overrides(shape), dims)
    load_mapped(net, state_dict_of(hf_model.state_dict(), depths(shape)))
    return net


def from_transformers(hf_model) -> nn.Module:
    """A zoo CLIP (built from conf/model/clip.yaml) holding ``hf_model``'s (a ``CLIPModel``) weights."""
    return two_tower_from_transformers(hf_model, "clip", clip_shape, clip_state_dict)


def two_tower_pretrained(net_cfg: dict[str, Any], path: str, model_types: tuple[str, ...], shape_of, state_dict_of):
    """``model.init_from`` of a two-tower folder: (``net_cfg`` reshaped to its config, the net holding its
    weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, model_types)
    shape = shape_of(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_net(net_cfg, shape, state_dict_of(state, depths(shape)))


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a ``CLIPModel`` folder (config.json + weights)."""
    return two_tower_pretrained(net_cfg, path, MODEL_TYPES, clip_shape, clip_state_dict)


def example(net: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """(tokens (2, L) ending in the end-of-text id where the net pools at it, images (2, C, S, S))."""
    length, vocab = min(9, net["context"]), net["embedder"]["vocab_size"]
    tokens = torch.randint(0, vocab, (2, length))
    if net.get("eos_id") is not None:
        tokens[tokens == net["eos_id"]] = (net["eos_id"] + 1) % vocab
        tokens[:, -1] = net["eos_id"]
    e = net["vision"]["embedder"]
    return tokens, torch.randn(2, e["channels"], e["image_size"], e["image_size"])


def logits_per_image(hf: nn.Module, x: tuple[Tensor, Tensor]) -> Tensor:
    """(N, M): a Hugging Face two-tower model's ``logits_per_image`` on (tokens, images)."""
    return hf(input_ids=x[0], pixel_values=x[1]).logits_per_image


def vision_activation(net: dict[str, Any]) -> dict[str, str]:
    """``vision_config.hidden_act``: the vision Block's activation, by its Hugging Face name."""
    act = net["vision"]["block"]["activation"]
    names = [hf for hf, zoo in HF_ACTIVATIONS.items() if zoo == act]
    if not names:
        raise ValueError(f"vision.block.activation={act!r} has no Hugging Face name")
    return {"vision_config.hidden_act": names[0]}


def _extra(net: dict[str, Any]) -> dict[str, Any]:
    """The sub-configs' kinds and the vision tower's activation."""
    return vision_activation(net) | {"text_config.model_type": "clip_text_model",
                                     "vision_config.model_type": "clip_vision_model"}


def tower_keys(prefix: str, at_path: str) -> dict[str, str]:
    """Hugging Face config key -> zoo path, a tower's plain copies (``at_path``: where the tower's keys are)."""
    return {f"{prefix}{k}": at_path + v for k, v in {
        "hidden_size": "block.d_model", "intermediate_size": "block.d_ff", "num_hidden_layers": "n_layers",
        "num_attention_heads": "block.n_heads", "layer_norm_eps": "block.norm_eps",
        "attention_dropout": "block.attn_dropout"}.items()}


TEXT_KEYS = tower_keys("text_config.", "") | {"text_config.vocab_size": "embedder.vocab_size",
                                              "text_config.max_position_embeddings": "context"}
VISION_KEYS = tower_keys("vision_config.", "vision.") | {
    "vision_config.image_size": "vision.embedder.image_size", "vision_config.patch_size": "vision.embedder.patch_size",
    "vision_config.num_channels": "vision.embedder.channels"}


@torch.no_grad()
def eos_off_the_legacy_id(net: nn.Module, net_cfg: dict[str, Any], tokenizer: Any) -> tuple[nn.Module, dict[str, Any], Any]:
    """The export's renumbering: ``CLIPTextTransformer`` pools at the first end-of-text id unless its
    ``eos_token_id`` is 2 (:data:`LEGACY_EOS`), where it pools at the largest id. A zoo run that
    pools at an end of text whose id is 2 (a word vocabulary's ``<eos>``) is written with that id
    and the vocabulary's last trading places: their token embedding rows and their tokens in the
    tokenizer, the same network under other numbers. Any other run is written as it is."""
    from zoo.data.tokenizers import swapped

    eos = net_cfg.get("eos_id")
    if net_cfg["text_pool"] != "eos" or eos != LEGACY_EOS:
        return net, net_cfg, tokenizer
    last = net_cfg["embedder"]["vocab_size"] - 1
    net = copy.deepcopy(net)
    rows = net.embedder.tokens.weight
    rows[[eos, last]] = rows[[last, eos]].clone()
    net.eos_id = last
    return net, {**net_cfg, "eos_id": last}, swapped(tokenizer, eos, last) if tokenizer is not None else None


def clip_image_processor(size: int) -> dict[str, Any]:
    """A ``CLIPImageProcessor`` that reads an image as the zoo's image-text data and ``zoo classify``
    do (:func:`zoo.data.images.to_tensor`): RGB, resized to ``size`` square (no crop), [-1, 1]."""
    return image_processor("CLIPImageProcessor", size, {}) | {"do_center_crop": False, "do_convert_rgb": True}


def caption_tokenizer(folder: Path) -> None:
    """The saved tokenizer folder ``folder`` made to tokenize a caption as the zoo's image-text data
    do (``CaptionItems``, ``Contrastive.class_vectors``): its ids, then the end-of-text id; no
    start-of-text (the zoo places none). The two-tower models read ``input_ids`` and
    ``attention_mask`` only."""
    from tokenizers import Tokenizer, processors

    config = json.loads((folder / "tokenizer_config.json").read_text())
    eos = config.get("eos_token")
    if eos is None:
        raise ValueError("the run's tokenizer has no end-of-text token, where the exported text tower pools each "
                         "caption: train with one (the caption data's tokenizers have <eos>), or export with "
                         "hf_class=zoo")
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, tok.token_to_id(eos))])
    tok.save(str(folder / "tokenizer.json"))
    config["model_input_names"] = ["input_ids", "attention_mask"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


FAMILY = Family(
    hf_class="CLIPModel", config_class="CLIPConfig",
    keys=TEXT_KEYS | VISION_KEYS | {"projection_dim": "head.out_features", "text_config.eos_token_id": "eos_id"},
    activations=HF_ACTIVATIONS, activation_key="text_config.hidden_act",
    shape=lambda config, net: clip_shape(config), state_dict=clip_state_dict, example=example,
    outputs=logits_per_image, ours=lambda net, x: net(*x), extra=_extra, ids_prefix="text_config.",
    processors=lambda net, hparams: {"preprocessor_config.json": clip_image_processor(
        net["vision"]["embedder"]["image_size"]) | {"processor_class": "CLIPProcessor"}},
    tokenizer_files=caption_tokenizer, renumber=eos_off_the_legacy_id)

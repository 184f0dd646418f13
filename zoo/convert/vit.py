"""Vision Transformers into the zoo ViT (conf/model/vit.yaml): Hugging Face
``ViTForImageClassification`` and timm ``VisionTransformer`` (a model or its state dict).
Each is one short, shape-checked renaming."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, init_net, leave_out, load_mapped, read_checkpoint_dir,
                               shape_overrides)
from zoo.convert.family import Family, config_only, image, image_processor

MODEL_TYPES = ("vit",)  # the config.json model_type values the Hugging Face reader takes

# Hugging Face ``hidden_act`` -> the Block's activation
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "quick_gelu": "quick_gelu", "relu": "relu", "silu": "silu"}

# Checkpoint files (the Hub's, and what save_pretrained writes) keep the transformers 4 names;
# in memory, transformers 5 renames them: (file name part, in-memory name part), applied in order.
FILE_NAMES = (("encoder.layer.", "layers."), ("attention.attention.query", "attention.q_proj"),
              ("attention.attention.key", "attention.k_proj"), ("attention.attention.value", "attention.v_proj"),
              ("attention.output.dense", "attention.o_proj"), ("intermediate.dense", "mlp.fc1"),
              ("output.dense", "mlp.fc2"))


def rename_parts(state: dict[str, Tensor], parts: tuple[tuple[str, str], ...]) -> dict[str, Tensor]:
    """``state`` with each (old, new) part of its names replaced, in order."""
    renamed = {}
    for name, value in state.items():
        for old, new in parts:
            name = name.replace(old, new)
        renamed[name] = value
    return renamed


def _shape_overrides(n_layers: int, d_model: int, n_heads: int, d_ff: int, patch_size: int, eps: float,
                     qkv_bias: bool) -> list[str]:
    return [
        f"model.net.n_layers={n_layers}",
        f"model.net.embedder.patch_size={patch_size}",
        f"model.net.block.d_model={d_model}",
        f"model.net.block.n_heads={n_heads}",
        f"model.net.block.d_ff={d_ff}",
        f"model.net.block.norm_eps={eps}",
        f"model.net.block.bias_q={qkv_bias}",
        f"model.net.block.bias_k={qkv_bias}",
        f"model.net.block.bias_v={qkv_bias}",
    ]


def _block_weights(z: str, attn: dict[str, Tensor], norms: tuple[Tensor, ...], ffn: dict[str, Tensor]) -> dict[str, Tensor]:
    """One Block's zoo names: ``attn`` holds q/k/v/out weights (and biases), ``norms`` the
    (attn_norm weight, bias, ffn_norm weight, bias), ``ffn`` fc_in/fc_out weights and biases."""
    out = {f"{z}attn.{k}": v for k, v in attn.items()} | {f"{z}ffn.{k}": v for k, v in ffn.items()}
    out |= {f"{z}attn_norm.weight": norms[0], f"{z}attn_norm.bias": norms[1],
            f"{z}ffn_norm.weight": norms[2], f"{z}ffn_norm.bias": norms[3]}
    return out


def hf_block_weights(hf: dict[str, Tensor], h: str, z: str, attn: dict[str, str], ffn: dict[str, str],
                     norms: tuple[str, str] = ("layernorm_before", "layernorm_after")) -> dict[str, Tensor]:
    """One Hugging Face ViT-style layer (prefix ``h``) as the zoo Block at ``z``: ``attn`` maps the
    zoo's q/k/v/out to the layer's module names, ``ffn`` fc_in/fc_out, ``norms`` the two LayerNorms.
    Biases the layer lacks (e.g. VideoMAE's key) are left out."""
    def pick(names: dict[str, str]) -> dict[str, Tensor]:
        return {f"{zoo}.{kind}": hf[f"{h}{name}.{kind}"]
                for zoo, name in names.items() for kind in ("weight", "bias") if f"{h}{name}.{kind}" in hf}

    return _block_weights(z, pick(attn), tuple(hf[f"{h}{n}.{kind}"] for n in norms for kind in ("weight", "bias")),
                          pick(ffn))


# ---------------------------------------------------------------- Hugging Face

def vit_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=vit`` the shape
    (and dropout) of a Hugging Face ``ViTConfig`` (as a dict). Every dependent key is listed, so
    the same values apply to a resolved config."""
    act = config.get("hidden_act", "gelu")
    if act not in HF_ACTIVATIONS:
        raise ValueError(f"hidden_act={act!r} has no zoo activation (known: {sorted(HF_ACTIVATIONS)})")
    d, eps, bias, dropout = (config["hidden_size"], config.get("layer_norm_eps", 1e-12), config.get("qkv_bias", True),
                             config.get("hidden_dropout_prob", 0.0))
    return {
        "n_layers": config["num_hidden_layers"],
        "block.d_model": d,
        "block.n_heads": config["num_attention_heads"],
        "block.d_ff": config["intermediate_size"],
        "block.norm_eps": eps,
        "block.activation": HF_ACTIVATIONS[act],
        "block.bias_q": bias, "block.bias_k": bias, "block.bias_v": bias,
        "block.dropout": dropout,
        "block.attn_dropout": config.get("attention_probs_dropout_prob", 0.0),
        "embedder.image_size": config["image_size"],
        "embedder.patch_size": config["patch_size"],
        "embedder.channels": config.get("num_channels", 3),
        "head.num_classes": len(config.get("id2label") or {0: 0, 1: 1}),  # transformers' default: 2 labels
    }


# every ViTConfig key ViT's converter reads (:func:`vit_shape`) or ignores: the masked-image
# modelling decoder's stride and the pooler (ViTForImageClassification builds neither)
CONFIG_KEYS = ConfigKeys(reads=frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                          "hidden_act", "layer_norm_eps", "qkv_bias", "hidden_dropout_prob",
                                          "attention_probs_dropout_prob", "image_size", "patch_size", "num_channels"}),
                         ignores=frozenset({"encoder_stride", "pooler_output_size", "pooler_act"}))


def checked_vit_shape(config: dict[str, Any]) -> dict[str, Any]:
    """:func:`vit_shape` of a ``ViTConfig`` (shared with the ViT-shaped families) after refusing,
    by name, a key ViT's converter does not implement (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    return vit_shape(config)


def hf_vit_state_dict(hf: dict[str, Tensor], n_layers: int, prefix: str = "vit.",
                      heads: tuple[tuple[str, str], ...] = (("head.proj", "classifier"),),
                      norms: tuple[str, str] = ("layernorm_before", "layernorm_after")) -> dict[str, Tensor]:
    """Rename ``ViTForImageClassification``'s weights (transformers >= 5 names) to the zoo's. The
    ViT-shaped families share it: ``prefix`` is the backbone's (``deit.``, ``dinov2.``, ``""`` for a
    bare backbone), ``heads`` (zoo head module, Hugging Face linear layer) its classifiers, ``norms``
    each layer's two LayerNorms."""
    e = prefix + "embeddings."
    out = {
        "embedder.cls": hf[e + "cls_token"],
        "embedder.positions.weight": hf[e + "position_embeddings"][0],
        "embedder.patchify.weight": hf[e + "patch_embeddings.projection.weight"],
        "embedder.patchify.bias": hf[e + "patch_embeddings.projection.bias"],
        "stack.norm.weight": hf[prefix + "layernorm.weight"],
        "stack.norm.bias": hf[prefix + "layernorm.bias"],
    }
    out |= {f"{zoo}.{kind}": hf[f"{name}.{kind}"] for zoo, name in heads for kind in ("weight", "bias")}
    attn = {zoo: f"attention.{name}_proj" for zoo, name in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))}
    for i in range(n_layers):
        out |= hf_block_weights(hf, f"{prefix}layers.{i}.", f"stack.blocks.{i}.", attn,
                                {"fc_in": "mlp.fc1", "fc_out": "mlp.fc2"}, norms)
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo ViT (built from conf/model/vit.yaml) holding a ``ViTForImageClassification``'s weights."""
    cfg = hf_model.config
    dims = {"num_classes": cfg.num_labels, "image_size": cfg.image_size, "channels": cfg.num_channels}
    net = build_net("vit", shape_overrides(checked_vit_shape(cfg.to_dict())), dims)
    load_mapped(net, hf_vit_state_dict(hf_model.state_dict(), cfg.num_hidden_layers))
    return net


def classifier_pretrained(net_cfg: dict[str, Any], path: str, shape: dict[str, Any], state: dict[str, Tensor],
                          data_keys: tuple[str, ...],
                          load: Callable[[nn.Module, dict[str, Tensor]], None] = load_mapped,
                          classifiers: tuple[str, ...] = ("head.proj.",)) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` for a classifier (ViT, ViViT, VideoMAE): the data's inputs must have the
    checkpoint's ``data_keys`` (image size, channels, frames); with another number of classes the
    classifier (the weights under ``classifiers``: DeiT has two) starts from scratch (fine-tuning on
    a new label set) and the rest is loaded."""
    data = OmegaConf.create(net_cfg)
    for key in data_keys:
        if OmegaConf.select(data, key) != shape[key]:
            raise ValueError(f"the data's inputs have {key.split('.')[-1]}={OmegaConf.select(data, key)} but "
                             f"{path}/config.json says {shape[key]}: give the data the checkpoint's input shape")
    classes = OmegaConf.select(data, "head.num_classes")
    if classes != shape["head.num_classes"]:
        warnings.warn(f"{path} classifies {shape['head.num_classes']} labels, the data {classes}: "
                      f"the classifier starts from scratch")
        shape = shape | {"head.num_classes": classes}
        for prefix in classifiers:
            state = leave_out(state, prefix)

    def load_keeping_fresh_head(net: nn.Module, weights: dict[str, Tensor]) -> None:
        fresh = {k: v for k, v in net.state_dict().items() if k.startswith(classifiers)}
        load(net, fresh | weights)

    return init_net(net_cfg, shape, state, load_keeping_fresh_head)


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the ``ViTForImageClassification``
    folder at ``path``, or a timm-format folder (:func:`timm_from_dir`, ``timm:<name>``), the net
    holding its weights); see :func:`classifier_pretrained`."""
    if is_timm_dir(path):
        model = timm_from_dir(path)
        return classifier_pretrained(net_cfg, path, timm_model_shape(model),
                                     timm_vit_state_dict(model.state_dict(), len(model.blocks)),
                                     ("embedder.image_size", "embedder.channels"))
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = checked_vit_shape(config)
    return classifier_pretrained(net_cfg, path, shape, hf_vit_state_dict(rename_parts(state, FILE_NAMES), shape["n_layers"]),
                                 ("embedder.image_size", "embedder.channels"))


# ---------------------------------------------------------------- timm

def timm_vit_state_dict(sd: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename a timm ``VisionTransformer`` state dict to the zoo's. timm keeps q, k, v in
    one (3D, D) matrix: split it."""
    renames = {"cls_token": "embedder.cls", "patch_embed.proj.weight": "embedder.patchify.weight",
               "patch_embed.proj.bias": "embedder.patchify.bias", "norm_pre.weight": "embedder.norm.weight",
               "norm_pre.bias": "embedder.norm.bias", "norm.weight": "stack.norm.weight",
               "norm.bias": "stack.norm.bias", "fc_norm.weight": "head.norm.weight", "fc_norm.bias": "head.norm.bias",
               "head.weight": "head.proj.weight", "head.bias": "head.proj.bias"}
    out = {zoo: sd[name] for name, zoo in renames.items() if name in sd}
    out["embedder.positions.weight"] = sd["pos_embed"][0]
    for i in range(n_layers):
        b = f"blocks.{i}."
        attn = dict(zip(("q.weight", "k.weight", "v.weight"), sd[b + "attn.qkv.weight"].chunk(3)))
        if b + "attn.qkv.bias" in sd:
            attn |= dict(zip(("q.bias", "k.bias", "v.bias"), sd[b + "attn.qkv.bias"].chunk(3)))
        attn |= {"out.weight": sd[b + "attn.proj.weight"], "out.bias": sd[b + "attn.proj.bias"]}
        ffn = {f"{zoo}.{kind}": sd[f"{b}mlp.{name}.{kind}"]
               for zoo, name in (("fc_in", "fc1"), ("fc_out", "fc2")) for kind in ("weight", "bias")}
        norms = tuple(sd[f"{b}{n}.{kind}"] for n in ("norm1", "norm2") for kind in ("weight", "bias"))
        out |= _block_weights(f"stack.blocks.{i}.", attn, norms, ffn)
        # anything else timm may hold per block (layer scale, q/k norms) has no zoo home
        known = {k for k in sd if k.startswith(b)} - {f"{b}{n}" for n in (
            "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "attn.qkv.weight", "attn.qkv.bias",
            "attn.proj.weight", "attn.proj.bias", "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias")}
        if known:
            raise KeyError(f"timm block {i} has weights the zoo Block does not: {sorted(known)}")
    return out


def timm_shape(sd: dict[str, Tensor], n_heads: int, global_pool: str = "token", eps: float = 1e-6) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=vit`` the shape of a
    timm ``VisionTransformer`` state dict; what the tensors cannot tell is an argument. Every
    dependent key is listed, so the same values apply to a resolved config."""
    if global_pool not in ("token", "avg"):
        raise ValueError(f"global_pool={global_pool!r}: the zoo head pools 'token' (CLS) or 'avg' only")
    d_model, channels, patch, _ = sd["patch_embed.proj.weight"].shape[0:4]
    n_layers = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    has_cls = "cls_token" in sd
    n_patches = sd["pos_embed"].shape[1] - int(has_cls)
    side = math.isqrt(n_patches)
    if side * side != n_patches:
        raise ValueError(f"pos_embed has {n_patches} patch positions (+{int(has_cls)} CLS), not a square grid "
                         f"(timm's no_embed_class / register tokens are not supported)")
    if not has_cls and global_pool == "token":
        raise ValueError("global_pool='token' needs the CLS token, and the state dict has no cls_token")
    qkv_bias = "blocks.0.attn.qkv.bias" in sd
    return {
        "n_layers": n_layers,
        "final_norm": "norm.weight" in sd,
        "block.d_model": d_model, "block.n_heads": n_heads, "block.d_ff": sd["blocks.0.mlp.fc1.weight"].shape[0],
        "block.norm_eps": eps, "block.bias_q": qkv_bias, "block.bias_k": qkv_bias, "block.bias_v": qkv_bias,
        "embedder.image_size": side * patch, "embedder.patch_size": patch, "embedder.channels": channels,
        "embedder.cls_token": has_cls, "embedder.bias": "patch_embed.proj.bias" in sd,
        "embedder.norm_eps": eps if "norm_pre.weight" in sd else None,
        "head.num_classes": sd["head.weight"].shape[0],
        "head.pool": "cls" if global_pool == "token" else "mean", "head.prefix_tokens": int(has_cls),
        "head.norm_eps": eps if "fc_norm.weight" in sd else None,
    }


@torch.no_grad()
def from_timm_state_dict(sd: dict[str, Tensor], n_heads: int, global_pool: str = "token",
                         eps: float = 1e-6) -> nn.Module:
    """A zoo ViT holding a timm ``VisionTransformer`` state dict. The shapes come from the
    tensors; what they cannot tell is an argument: ``n_heads``, ``global_pool`` (``token``
    = the CLS vector, ``avg`` = mean of the patch vectors) and the LayerNorm ``eps``.
    :func:`from_timm` reads them from the model instead."""
    return _timm_net(sd, timm_shape(sd, n_heads, global_pool, eps))


def _timm_net(sd: dict[str, Tensor], shape: dict[str, Any]) -> nn.Module:
    dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
            "channels": shape["embedder.channels"]}
    net = build_net("vit", shape_overrides(shape), dims)
    load_mapped(net, timm_vit_state_dict(sd, shape["n_layers"]))
    return net


def timm_model_shape(model: nn.Module) -> dict[str, Any]:
    """:func:`timm_shape` of a timm ``VisionTransformer``, its heads, pooling and eps read from the
    model; what the zoo ViT cannot express is refused, naming it."""
    from timm.models.vision_transformer import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(f"timm model {type(model).__name__} is not a VisionTransformer: the zoo ViT reads only those")
    if getattr(model, "dist_token", None) is not None:
        raise ValueError("the timm model has a distillation token (a distilled DeiT): the zoo ViT has a CLS token "
                         "only; take the non-distilled model")
    act = model.blocks[0].mlp.act
    if not (isinstance(act, nn.GELU) and act.approximate == "none"):
        raise ValueError(f"timm MLP activation {act} is not the exact GELU of the zoo ViT Block")
    # (dynamic_img_size is accepted: at the native size, the one image size the zoo ViT takes, timm's
    # resampled positions are its own table)
    unsupported = {k: v for k, v in (("no_embed_class", model.no_embed_class), ("reg_tokens", model.num_reg_tokens),
                                     ("dynamic_img_pad", getattr(model.patch_embed, "dynamic_img_pad", False))) if v}
    if unsupported:
        raise ValueError(f"timm {unsupported} have no zoo ViT equivalent")
    norm = model.fc_norm if isinstance(model.norm, nn.Identity) else model.norm
    return timm_shape(model.state_dict(), model.blocks[0].attn.num_heads, model.global_pool, getattr(norm, "eps", 1e-6))


def from_timm(model) -> nn.Module:
    """A zoo ViT holding a timm ``VisionTransformer``'s weights (shapes read from the model)."""
    return _timm_net(model.state_dict(), timm_model_shape(model))


# the keys of a timm folder's pretrained_cfg that loading its weights file reads
LOAD_KEYS = ("num_classes", "classifier", "first_conv", "label_offset")


def is_timm_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder in timm's own format (``config.json`` naming an ``architecture``
    and no ``model_type``: what timm's ``save_for_hf`` writes, and the Hub's ``timm/*`` repositories)."""
    file = Path(path) / "config.json"
    if not file.is_file():
        return False
    config = json.loads(file.read_text())
    return "architecture" in config and "model_type" not in config


def timm_from_dir(path: str | Path) -> nn.Module:
    """The timm model of a timm-format folder, built and loaded by timm's own pretrained loading
    (``create_model(architecture, pretrained=True)`` with the folder's weights file as
    ``pretrained_cfg_overlay``). ``config.json`` is data: its architecture must be one timm
    registers (never a ``hf-hub:`` or other source), its ``model_args`` plain values."""
    import timm

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    name = config["architecture"]
    if not isinstance(name, str) or name not in timm.list_models():
        raise ValueError(f"{path}/config.json: architecture={name!r} is not a model timm registers")
    args = config.get("model_args") or {}
    plain = (str, int, float, bool, type(None), list)
    if not isinstance(args, dict) or not all(isinstance(v, plain) for v in args.values()):
        raise ValueError(f"{path}/config.json: model_args={args!r} must map names to plain values")
    pretrained_cfg = config.get("pretrained_cfg") or {}
    if not isinstance(pretrained_cfg, dict):
        raise ValueError(f"{path}/config.json: pretrained_cfg is a {type(pretrained_cfg).__name__}, not a dict")
    weights = [path / f for f in ("model.safetensors", "pytorch_model.bin") if (path / f).is_file()]
    if not weights:
        raise FileNotFoundError(f"{path} has neither model.safetensors nor pytorch_model.bin")
    # Of the folder's pretrained config only what loading the file needs (its class count: timm drops a
    # classifier of another size); nothing that picks another source (url, hf_hub_id, source). The file
    # is a state dict (timm reads a .bin with weights_only), not an original-format (.npz) one.
    overlay = {k: pretrained_cfg[k] for k in LOAD_KEYS if k in pretrained_cfg}
    overlay |= {"file": str(weights[0]), "custom_load": False}
    kwargs = {key: config[key] for key in ("num_classes", "global_pool") if key in config}
    return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, **(kwargs | args)).eval()


def timm_folder(name: str, file: str | None, cache: Path) -> Path:
    """``timm:<name>[@file]``: the model timm's own pretrained loading gives (its download, or
    ``file`` as ``pretrained_cfg_overlay``), written in timm's folder format under ``cache`` so
    that ``model.init_from`` reads it as any folder (:func:`pretrained`)."""
    import timm
    from timm.models import save_for_hf

    if name not in timm.list_models(pretrained=True) and name not in timm.list_models():
        raise ValueError(f"timm:{name}: timm has no model of that name (timm.list_models() lists them)")
    overlay = None if file is None else {"file": file, "custom_load": Path(file).suffix == ".npz"}
    if file is not None and not Path(file).is_file():
        raise FileNotFoundError(f"timm:{name}@{file}: the weights file {file} does not exist")
    model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay)
    timm_model_shape(model)  # refuse what the zoo ViT cannot express before anything is written
    # one folder per (name, weights file): another file for the same name is not the same model
    tag = "" if file is None else "@" + hashlib.sha256(str(Path(file).resolve()).encode()).hexdigest()[:12]
    folder = cache / "timm" / f"{name}{tag}"
    save_for_hf(model, folder)
    return folder


# Hugging Face config key -> zoo net config path: the plain copies of ViT's config (ViViT's,
# VideoMAE's and YOLOS's too)
KEYS = {"num_hidden_layers": "n_layers", "hidden_size": "block.d_model", "num_attention_heads": "block.n_heads",
        "intermediate_size": "block.d_ff", "layer_norm_eps": "block.norm_eps",
        "hidden_dropout_prob": "block.dropout", "attention_probs_dropout_prob": "block.attn_dropout",
        "image_size": "embedder.image_size", "num_channels": "embedder.channels", "num_labels": "head.num_classes"}


def image_processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``preprocessor_config.json`` of an image classifier: the zoo data's resize and normalisation."""
    return {"preprocessor_config.json": image_processor("ViTImageProcessor", net["embedder"]["image_size"], hparams)}


FAMILY = Family(
    hf_class="ViTForImageClassification", config_class="ViTConfig",
    keys=KEYS | {"qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size"},
    activations=HF_ACTIVATIONS, activation_key="hidden_act", shape=config_only(checked_vit_shape),
    state_dict=lambda sd, net: hf_vit_state_dict(sd, net["n_layers"]), example=image, processors=image_processors)

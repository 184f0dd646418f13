"""Hugging Face LLaVA (``LlavaForConditionalGeneration``: CLIP vision tower, 2-layer
projector, Llama language model) -> zoo LLaVA (conf/model/llava.yaml)."""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from zoo.convert.clip import VISION_CONFIG_KEYS, clip_image_processor, clip_vision_state_dict
from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, init_net, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.decoder import ACTIVATIONS
from zoo.convert.family import Family, config_only, tokens
from zoo.convert.llama import LLAMA, llama_shape, llama_state_dict

MODEL_TYPES = ("llava",)  # the config.json model_type values this converter reads
# LlavaConfig's own keys: the image token, the projector and the vision features read (the head's
# tie is the text config's, which LlavaConfig copies here); image_seq_length (the processor's) ignored.
# Its text_config is Llama's (its own declaration, checked by llama_shape), its vision_config CLIP's
# tower, whose vocab_size (LlavaConfig's default vision config has one) a vision tower never reads
LLAVA_KEYS = ConfigKeys(
    reads=frozenset({"text_config", "vision_config", "image_token_index", "image_token_id", "projector_hidden_act",
                     "multimodal_projector_bias", "vision_feature_select_strategy", "vision_feature_layer",
                     "tie_word_embeddings"}),
    ignores=frozenset({"image_seq_length"}))
LLAVA_VISION_KEYS = VISION_CONFIG_KEYS | ConfigKeys(ignores=frozenset({"vocab_size"}))


def clip_vision_shape(v: dict[str, Any], feature_layer: int, strategy: str) -> dict[str, Any]:
    """The values, keyed by their path under the vision tower, that give it a CLIP vision
    config's shape (as a dict); every dependent key is listed, for a resolved config."""
    act = v.get("hidden_act", "quick_gelu")
    if act not in ("quick_gelu", "gelu"):
        raise ValueError(f"CLIP hidden_act={act!r} is not supported")
    if strategy not in ("default", "full"):
        raise ValueError(f"vision_feature_select_strategy={strategy!r}: expected 'default' or 'full'")
    if not isinstance(feature_layer, int):
        raise ValueError(f"vision_feature_layer={feature_layer!r}: only a single layer is supported")
    d, eps = v["hidden_size"], v.get("layer_norm_eps", 1e-5)
    return {
        "image_size": v["image_size"],
        "feature_layer": feature_layer,
        "keep_cls": strategy == "full",
        "model.n_layers": v["num_hidden_layers"],
        "model.embedder.image_size": v["image_size"],
        "model.embedder.patch_size": v["patch_size"],
        "model.embedder.channels": v.get("num_channels", 3),
        "model.embedder.norm_eps": eps,
        "model.block.d_model": d,
        "model.block.n_heads": v["num_attention_heads"],
        "model.block.d_ff": v["intermediate_size"],
        "model.block.norm_eps": eps,
        "model.block.activation": act,
    }


def llava_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=llava`` the shape of
    a Hugging Face LLaVA config (as a dict): a CLIP vision tower, LLaVA's projector, a Llama LM. A
    key of it or of a sub-config that the converter does not implement is refused by name."""
    text, vision = config["text_config"], config["vision_config"]
    check_keys(config, LLAVA_KEYS)
    check_keys(vision, LLAVA_VISION_KEYS, "llava vision_config")
    kinds = (text.get("model_type", "llama"), vision.get("model_type", "clip_vision_model"))
    if kinds != ("llama", "clip_vision_model"):
        raise ValueError(f"LLaVA with text model_type={kinds[0]!r} and vision model_type={kinds[1]!r}: "
                         f"only a llama language model and a clip_vision_model tower are supported")
    projector = (config.get("projector_hidden_act", "gelu"), config.get("multimodal_projector_bias", True))
    if projector != ("gelu", True):
        raise ValueError(f"llava config: projector_hidden_act={projector[0]!r}, multimodal_projector_bias={projector[1]!r}: "
                         f"only LLaVA's projector (Linear + exact GELU + Linear, with biases) is supported")
    d, vocab = text["hidden_size"], text["vocab_size"]
    tower = clip_vision_shape(vision, config.get("vision_feature_layer", -2),
                              config.get("vision_feature_select_strategy", "default"))
    return llama_shape(text) | {f"embedder.vision.{k}": v for k, v in tower.items()} | {
        "embedder.projector": "mlp2x_gelu",
        "embedder.image_token_id": config.get("image_token_id", config.get("image_token_index")),
        "embedder.text.vocab_size": vocab, "embedder.text.d_model": d,
        "embedder.text.max_len": text["max_position_embeddings"],
        "head.vocab_size": vocab,
    }


def _under(sd: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k.removeprefix(prefix): v for k, v in sd.items() if k.startswith(prefix)}


def in_memory_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A checkpoint file's names (transformers 4's, which the Hub's files and ``save_pretrained``
    keep) as transformers 5 names them in memory; names already in that form stay."""
    prefixes = (("language_model.model.", "model.language_model."), ("language_model.lm_head.", "lm_head."),
                ("vision_tower.vision_model.", "model.vision_tower."), ("vision_tower.", "model.vision_tower."),
                ("multi_modal_projector.", "model.multi_modal_projector."))
    renamed = {}
    for name, value in state.items():
        old, new = next(((o, n) for o, n in prefixes if name.startswith(o)), ("", ""))
        renamed[new + name.removeprefix(old)] = value
    return renamed


def llava_state_dict(sd: dict[str, Tensor], config: dict[str, Any]) -> dict[str, Tensor]:
    """Rename a ``LlavaForConditionalGeneration``'s weights (transformers 5 in-memory names) to the zoo's."""
    lm = _under(sd, "model.language_model.") | {"lm_head.weight": sd["lm_head.weight"]}
    state = llama_state_dict(lm, config["text_config"]["num_hidden_layers"], embed="embedder.text.tokens.weight")
    vision = clip_vision_state_dict(_under(sd, "model.vision_tower."), config["vision_config"]["num_hidden_layers"])
    state |= {f"embedder.vision.model.{k}": v for k, v in vision.items()}
    projector = _under(sd, "model.multi_modal_projector.")
    for ours, theirs in [("0", "linear_1"), ("2", "linear_2")]:
        for p in ("weight", "bias"):
            state[f"embedder.projector.{ours}.{p}"] = projector[f"{theirs}.{p}"]
    return state


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo LLaVA (built from conf/model/llava.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    dims = {"vocab_size": cfg["text_config"]["vocab_size"], "image_token_id": hf_model.config.image_token_id}
    net = build_net("llava", shape_overrides(llava_shape(cfg)), dims)
    load_mapped(net, llava_state_dict(hf_model.state_dict(), cfg))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the LLaVA folder at ``path``, the net
    holding its weights). The data's vocabulary and image token id must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = llava_shape(config)
    check_vocab(net_cfg, "embedder.text.vocab_size", shape["embedder.text.vocab_size"], path)
    data_image_id = OmegaConf.select(OmegaConf.create(net_cfg), "embedder.image_token_id")
    if data_image_id != shape["embedder.image_token_id"]:
        raise ValueError(f"the data's <image> token is id {data_image_id} but {path}/config.json has "
                         f"image_token_index={shape['embedder.image_token_id']}")
    return init_net(net_cfg, shape, llava_state_dict(in_memory_names(state), config))


def _n_image(vision: dict[str, Any]) -> int:
    """How many vectors the vision tower ``vision`` (its config) gives an image: the patches (+ CLS)."""
    return (vision["image_size"] // vision["model"]["embedder"]["patch_size"]) ** 2 + int(vision["keep_cls"])


def _prompt(net: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """(tokens (2, L) with the image's placeholders expanded after the first token, images (2, C, S, S))."""
    e, vision = net["embedder"], net["embedder"]["vision"]
    text = tokens(net, "embedder.text.vocab_size", 8)
    text[text == e["image_token_id"]] = (e["image_token_id"] + 1) % e["text"]["vocab_size"]  # text only
    image = torch.full((2, _n_image(vision)), e["image_token_id"])
    channels = vision["model"]["embedder"]["channels"]
    return (torch.cat([text[:, :1], image, text[:, 1:]], 1),
            torch.randn(2, channels, vision["image_size"], vision["image_size"]))


def _strategy(vision: dict[str, Any]) -> str:
    """``vision_feature_select_strategy``: ``full`` keeps the CLS vector, ``default`` drops it."""
    return "full" if vision["keep_cls"] else "default"


def _extra(net: dict[str, Any]) -> dict[str, Any]:
    """LLaVA's sub-config kinds, rotary table, feature selection and image length."""
    vision = net["embedder"]["vision"]
    return {"text_config.model_type": "llama", "vision_config.model_type": "clip_vision_model",
            "text_config.rope_parameters": LLAMA.config_extra(net)["rope_parameters"],
            "vision_feature_select_strategy": _strategy(vision), "image_seq_length": _n_image(vision)}


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The CLIP image processor (the zoo answer's normalisation) and LlavaProcessor's config."""
    vision = net["embedder"]["vision"]
    return {"preprocessor_config.json": clip_image_processor(vision["image_size"]),
            "processor_config.json": {
                "processor_class": "LlavaProcessor", "image_token": "<image>",
                "patch_size": vision["model"]["embedder"]["patch_size"], "num_additional_image_tokens": 1,
                "vision_feature_select_strategy": _strategy(vision)}}


FAMILY = Family(
    hf_class="LlavaForConditionalGeneration", config_class="LlavaConfig",
    keys=LLAMA.export_keys("text_config.") | {
        "text_config.vocab_size": "embedder.text.vocab_size", "tie_word_embeddings": "tie_embeddings",
        "image_token_index": "embedder.image_token_id", "vision_feature_layer": "embedder.vision.feature_layer",
        **{f"vision_config.{k}": f"embedder.vision.{v}" for k, v in {
            "hidden_size": "model.block.d_model", "intermediate_size": "model.block.d_ff",
            "num_hidden_layers": "model.n_layers", "num_attention_heads": "model.block.n_heads",
            "image_size": "image_size", "patch_size": "model.embedder.patch_size",
            "num_channels": "model.embedder.channels", "layer_norm_eps": "model.block.norm_eps",
            "hidden_act": "model.block.activation"}.items()}},
    activations=ACTIVATIONS, activation_key="text_config.hidden_act",
    shape=config_only(llava_shape),
    state_dict=lambda sd, net: llava_state_dict(sd, {
        "text_config": {"num_hidden_layers": net["n_layers"]},
        "vision_config": {"num_hidden_layers": net["embedder"]["vision"]["model"]["n_layers"]}}),
    example=_prompt, outputs=lambda hf, x: hf(input_ids=x[0], pixel_values=x[1]).logits,
    ours=lambda net, x: net(x[0], images=x[1]), extra=_extra, ids_prefix="text_config.",
    processors=_processors, chat_template=True)

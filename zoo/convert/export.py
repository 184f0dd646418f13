"""A zoo network back to a Hugging Face folder that ``transformers`` loads (``from_pretrained``).

No converter is written twice. Each family's import mapping (``zoo/convert/<family>.py``:
Hugging Face names -> zoo names, with splits, transposes and renames) only moves numbers, so it
is run once on a *probe*: a Hugging Face state dict whose every element holds its own index.
What comes out tells, for each zoo weight, which Hugging Face elements it was read from; the
export writes the zoo's values back there. The Hugging Face config comes from the zoo net's
config through each family's table of (Hugging Face key, zoo key) below, and is checked by the
family's own import shape (every value the import would set must be the net's). Last, the
exported model must give the zoo net's outputs on an example input, or nothing is written: a
zoo net that uses something the Hugging Face class cannot express is refused, with the
difference. An encoder-decoder's (T5, Whisper) or LLaVA's example is a tuple of inputs.

A checkpoint's ``model.converter`` names its family. A ViTDet checkpoint's does not name
``VitDetModel``: that is the backbone, and a zoo ViTDet is a classifier (a headless one is exported
by naming the class, ``hf_class``). A net no ``transformers`` class holds (the original
Transformer, a ViTDet classifier) is written in the zoo's own format instead: ``model.safetensors``
and its net config (:func:`write_zoo`, :func:`read_zoo`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from zoo.convert import (big_bird, bert, gpt2, gpt_neo, llama, llava, mistral, modernbert, t5, videomae, vit, vitdet,
                         vivit, whisper, yolos)
from zoo.nn.masks import tile
from zoo.nn.tower import without_unread

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    """What exporting one family needs."""

    hf_class: str  # transformers class name, e.g. "GPT2LMHeadModel"
    config_class: str  # e.g. "GPT2Config"
    converter: str | None  # the model.converter that marks a checkpoint of this family (None: none does)
    keys: dict[str, str]  # Hugging Face config key (dotted into a sub-config: text_config.x) -> zoo net config path
    activations: dict[str, str]  # Hugging Face activation name -> zoo's (the import's table); {}: in ``extra``
    activation_key: str | None  # the Hugging Face config key of the activation
    shape: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]  # (the import's config, net) -> zoo shape
    state_dict: Callable[[dict[str, Tensor], dict[str, Any]], dict[str, Tensor]]  # the import's weight map
    example: Callable[[dict[str, Any]], Tensor | tuple[Tensor, ...]]  # an input (or inputs) for the check
    outputs: Callable[[nn.Module, Any], Tensor]  # the Hugging Face model's outputs
    extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda net: {}  # keys that are not plain copies
    prepare: Callable[[nn.Module, dict[str, Any]], None] = lambda hf, net: None  # e.g. untie a head
    computed: tuple[str, ...] = ()  # zoo weights Hugging Face computes itself (not among its weights)
    ours: Callable[[nn.Module, Any], Tensor] = lambda net, x: net(*x) if isinstance(x, tuple) else net(x)  # the zoo's
    ids_prefix: str = ""  # where the config keeps the special token ids (LLaVA: its text_config.)


def _at(net: dict[str, Any], path: str) -> Any:
    """The value at ``path`` (dotted) of the net config ``net``."""
    return OmegaConf.select(OmegaConf.create(net), path)


def _tokens(net: dict[str, Any], vocab: str = "embedder.vocab_size", length: int = 16) -> Tensor:
    """(2, T) random ids below the vocabulary at ``vocab``, T = ``length`` cut to the context."""
    return torch.randint(0, _at(net, vocab), (2, min(length, net["context"])))


def _logits(hf: nn.Module, x: Tensor) -> Tensor:
    return hf(x).logits


def _config_only(shape: Callable[[dict[str, Any]], dict[str, Any]]):
    """A family's import shape that reads only the Hugging Face config."""
    return lambda config, net: shape(config)


def _t5_feed_forward(net: dict[str, Any]) -> str:
    """T5's ``feed_forward_proj`` of the zoo net (``gated-gelu`` means the tanh GELU in T5Config,
    a plain ``gelu`` the exact one, so a gated exact GELU has no name)."""
    act, gated = net["block"]["activation"], net["block"]["gated"]
    names = ({"relu": "relu", "gelu_tanh": "gelu", "silu": "silu"} if gated else
             {"relu": "relu", "gelu_tanh": "gelu_new", "gelu": "gelu", "silu": "silu"})
    if act not in names:
        raise ValueError(f"block.activation={act!r} (gated={gated}) has no T5ForConditionalGeneration equivalent "
                         f"(it has {sorted(names)})")
    return ("gated-" if gated else "") + names[act]


def _untie_t5(hf: nn.Module, net: dict[str, Any]) -> None:
    """transformers 5 ties T5's head to the embedding whatever the config says: v1.1 (a head of
    its own) needs its own tensor, which ``from_pretrained`` keeps when the two differ."""
    if not net["tie_embeddings"]:
        hf.lm_head.weight = nn.Parameter(hf.lm_head.weight.detach().clone())


def _layer_masks(net: dict[str, Any], kinds: dict[str, str], windowed: str,
                 hf_class: str) -> tuple[list[str], int | None]:
    """(each layer's kind, the one window) of the zoo net's masks (a PerLayer pattern tiles the
    layers), ``kinds``: mask class -> the Hugging Face name of the layer kind; ``windowed``: the
    class whose ``window`` is the window. Other masks, or two windows, are refused."""
    mask = net["mask"]
    masks = mask["masks"] if mask["_target_"] == "zoo.nn.masks.PerLayer" else [mask]
    unknown = sorted({m["_target_"] for m in masks} - set(kinds))
    windows = {m["window"] for m in masks if m["_target_"] == windowed}
    if unknown or len(windows) > 1:
        raise ValueError(f"{hf_class} has {sorted(kinds)} layers with one window: this net has masks "
                         f"{unknown or sorted(windows)}")
    return [kinds[masks[i % len(masks)]["_target_"]] for i in range(net["n_layers"])], next(iter(windows), None)


def _neo_attention(net: dict[str, Any]) -> dict[str, Any]:
    """GPT-Neo's ``attention_types`` (one entry per layer) and ``window_size`` of the zoo net's masks."""
    layers, window = _layer_masks(net, {"zoo.nn.masks.CausalMask": "global", "zoo.nn.masks.LocalMask": "local"},
                                  "zoo.nn.masks.LocalMask", "GPTNeoForCausalLM")
    return {"attention_types": [[[kind], 1] for kind in layers], "window_size": window or 256}


def _vitdet_layers(net: dict[str, Any]) -> dict[str, Any]:
    """ViTDet's ``window_block_indices`` and ``window_size`` of the zoo net's per-layer masks, and its
    ``mlp_ratio``."""
    layers, window = _layer_masks(net, {"zoo.nn.masks.GridWindowMask": "window", "zoo.nn.masks.NoMask": "global"},
                                  "zoo.nn.masks.GridWindowMask", "VitDetModel")
    d, d_ff = net["block"]["d_model"], net["block"]["d_ff"]
    if d_ff % d:
        raise ValueError(f"VitDetModel's MLP is a whole mlp_ratio x hidden_size: block.d_ff={d_ff} is not a "
                         f"multiple of block.d_model={d}")
    return {"window_block_indices": [i for i, kind in enumerate(layers) if kind == "window"],
            "window_size": window or 0, "mlp_ratio": d_ff // d}


def _modernbert_layers(net: dict[str, Any]) -> dict[str, Any]:
    """ModernBERT's ``layer_types``, ``local_attention`` and per-kind ``rope_parameters`` of the zoo
    net's per-layer masks and rotary bases (one base per kind of layer), and its head's activation."""
    kinds = {"zoo.nn.masks.NoMask": "full_attention", "zoo.nn.masks.LocalMask": "sliding_attention"}
    layers, window = _layer_masks(net, kinds, "zoo.nn.masks.LocalMask", "ModernBertForMaskedLM")
    base = net["rotary_base"]
    bases = tile(base, len(layers), "rotary base") if isinstance(base, list) else [base] * len(layers)
    theta: dict[str, float] = {}
    for kind, layer_base in zip(layers, bases):
        if theta.setdefault(kind, layer_base) != layer_base:
            raise ValueError(f"ModernBertForMaskedLM has one rotary base per kind of layer: this net's {kind} layers "
                             f"rotate at {theta[kind]} and {layer_base}")
    default = {"full_attention": 160000.0, "sliding_attention": 10000.0}
    head_act = [hf for hf, zoo in bert.ACTIVATIONS.items() if zoo == net["head"]["activation"]]
    # ModernBERT's default special ids are its 50k-token vocabulary's: export() sets the checkpoint's own
    ids = dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"))
    return ids | {"layer_types": layers, "local_attention": window or 128, "classifier_activation": head_act[0],
            "rope_parameters": {kind: {"rope_type": "default", "rope_theta": theta.get(kind, default[kind])}
                                for kind in default}}


def _image(net: dict[str, Any]) -> Tensor:
    """(2, C, S, S) random images of the net's embedder's size."""
    e = net["embedder"]
    return torch.randn(2, e["channels"], e["image_size"], e["image_size"])


def _video(net: dict[str, Any]) -> Tensor:
    """(2, T, C, S, S) random clips (frames first, as the zoo's and Hugging Face's video models read them)."""
    e = net["embedder"]
    return torch.randn(2, e["frames"], e["channels"], e["image_size"], e["image_size"])


def _yolos_outputs(hf: nn.Module, x: Tensor) -> Tensor:
    """(B, Q, num_classes + 1 + 4): a detector's class logits and boxes side by side."""
    out = hf(x)
    return torch.cat([out.logits, out.pred_boxes], -1)


BERT_KEYS = {"num_hidden_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
             "num_attention_heads": "block.n_heads", "intermediate_size": "block.d_ff",
             "layer_norm_eps": "block.norm_eps", "vocab_size": "embedder.vocab_size",
             "type_vocab_size": "embedder.n_segments", "hidden_dropout_prob": "block.dropout",
             "attention_probs_dropout_prob": "block.attn_dropout"}
LLAMA_KEYS = {"num_hidden_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
              "num_attention_heads": "block.n_heads", "num_key_value_heads": "block.n_kv_heads",
              "intermediate_size": "block.d_ff", "rms_norm_eps": "block.norm_eps", "vocab_size": "embedder.vocab_size",
              "tie_word_embeddings": "tie_embeddings", "attention_dropout": "block.attn_dropout"}
VIT_KEYS = {"num_hidden_layers": "n_layers", "hidden_size": "block.d_model", "num_attention_heads": "block.n_heads",
            "intermediate_size": "block.d_ff", "layer_norm_eps": "block.norm_eps",
            "hidden_dropout_prob": "block.dropout", "attention_probs_dropout_prob": "block.attn_dropout",
            "image_size": "embedder.image_size", "num_channels": "embedder.channels", "num_labels": "head.num_classes"}
VIDEO_KEYS = VIT_KEYS | {"num_frames": "embedder.frames"}


def _llama_weights(sd: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
    """The Llama import's map of a ``LlamaForCausalLM`` state dict (Mistral's names are the same)."""
    return llama.llama_state_dict({k.removeprefix("model."): v for k, v in sd.items()}, net["n_layers"])


def _rope(net: dict[str, Any]) -> dict[str, Any]:
    """The plain rotary table of the net's base (transformers 5 keeps it in ``rope_parameters``)."""
    return {"rope_parameters": {"rope_type": "default", "rope_theta": net["rotary_base"]}}


def _n_image(vision: dict[str, Any]) -> int:
    """How many vectors the vision tower ``vision`` (its config) gives an image: the patches (+ CLS)."""
    return (vision["image_size"] // vision["model"]["embedder"]["patch_size"]) ** 2 + int(vision["keep_cls"])


def _llava_prompt(net: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """(tokens (2, L) with the image's placeholders expanded after the first token, images (2, C, S, S))."""
    e, vision = net["embedder"], net["embedder"]["vision"]
    n_image = _n_image(vision)
    text = _tokens(net, "embedder.text.vocab_size", 8)
    text[text == e["image_token_id"]] = (e["image_token_id"] + 1) % e["text"]["vocab_size"]  # text only
    image = torch.full((2, n_image), e["image_token_id"])
    tokens = torch.cat([text[:, :1], image, text[:, 1:]], 1)
    channels = vision["model"]["embedder"]["channels"]
    return tokens, torch.randn(2, channels, vision["image_size"], vision["image_size"])


def _llava_extra(net: dict[str, Any]) -> dict[str, Any]:
    """LLaVA's sub-config kinds, rotary table, feature selection and image length."""
    vision = net["embedder"]["vision"]
    return {"text_config.model_type": "llama", "vision_config.model_type": "clip_vision_model",
            "text_config.rope_parameters": _rope(net)["rope_parameters"],
            "vision_feature_select_strategy": "full" if vision["keep_cls"] else "default",
            "image_seq_length": _n_image(vision)}


_FAMILIES = [
    Family("GPT2LMHeadModel", "GPT2Config", "zoo.convert.gpt2.pretrained",
           {"n_layer": "n_layers", "n_positions": "context", "n_embd": "block.d_model", "n_head": "block.n_heads",
            "n_inner": "block.d_ff", "layer_norm_epsilon": "block.norm_eps", "vocab_size": "embedder.vocab_size",
            "tie_word_embeddings": "tie_embeddings", "resid_pdrop": "block.dropout", "attn_pdrop": "block.attn_dropout",
            "embd_pdrop": "embedder.dropout"},
           gpt2.ACTIVATIONS, "activation_function", _config_only(gpt2.gpt2_shape),
           lambda sd, net: gpt2.gpt2_state_dict(sd, net["n_layers"]), _tokens, _logits),
    Family("BertForMaskedLM", "BertConfig", "zoo.convert.bert.pretrained", BERT_KEYS,
           bert.ACTIVATIONS, "hidden_act", _config_only(bert.bert_shape),
           lambda sd, net: bert.bert_state_dict(sd, net["n_layers"]), _tokens, _logits),
    Family("LlamaForCausalLM", "LlamaConfig", "zoo.convert.llama.pretrained", LLAMA_KEYS,
           {"silu": "silu", "gelu": "gelu"}, "hidden_act", _config_only(llama.llama_lm_shape), _llama_weights,
           _tokens, _logits, extra=_rope),
    Family("ViTForImageClassification", "ViTConfig", "zoo.convert.vit.pretrained",
           VIT_KEYS | {"qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size"},
           vit.HF_ACTIVATIONS, "hidden_act", _config_only(vit.vit_shape),
           lambda sd, net: vit.hf_vit_state_dict(sd, net["n_layers"]), _image, _logits),
    Family("T5ForConditionalGeneration", "T5Config", "zoo.convert.t5.pretrained",
           {"num_layers": "n_encoder_layers", "num_decoder_layers": "n_decoder_layers", "n_positions": "context",
            "d_model": "block.d_model", "num_heads": "block.n_heads", "d_kv": "block.head_dim", "d_ff": "block.d_ff",
            "layer_norm_epsilon": "block.norm_eps", "dropout_rate": "block.dropout", "vocab_size": "head.vocab_size",
            "relative_attention_num_buckets": "encoder_bias.num_buckets",
            "relative_attention_max_distance": "encoder_bias.max_distance"},
           {}, None, lambda config, net: t5.t5_shape(config, net["tie_embeddings"]),
           lambda sd, net: t5.t5_state_dict(sd, net["n_encoder_layers"], net["n_decoder_layers"], net["block"]["gated"],
                                            net["tie_embeddings"]),
           lambda net: (_tokens(net, "head.vocab_size"), _tokens(net, "head.vocab_size", 12)),
           lambda hf, x: hf(input_ids=x[0], decoder_input_ids=x[1]).logits,
           extra=lambda net: {"feed_forward_proj": _t5_feed_forward(net),
                              "scale_decoder_outputs": net["head"]["scale"] != 1.0},
           prepare=_untie_t5),
    Family("WhisperForConditionalGeneration", "WhisperConfig", "zoo.convert.whisper.pretrained",
           {"encoder_layers": "n_encoder_layers", "decoder_layers": "n_decoder_layers", "d_model": "block.d_model",
            "encoder_attention_heads": "block.n_heads", "decoder_attention_heads": "block.n_heads",
            "encoder_ffn_dim": "block.d_ff", "decoder_ffn_dim": "block.d_ff", "num_mel_bins": "encoder_embedder.n_mels",
            "max_source_positions": "encoder_embedder.max_len", "max_target_positions": "context",
            "vocab_size": "head.vocab_size", "dropout": "block.dropout", "attention_dropout": "block.attn_dropout",
            "activation_dropout": "block.ffn_dropout"},
           {"gelu": "gelu", "relu": "relu", "silu": "silu"}, "activation_function", _config_only(whisper.whisper_shape),
           lambda sd, net: whisper.whisper_state_dict(sd, net["n_encoder_layers"], net["n_decoder_layers"]),
           # the encoder's two convolutions halve 2 x max_source_positions frames to its positions
           lambda net: (torch.randn(2, net["encoder_embedder"]["n_mels"], 2 * net["encoder_embedder"]["max_len"]),
                        _tokens(net, "head.vocab_size", 12)),
           lambda hf, x: hf(input_features=x[0], decoder_input_ids=x[1]).logits,
           # Whisper's default special ids are the 51k-token vocabulary's (the config requires a start id):
           # export() sets the checkpoint's own
           extra=lambda net: {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None,
                              "decoder_start_token_id": 0, "begin_suppress_tokens": None}),
    Family("MistralForCausalLM", "MistralConfig", "zoo.convert.mistral.pretrained",
           LLAMA_KEYS | {"sliding_window": "mask.window"}, {"silu": "silu", "gelu": "gelu"}, "hidden_act",
           _config_only(lambda c: llama.llama_lm_shape(c) | mistral.window_of(c)), _llama_weights, _tokens, _logits,
           extra=_rope),
    Family("BigBirdForMaskedLM", "BigBirdConfig", "zoo.convert.big_bird.pretrained",
           BERT_KEYS | {"block_size": "mask.block_size", "num_random_blocks": "mask.n_random"},
           bert.ACTIVATIONS, "hidden_act", _config_only(big_bird.big_bird_shape),
           lambda sd, net: bert.bert_state_dict(sd, net["n_layers"]),
           # long enough for block-sparse attention (Hugging Face falls back to full attention below)
           lambda net: _tokens(net, length=(6 + 2 * net["mask"]["n_random"]) * net["mask"]["block_size"]), _logits,
           extra=lambda net: {"attention_type": "block_sparse"}),
    Family("ModernBertForMaskedLM", "ModernBertConfig", "zoo.convert.modernbert.pretrained",
           {"num_hidden_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
            "num_attention_heads": "block.n_heads", "intermediate_size": "block.d_ff", "norm_eps": "block.norm_eps",
            "norm_bias": "block.norm_bias", "attention_bias": "block.bias_q", "mlp_bias": "block.bias_ffn",
            "vocab_size": "embedder.vocab_size", "tie_word_embeddings": "tie_embeddings", "classifier_bias": "head.bias",
            "attention_dropout": "block.attn_dropout", "mlp_dropout": "block.ffn_dropout",
            "embedding_dropout": "embedder.dropout"},
           bert.ACTIVATIONS, "hidden_activation", _config_only(modernbert.modernbert_shape),
           lambda sd, net: modernbert.modernbert_state_dict(sd, net["n_layers"]),
           lambda net: _tokens(net, length=64), _logits, extra=_modernbert_layers),
    Family("GPTNeoForCausalLM", "GPTNeoConfig", "zoo.convert.gpt_neo.pretrained",
           {"num_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
            "num_heads": "block.n_heads", "intermediate_size": "block.d_ff", "layer_norm_epsilon": "block.norm_eps",
            "vocab_size": "embedder.vocab_size", "tie_word_embeddings": "tie_embeddings",
            "resid_dropout": "block.dropout",
            "attention_dropout": "block.attn_dropout", "embed_dropout": "embedder.dropout"},
           {"gelu_new": "gelu_tanh"}, "activation_function",
           _config_only(gpt_neo.gpt_neo_shape),
           lambda sd, net: gpt_neo.gpt_neo_state_dict(sd, net["n_layers"]),
           lambda net: _tokens(net, length=64), _logits, extra=_neo_attention),
    Family("VivitForVideoClassification", "VivitConfig", "zoo.convert.vivit.pretrained",
           VIDEO_KEYS | {"qkv_bias": "block.bias_q"}, vivit.ACTIVATIONS, "hidden_act", _config_only(vivit.vivit_shape),
           lambda sd, net: vivit.vivit_state_dict(sd, net["n_layers"]), _video, _logits,
           extra=lambda net: {"tubelet_size": [net["embedder"]["tubelet_size"], *[net["embedder"]["patch_size"]] * 2]}),
    Family("VideoMAEForVideoClassification", "VideoMAEConfig", "zoo.convert.videomae.pretrained",
           VIDEO_KEYS | {"qv_bias": "block.bias_q", "tubelet_size": "embedder.tubelet_size",
                         "patch_size": "embedder.patch_size"},
           vivit.ACTIVATIONS, "hidden_act", _config_only(videomae.videomae_shape),
           lambda sd, net: {k: v for k, v in videomae.videomae_state_dict(sd, net["n_layers"], torch.empty(0)).items()
                            if k != "embedder.positions.weight"},
           _video, _logits, extra=lambda net: {"use_mean_pooling": net["head"]["pool"] == "mean"},
           computed=("embedder.positions.weight",)),  # the fixed sinusoid table, recomputed by Hugging Face
    Family("YolosForObjectDetection", "YolosConfig", "zoo.convert.yolos.pretrained",
           VIT_KEYS | {"qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size",
                       "num_detection_tokens": "embedder.n_detections"},
           vit.HF_ACTIVATIONS, "hidden_act", _config_only(yolos.yolos_shape),
           lambda sd, net: yolos.yolos_state_dict(sd, net["n_layers"]), _image, _yolos_outputs,
           extra=lambda net: {"use_mid_position_embeddings": False, "image_size": [net["embedder"]["image_size"]] * 2},
           ours=lambda net, x: torch.cat(net(x), -1)),  # Detections (logits, boxes)
    Family("VitDetModel", "VitDetConfig", None,  # the backbone: a zoo ViTDet classifier has no class (module doc)
           {"num_hidden_layers": "n_layers", "hidden_size": "block.d_model", "num_attention_heads": "block.n_heads",
            "layer_norm_eps": "block.norm_eps", "qkv_bias": "block.bias_q", "patch_size": "embedder.patch_size",
            "image_size": "embedder.image_size", "pretrain_image_size": "embedder.image_size",
            "num_channels": "embedder.channels", "hidden_dropout_prob": "block.dropout"},
           bert.ACTIVATIONS, "hidden_act",
           # the backbone: no head (a zoo ViTDet classifier's head has no place in VitDetModel)
           _config_only(lambda c: {k: v for k, v in vitdet.vitdet_shape(c).items() if not k.startswith("head.")}),
           lambda sd, net: vitdet.vitdet_state_dict(sd, net["n_layers"]), _image,
           lambda hf, x: hf(x).last_hidden_state.flatten(2).transpose(1, 2),  # (B, D, H, W) -> the zoo's (B, N, D)
           extra=lambda net: _vitdet_layers(net) | {"use_relative_position_embeddings": False,
                                                     "use_absolute_position_embeddings": True}),
    Family("LlavaForConditionalGeneration", "LlavaConfig", "zoo.convert.llava.pretrained",
           {f"text_config.{k}": v for k, v in LLAMA_KEYS.items()} | {
               "text_config.vocab_size": "embedder.text.vocab_size", "tie_word_embeddings": "tie_embeddings",
               "image_token_index": "embedder.image_token_id", "vision_feature_layer": "embedder.vision.feature_layer",
               **{f"vision_config.{k}": f"embedder.vision.{v}" for k, v in {
                   "hidden_size": "model.block.d_model", "intermediate_size": "model.block.d_ff",
                   "num_hidden_layers": "model.n_layers", "num_attention_heads": "model.block.n_heads",
                   "image_size": "image_size", "patch_size": "model.embedder.patch_size",
                   "num_channels": "model.embedder.channels", "layer_norm_eps": "model.block.norm_eps",
                   "hidden_act": "model.block.activation"}.items()}},
           {"silu": "silu", "gelu": "gelu"}, "text_config.hidden_act", _config_only(llava.llava_shape),
           lambda sd, net: llava.llava_state_dict(sd, {
               "text_config": {"num_hidden_layers": net["n_layers"]},
               "vision_config": {"num_hidden_layers": net["embedder"]["vision"]["model"]["n_layers"]}}),
           _llava_prompt, lambda hf, x: hf(input_ids=x[0], pixel_values=x[1]).logits,
           extra=_llava_extra, ours=lambda net, x: net(x[0], images=x[1]), ids_prefix="text_config."),
]
FAMILIES: dict[str, Family] = {f.hf_class: f for f in _FAMILIES}  # by transformers class
BY_CONVERTER: dict[str, str] = {f.converter: f.hf_class for f in _FAMILIES if f.converter}  # model.converter -> class


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """Config keys, dotted into sub-configs (``text_config.hidden_size``), as nested dicts."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out


def _head_size(net: dict[str, Any]) -> dict[str, Any]:
    """``net`` with its Block's ``head_dim`` stated (None means d_model / heads: T5's ``d_kv``
    needs the number)."""
    block = net.get("block")
    if block is None or block.get("head_dim") is not None:
        return net
    return net | {"block": block | {"head_dim": block["d_model"] // block["n_heads"]}}


def hf_config(family: Family, net: dict[str, Any], settings: dict[str, Any] | None = None):
    """The Hugging Face config of the zoo net config ``net`` (with the run's own ``settings``,
    e.g. ``{"eos_token_id": 2}``), checked against the import's shape."""
    import transformers

    net = _head_size(net)
    values = {key: _at(net, path) for key, path in family.keys.items()}
    if family.activation_key is not None:
        act = _at(net, "block.activation")
        names = [hf for hf, zoo in family.activations.items() if zoo == act]
        if not names:
            raise ValueError(f"block.activation={act!r} has no {family.hf_class} equivalent "
                             f"(it has {sorted(set(family.activations.values()))})")
        values[family.activation_key] = names[0]
    config = getattr(transformers, family.config_class)(**_nested(values | family.extra(net) | (settings or {})))
    shape = family.shape(config.to_dict(), net)
    differ = {k: (v, _at(net, k)) for k, v in shape.items() if _at(net, k) != v}
    if differ:
        raise ValueError(f"{family.hf_class} cannot express this net: (Hugging Face, zoo) values differ: {differ}")
    return config


def _unique(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``state`` with the keys of tied weights (one storage under two names) kept once."""
    seen, out = set(), {}
    for key, value in state.items():
        if value.data_ptr() not in seen:
            seen.add(value.data_ptr())
            out[key] = value
    return out


def places(net: nn.Module, net_cfg: dict[str, Any], family: Family,
           hf: nn.Module) -> tuple[dict[str, Tensor], list[int], dict[str, Tensor]]:
    """Where each zoo weight goes in ``hf``: (``hf``'s weights, tied ones once; their offsets in
    the weights laid end to end; zoo weight name -> the indices, in that flat, of the elements
    it is read from, in its own shape). The import mapping runs on a probe: every element of the
    Hugging Face weights holds its own index (exact in float64)."""
    target = _unique(hf.state_dict())
    sizes = [v.numel() for v in target.values()]
    offsets = torch.tensor([0, *sizes]).cumsum(0).tolist()
    probe = {k: torch.arange(offsets[i], offsets[i + 1], dtype=torch.float64).view(v.shape)
             for i, (k, v) in enumerate(target.items())}
    # Weights of layers the zoo net does not build (a vision tower's layers after the one it reads)
    # stay at their initialisation: they do not change the outputs.
    return target, offsets, without_unread(net, family.state_dict(probe, net_cfg))


@torch.no_grad()
def to_hf(net: nn.Module, net_cfg: dict[str, Any], hf_class: str,
          settings: dict[str, Any] | None = None) -> tuple[nn.Module, list[str]]:
    """(a ``transformers`` ``hf_class`` model in eval mode holding ``net``'s weights, checked on an
    example; the names of its weights the zoo net has no counterpart for, left at their
    initialisation, e.g. BERT's pooler). ``settings``: the run's own config keys (special ids, labels)."""
    import transformers

    if hf_class not in FAMILIES:
        raise ValueError(f"no export to {hf_class!r}: export writes {sorted(FAMILIES)}")
    family = FAMILIES[hf_class]
    hf = getattr(transformers, family.hf_class)(hf_config(family, net_cfg, settings)).eval()
    family.prepare(hf, net_cfg)
    target, offsets, where = places(net, net_cfg, family, hf)
    flat = torch.cat([v.detach().flatten().to(torch.float64) for v in target.values()])
    written = torch.zeros_like(flat, dtype=torch.bool)
    own = net.state_dict()
    for name, index in where.items():
        index = index.flatten()
        if name not in own or index.numel() != own[name].numel() or not torch.equal(index, index.round()):
            raise ValueError(f"{family.hf_class}: the import's mapping of {name} is not a move of weights")
        flat[index.long()] = own[name].flatten().to(torch.float64)
        written[index.long()] = True
    missing = sorted(set(own) - set(where) - set(family.computed)
                     - {k for k in own if k.endswith(("rope.cos", "rope.sin"))})
    if missing:
        raise ValueError(f"{family.hf_class} has no place for the zoo weights {missing}")
    state = {k: flat[offsets[i]: offsets[i + 1]].view(v.shape).to(v.dtype) for i, (k, v) in enumerate(target.items())}
    hf.load_state_dict(state, strict=False)
    untouched = [k for i, k in enumerate(target) if not written[offsets[i]: offsets[i + 1]].any()]
    x = family.example(net_cfg)
    ours = family.ours(net.eval(), x)
    theirs = family.outputs(hf, x)
    if not torch.isfinite(ours).all():
        bad = sorted(k for k, v in own.items() if v.is_floating_point() and not torch.isfinite(v).all())
        raise ValueError(f"the zoo net's outputs are not finite (NaN or inf), nothing to export: its non-finite "
                         f"weights are {bad or 'none (the overflow is in the computation)'}")
    diff = (ours - theirs).abs().max().item()
    if not diff <= 1e-4 * (1 + theirs.abs().max().item()):  # a NaN difference fails too
        raise ValueError(f"the exported {family.hf_class} gives outputs {diff:.3g} away from the zoo net's: the net "
                         f"uses something {family.hf_class} does not express")
    return hf, untouched


ZOO_CONFIG = "zoo_config.json"  # the net config beside the weights of a zoo-format export
ADAPTER_DIR = "adapter"  # an unmerged LoRA run's peft adapter folder, inside the export of its base


def _write_adapters(net: nn.Module, hparams: dict[str, Any], family: Family, hf: nn.Module,
                    adapted: tuple[Any, Tensor, dict[str, Any]], folder: Path, base: Path) -> None:
    """The LoRA adapters ``adapted`` took out of ``net`` (its example input, the adapted net's
    outputs on it, the adapters) as a peft folder against ``hf``, the exported base at ``base``:
    checked like the export itself, the adapted Hugging Face model giving the adapted zoo net's
    outputs, or nothing is written."""
    from zoo.convert import adapters

    x, expected, taken = adapted
    target, offsets, where = places(net, hparams.net, family, hf)

    def check(model: nn.Module) -> None:
        theirs = family.outputs(model, x)
        diff = (expected - theirs).abs().max().item()
        if not diff <= 1e-4 * (1 + theirs.abs().max().item()):
            raise ValueError(f"the exported LoRA adapters give outputs {diff:.3g} away from the zoo net's")

    adapters.write(adapters.hf_adapters(taken, hf, target, offsets, where), hf, folder, base,
                   hparams.lora.get("dropout", 0.0), check)


def write_zoo(net: nn.Module, net_cfg: dict[str, Any], out: Path) -> None:
    """The zoo's own format, for a net no ``transformers`` class holds: ``model.safetensors`` (its
    state dict, tied weights stored once) and ``zoo_config.json`` (its resolved net config)."""
    from safetensors.torch import save_model

    out.mkdir(parents=True, exist_ok=True)
    save_model(net, str(out / "model.safetensors"))
    (out / ZOO_CONFIG).write_text(json.dumps(net_cfg, indent=1))


def read_zoo(folder: str | Path) -> nn.Module:
    """The net a :func:`write_zoo` folder holds, in eval mode. Its config is refused if it names
    a class outside :mod:`zoo.registry` (it is a user's file), before anything is built."""
    import hydra
    from safetensors.torch import load_model

    from zoo.checkpoint import check_names

    folder = Path(folder)
    for name in (ZOO_CONFIG, "model.safetensors"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} is missing: {folder} is not a zoo export folder")
    net_cfg = json.loads((folder / ZOO_CONFIG).read_text())
    check_names({"hyper_parameters": {"net": net_cfg}}, folder / ZOO_CONFIG)
    net = hydra.utils.instantiate(net_cfg)
    load_model(net, str(folder / "model.safetensors"))
    return net.eval()


def _image_processor(kind: str, size: int, hparams: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face image processor's config (``kind``, e.g. ``ViTImageProcessor``) that reads an
    image as the zoo's data does: resized (bicubic) to ``size`` square, pixels / 255, then
    normalised by the run's per-channel mean and std (the zoo's default 0.5 where the run has none)."""
    from zoo.data.images import MEAN, STD

    mean, std = hparams.get("pixel_mean") or [MEAN] * 3, hparams.get("pixel_std") or [STD] * 3
    return {"image_processor_type": kind, "do_resize": True, "size": {"height": size, "width": size},
            "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": list(mean), "image_std": list(std)}


def _processor_files(hf_class: str, net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The processor files (file name -> JSON) the client of ``hf_class`` reads an input with."""
    e = net.get("embedder", {})
    if hf_class in ("ViTForImageClassification", "VitDetModel"):
        return {"preprocessor_config.json": _image_processor("ViTImageProcessor", e["image_size"], hparams)}
    if hf_class == "YolosForObjectDetection":
        # the zoo letterboxes into its square (longer side scaled, padding at the bottom and right)
        config = _image_processor("YolosImageProcessor", e["image_size"], hparams)
        return {"preprocessor_config.json": config | {
            "size": {"shortest_edge": e["image_size"], "longest_edge": e["image_size"]}, "do_pad": True,
            "pad_size": {"height": e["image_size"], "width": e["image_size"]}, "format": "coco_detection"}}
    if hf_class in ("VivitForVideoClassification", "VideoMAEForVideoClassification"):
        kind = "VivitImageProcessor" if hf_class.startswith("Vivit") else "VideoMAEImageProcessor"
        # the zoo's clips: centre-cropped square, resized bilinear, pixel / 255 (ViViT's own processor's
        # default offset maps them to [-1, 1])
        config = _image_processor(kind, e["image_size"], hparams) | {"do_center_crop": False, "resample": 2}
        # The video-classification pipeline reads with a video processor, built from this file unless
        # video_preprocessor_config.json names one; ViViT's (VivitVideoProcessor) always offsets,
        # whatever its config says, so the video file names VideoMAE's, which reads pixel / 255
        video = {k: v for k, v in config.items() if k != "image_processor_type"}
        return {"preprocessor_config.json": config | {"offset": False},
                "video_preprocessor_config.json": video | {"video_processor_type": "VideoMAEVideoProcessor",
                                                           "do_sample_frames": False}}
    if hf_class == "WhisperForConditionalGeneration":
        from zoo.data.audio import HOP_LENGTH, SAMPLE_RATE

        e = net["encoder_embedder"]
        window = 2 * e["max_len"] * HOP_LENGTH
        if window % SAMPLE_RATE:  # WhisperFeatureExtractor pads to chunk_length * rate samples: an int
            log.warning("the encoder's window is %g s, not a whole number of seconds: WhisperFeatureExtractor cannot "
                        "be configured for it, no preprocessor_config.json is written", window / SAMPLE_RATE)
            return {}
        return {"preprocessor_config.json": whisper.feature_extractor(e["n_mels"], window)}
    if hf_class == "LlavaForConditionalGeneration":
        vision = e["vision"]
        config = _image_processor("CLIPImageProcessor", vision["image_size"], {})  # zoo answer's normalisation
        return {"preprocessor_config.json": config | {"do_center_crop": False, "do_convert_rgb": True},
                "processor_config.json": {
                    "processor_class": "LlavaProcessor", "image_token": "<image>",
                    "patch_size": vision["model"]["embedder"]["patch_size"], "num_additional_image_tokens": 1,
                    "vision_feature_select_strategy": "full" if vision["keep_cls"] else "default"}}
    return {}


def _chat_template(prompt: str) -> str:
    """A chat template that renders a user's message as the zoo's ``prompt`` (``{question}`` the
    message's text; an image in the message is the prompt's own ``<image>``)."""
    before, _, after = prompt.partition("{question}")
    text = "{% for message in messages %}{% if message['content'] is string %}{{ message['content'] }}" \
           "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}" \
           "{% endif %}{% endfor %}{% endif %}{% endfor %}"
    return f"{{{{ {json.dumps(before)} }}}}{text}{{{{ {json.dumps(after)} }}}}"


def _run_settings(family: Family, hparams: dict[str, Any], ids: dict[str, int]) -> dict[str, Any]:
    """The Hugging Face config keys of the run itself: its special token ids (``ids``: role ->
    id; a role the run has none for is None, not the Hugging Face family's default, which
    belongs to another vocabulary), an encoder-decoder's start token, and the data's class
    names as ``id2label`` / ``label2id``."""
    out: dict[str, Any] = {}
    if hparams.get("tokenizer") or ids:  # a text model
        out = {f"{family.ids_prefix}{role}_token_id": ids.get(role) for role in ("pad", "bos", "eos")}
        if "n_decoder_layers" in hparams["net"] and ids.get("bos") is not None:
            out["decoder_start_token_id"] = ids["bos"]
    names = hparams.get("class_names")
    if names:
        out |= {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}
    return out


def _empty_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that is a file, or a folder holding anything, unless ``overwrite``."""
    if out.is_file() or out.is_symlink():
        raise FileExistsError(f"out={out} is a file: give a folder to write the export into")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"out={out} already holds files: give an empty or new folder, or overwrite=true "
                              f"to replace its contents")


def export(ckpt: str | Path, out: str | Path, merge_lora: bool = True, hf_class: str | None = None,
           overwrite: bool = False, sentence_transformer: str | Path | None = None) -> tuple[str | None, list[str]]:
    """Write the zoo checkpoint ``ckpt`` as a Hugging Face folder ``out``: ``config.json`` and
    ``generation_config.json`` (the run's own special ids and class names), ``model.safetensors``,
    a tokenizer folder for the run's tokenizer (:func:`zoo.data.tokenizers.save_folder`) and the
    processor its client reads inputs with (images, video, LLaVA's processor and chat template).
    The ``transformers`` class is the one of the checkpoint's ``model.converter``, or ``hf_class``
    (``VitDetModel`` for a headless ViTDet; GPT-Neo and YOLOS checkpoints written before their
    converters name none); a net with neither (the original Transformer, a ViTDet classifier) is
    written in the zoo's format instead (:func:`write_zoo`). LoRA adapters (a run
    with ``model.lora``) are merged into the weights first; without ``merge_lora`` the folder
    holds the base and, in ``adapter/``, a peft adapter folder named for the Hugging Face
    model's modules (:mod:`zoo.convert.adapters`). A non-empty ``out`` is refused unless ``overwrite``; the folder is
    written beside it and put in its place whole, so an overwritten ``out`` holds no file of
    before and a failed export leaves it as it was. A BERT fine-tuned from a sentence-transformers
    folder is written back as one with ``sentence_transformer`` (that folder, or ``hf:<repo>``):
    :func:`zoo.models.sentence_transformers.write`. Returns (the class written, None for the zoo's
    format; the names of its weights the zoo net has no counterpart for)."""
    import shutil

    from zoo.convert.hub import resolve
    from zoo.data.tokenizers import backend, role_tokens, save_folder
    from zoo.models import sentence_transformers
    from zoo.nn import lora
    from zoo.data.pretrained import tokenizer_of
    from zoo.objectives.loading import load

    out = Path(out)
    _empty_out(out, overwrite)
    origin = Path(resolve(sentence_transformer)) if sentence_transformer else None
    if origin is not None and not sentence_transformers.is_sentence_transformer(origin):
        raise FileNotFoundError(f"sentence_transformer={sentence_transformer}: {origin} holds no "
                                f"{sentence_transformers.MODULES_FILE}, it is not a sentence-transformers folder")
    objective = load(ckpt)
    net, hparams = objective.net, objective.hparams
    hf_class = hf_class or BY_CONVERTER.get(hparams.get("converter"))
    adapted = None  # without merge_lora: (the example, the adapted net's outputs on it, its adapters)
    if hparams.get("lora") and merge_lora:
        net = lora.merge(net)
    elif hparams.get("lora"):
        if hf_class not in FAMILIES:
            raise ValueError(f"{ckpt} holds LoRA adapters of a net no transformers class holds: export them merged "
                             f"(merge_lora=true)")
        x = FAMILIES[hf_class].example(hparams.net)
        expected = FAMILIES[hf_class].ours(net.eval(), x)
        net, taken = lora.unload(net)
        adapted = (x, expected, taken)
    if origin is not None and hf_class != "BertForMaskedLM":
        raise ValueError(f"sentence_transformer= writes a BERT's sentence-transformers folder; {ckpt} is a "
                         f"{hf_class or 'zoo-format'} export")
    tokenizer = tokenizer_of(ckpt) if hparams.get("tokenizer") else None
    own = {role: hparams.get(f"{role}_id") for role in ("pad", "bos", "eos", "mask")}
    roles = role_tokens(tokenizer, own) if tokenizer is not None else {}
    ids = {role: i for role, i in own.items() if i is not None} | {
        role: backend(tokenizer).token_to_id(token) for role, token in roles.items()}
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:  # a failed export leaves no partial folder either
        if hf_class is None:
            write_zoo(net, hparams.net, partial)
            untouched = []
        else:
            family = FAMILIES[hf_class] if hf_class in FAMILIES else None
            settings = _run_settings(family, hparams, ids) if family else {}
            hf, untouched = to_hf(net, hparams.net, hf_class, settings)
            if hf.can_generate():  # built from the family's defaults: the run's own ids (or none)
                for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
                    setattr(hf.generation_config, key, settings.get(f"{family.ids_prefix}{key}",
                                                                    getattr(hf.generation_config, key, None)))
                # the run's own decoding length (a seq2seq run's), not the family's default (Whisper's 448)
                hf.generation_config.max_new_tokens = (hparams.get("decoding") or {}).get("max_new_tokens")
            if hf_class == "WhisperForConditionalGeneration" and hparams.get("audio_window") is None:
                log.warning("%s read each utterance's own log-mel frames (data.pad_audio=false); Hugging Face's "
                            "feature extractor pads to the encoder's window, so the ASR pipeline's transcripts can differ from "
                            "zoo transcribe's. A run with data.pad_audio=true reads audio as the pipeline does", ckpt)
            hf.save_pretrained(partial)
            for name, config in _processor_files(hf_class, hparams.net, hparams).items():
                (partial / name).write_text(json.dumps(config, indent=1))
            if adapted is not None:
                _write_adapters(net, hparams, family, hf, adapted, partial / ADAPTER_DIR, out.resolve())
        if tokenizer is not None:
            prompt = hparams.get("prompt")
            save_folder(tokenizer, partial, roles, hparams.net.get("context"),
                        _chat_template(prompt) if prompt and hf_class == "LlavaForConditionalGeneration" else None)
            if hf_class == "WhisperForConditionalGeneration":
                whisper.tokenizer_folder(partial)
        if origin is not None:
            untouched = sentence_transformers.write(origin, partial, hf)
            hf_class = "BertModel"
        (partial / "zoo_export.json").write_text(json.dumps({"from": str(ckpt), "class": hf_class,
                                                            "untouched": untouched}, indent=1))
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return hf_class, untouched

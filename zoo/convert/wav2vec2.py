"""Hugging Face wav2vec 2.0 (``Wav2Vec2ForCTC``) -> zoo ``model=wav2vec2``: a Model whose embedder is
the convolutional front end (:class:`zoo.nn.audio_conv.WaveEmbedder`), post-LN Blocks (pre-LN with
a final norm for ``do_stable_layer_norm``) and a CTC head. HuBERT (``zoo/convert/hubert.py``) has
the same layout under another prefix: both are a :class:`Layout` row of this one mapping."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, init_net, leave_out, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.family import Family, at

log = logging.getLogger(__name__)

HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu", "silu": "silu"}


@dataclass(frozen=True)
class Layout:
    """What differs between the families of this layout: the checkpoint's ``model_type`` values, the
    prefix of the encoder's weights, the Hugging Face class and config class, and the config keys its
    converter reads, ignores or expresses at one value only (``keys``, :func:`check_keys`)."""

    model_types: tuple[str, ...]
    prefix: str
    hf_class: str
    config_class: str
    keys: ConfigKeys


# every Wav2Vec2Config key the converter reads (:func:`shape`), ignores or computes at one value only
# (an adapter on top, a weighted sum of the layers, attention adapters: ``fixed``). Ignored: the
# feature projection's dropout and LayerDrop (training only), SpecAugment's masking (training only),
# the pre-training quantiser and contrastive loss, the CTC loss's settings (the logits do not change),
# the other heads' sizes (sequence classification, x-vector), the adapter's sizes (no adapter is
# built), num_feat_extract_layers (transformers holds it to len(conv_dim)), and three keys the released
# checkpoints' configs hold (facebook/wav2vec2-base-960h's) that no transformers code reads
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
                     "feat_extract_activation", "do_stable_layer_norm", "conv_dim", "conv_kernel", "conv_stride",
                     "conv_bias", "feat_extract_norm", "num_conv_pos_embeddings", "num_conv_pos_embedding_groups",
                     "layer_norm_eps", "vocab_size", "final_dropout", "hidden_dropout", "attention_dropout",
                     "activation_dropout"}),
    ignores=frozenset({"feat_proj_dropout", "layerdrop", "apply_spec_augment", "mask_time_prob", "mask_time_length",
                       "mask_time_min_masks", "mask_feature_prob", "mask_feature_length", "mask_feature_min_masks",
                       "feat_quantizer_dropout", "num_codevectors_per_group", "num_codevector_groups",
                       "contrastive_logits_temperature", "num_negatives", "codevector_dim", "proj_codevector_dim",
                       "diversity_loss_weight", "ctc_loss_reduction", "ctc_zero_infinity", "classifier_proj_size",
                       "tdnn_dim", "tdnn_kernel", "tdnn_dilation", "xvector_output_dim", "adapter_kernel_size",
                       "adapter_stride", "num_adapter_layers", "output_hidden_size", "num_feat_extract_layers",
                       "feat_extract_dropout", "hidden_dropout_prob", "gradient_checkpointing"}),
    fixed={"add_adapter": False, "use_weighted_layer_sum": False, "adapter_attn_dim": None})
WAV2VEC2 = Layout(("wav2vec2",), "wav2vec2.", "Wav2Vec2ForCTC", "Wav2Vec2Config", CONFIG_KEYS)


def shape(config: dict[str, Any], layout: Layout = WAV2VEC2) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give the zoo net the shape (and
    dropout) of a Hugging Face ``config.json`` of ``layout``; every dependent key is listed. A key the
    converter does not implement is refused by name (``layout.keys``)."""
    check_keys(config, layout.keys)
    c, stable = config, bool(config.get("do_stable_layer_norm", False))
    d, vocab = c["hidden_size"], c["vocab_size"]
    for key in ("hidden_act", "feat_extract_activation"):
        if c.get(key, "gelu") not in HF_ACTIVATIONS:
            raise ValueError(f"{key}={c[key]!r}: the zoo has {sorted(HF_ACTIVATIONS)}")
    return {
        "n_layers": c["num_hidden_layers"],
        "final_norm": stable,
        "embedder.conv_dim": list(c["conv_dim"]),
        "embedder.conv_kernel": list(c["conv_kernel"]),
        "embedder.conv_stride": list(c["conv_stride"]),
        "embedder.conv_bias": bool(c.get("conv_bias", False)),
        "embedder.feat_extract_norm": c.get("feat_extract_norm", "group"),
        "embedder.n_conv_pos": c["num_conv_pos_embeddings"],
        "embedder.conv_pos_groups": c["num_conv_pos_embedding_groups"],
        "embedder.norm": not stable,
        "embedder.norm_eps": c.get("layer_norm_eps", 1e-5),
        "embedder.activation": HF_ACTIVATIONS[c.get("feat_extract_activation", "gelu")],
        "head.vocab_size": vocab,
        "head.dropout": c.get("final_dropout", 0.0),
        "block.d_model": d,
        "block.n_heads": c["num_attention_heads"],
        "block.d_ff": c["intermediate_size"],
        "block.norm_eps": c.get("layer_norm_eps", 1e-5),
        "block.prenorm": stable,
        "block.activation": HF_ACTIVATIONS[c.get("hidden_act", "gelu")],
        "block.dropout": c.get("hidden_dropout", 0.0),
        "block.attn_dropout": c.get("attention_dropout", 0.0),
        "block.ffn_dropout": c.get("activation_dropout", 0.0),
    }


def _pair(sd: dict[str, Tensor], h: str, z: str) -> dict[str, Tensor]:
    """``h``.weight and ``h``.bias (where present) as ``z``.weight and ``z``.bias."""
    return {f"{z}.{kind}": sd[f"{h}.{kind}"] for kind in ("weight", "bias") if f"{h}.{kind}" in sd}


def _weight_norm(sd: dict[str, Tensor], h: str, part: str) -> Tensor:
    """The weight norm's ``g`` or ``v`` under its transformers 5 name (``parametrizations.weight.
    original0`` / ``1``) or the older ``weight_g`` / ``weight_v`` (the released checkpoints)."""
    new = f"{h}.parametrizations.weight.original{0 if part == 'g' else 1}"
    return sd[new] if new in sd else sd[f"{h}.weight_{part}"]


def state_dict(hf: dict[str, Tensor], net: dict[str, Any], layout: Layout = WAV2VEC2) -> dict[str, Tensor]:
    """Rename a Hugging Face state dict of ``layout`` to the zoo net ``net``'s (its config);
    ``masked_spec_embed`` (SpecAugment's mask vector, training only) is left out."""
    p = layout.prefix
    sd = leave_out(hf, f"{p}masked_spec_embed")
    e = net["embedder"]
    out = {}
    for i in range(len(e["conv_dim"])):
        h, z = f"{p}feature_extractor.conv_layers.{i}", f"embedder.conv_layers.{i}"
        out |= _pair(sd, f"{h}.conv", f"{z}.conv")
        if e["feat_extract_norm"] == "layer" or i == 0:
            out |= _pair(sd, f"{h}.layer_norm", f"{z}.norm")
    out |= _pair(sd, f"{p}feature_projection.layer_norm", "embedder.proj_norm")
    out |= _pair(sd, f"{p}feature_projection.projection", "embedder.proj")
    pos = f"{p}encoder.pos_conv_embed.conv"
    out |= {"embedder.positions.bias": sd[f"{pos}.bias"], "embedder.positions.weight_g": _weight_norm(sd, pos, "g"),
            "embedder.positions.weight_v": _weight_norm(sd, pos, "v")}
    out |= _pair(sd, f"{p}encoder.layer_norm", "stack.norm" if net["final_norm"] else "embedder.norm")
    for i in range(net["n_layers"]):
        h, z = f"{p}encoder.layers.{i}", f"stack.blocks.{i}"
        for hf_name, zoo_name in (("attention.q_proj", "attn.q"), ("attention.k_proj", "attn.k"),
                                  ("attention.v_proj", "attn.v"), ("attention.out_proj", "attn.out"),
                                  ("layer_norm", "attn_norm"), ("feed_forward.intermediate_dense", "ffn.fc_in"),
                                  ("feed_forward.output_dense", "ffn.fc_out"), ("final_layer_norm", "ffn_norm")):
            out |= _pair(sd, f"{h}.{hf_name}", f"{z}.{zoo_name}")
    return out | _pair(sd, "lm_head", "head.proj")


def _net(values: dict[str, Any]) -> dict[str, Any]:
    """The nested net config of the flat ``shape`` values (what :func:`state_dict` reads)."""
    return {"n_layers": values["n_layers"], "final_norm": values["final_norm"],
            "embedder": {k.removeprefix("embedder."): v for k, v in values.items() if k.startswith("embedder.")}}


@torch.no_grad()
def from_transformers(hf_model, model: str = "wav2vec2", layout: Layout = WAV2VEC2) -> nn.Module:
    """A zoo net (built from conf/model/``model``.yaml) holding ``hf_model``'s weights."""
    values = shape(hf_model.config.to_dict(), layout)
    net = build_net(model, shape_overrides(values), {"vocab_size": values["head.vocab_size"], "pad_id": 0})
    load_mapped(net, state_dict(hf_model.state_dict(), _net(values), layout))
    return net


def read(net_cfg: dict[str, Any], path: str, layout: Layout) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` of a ``layout`` folder: (``net_cfg`` reshaped to it, the net holding its weights)."""
    config, weights = read_checkpoint_dir(path, layout.model_types)
    values = shape(config, layout)
    vocab = at(net_cfg, "head.vocab_size")
    if vocab != config["vocab_size"]:
        raise ValueError(f"the data's tokenizer has {vocab} characters but {path}/config.json has vocab_size="
                         f"{config['vocab_size']}: tokenize with the checkpoint's vocabulary")
    return init_net(net_cfg, values, state_dict(weights, _net(values), layout))


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a ``Wav2Vec2ForCTC`` folder."""
    return read(net_cfg, path, WAV2VEC2)


def waves(net: dict[str, Any]) -> Tensor:
    """(2, T) random waveforms of about a dozen output vectors."""
    e = net["embedder"]
    n = 12
    for k, s in zip(reversed(e["conv_kernel"]), reversed(e["conv_stride"])):
        n = (n - 1) * s + k
    return torch.randn(2, n)


def feature_extractor(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``preprocessor_config.json``: the ``Wav2Vec2FeatureExtractor`` that reads audio as the zoo does
    (:func:`zoo.data.audio.normalise_wave`, ``collate_waves``): 16 kHz mono samples, each utterance
    normalised over its own samples, zeros after it, and the padding masked (an attention mask)."""
    from zoo.data.audio import SAMPLE_RATE

    return {"preprocessor_config.json": {
        "feature_extractor_type": "Wav2Vec2FeatureExtractor", "processor_class": "Wav2Vec2Processor",
        "feature_size": 1, "sampling_rate": SAMPLE_RATE, "do_normalize": True, "padding_value": 0.0,
        "padding_side": "right", "return_attention_mask": True}}


def ctc_tokenizer(folder: Path) -> None:
    """Make the tokenizer folder ``folder`` (:func:`zoo.data.tokenizers.save_folder`'s) a
    ``Wav2Vec2CTCTokenizer``'s, with which the ASR pipeline decodes a CTC model's ids as the zoo's
    greedy decoding does (repeats collapsed, then the blank dropped): ``vocab.json`` holds the
    characters and the pad token, CTC's blank; the space is the word delimiter. The zoo's other
    special tokens (start, end of text) are no characters: decoding drops them, so they are left out
    of ``vocab.json`` and read as the blank (the unknown token). A tokenizer of longer tokens (a BPE
    run's) stays as it is, with a warning: Wav2Vec2CTCTokenizer joins its tokens as they are."""
    from transformers import Wav2Vec2CTCTokenizer

    config = json.loads((folder / "tokenizer_config.json").read_text())
    data = json.loads((folder / "tokenizer.json").read_text())
    pad = config.get("pad_token")
    if pad is None:
        raise ValueError("the run's tokenizer has no pad token, which Wav2Vec2CTCTokenizer decodes as CTC's blank: "
                         "train with one (the speech data's tokenizers have <pad>), or export with hf_class=zoo")
    specials = {t["content"] for t in data["added_tokens"] if t["special"]} - {pad}
    vocab = {token: i for token, i in data["model"]["vocab"].items() if token not in specials}
    if any(len(token) != 1 for token in vocab.keys() - {pad}):
        log.warning("this run's tokenizer is not one of characters: the export keeps it, and the ASR pipeline "
                    "joins its tokens as they are, not as the zoo decodes them")
        return
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (folder / name).unlink()
    (folder / "vocab.json").write_text(json.dumps(vocab, indent=1, ensure_ascii=False))
    Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), bos_token=None, eos_token=None, unk_token=pad, pad_token=pad,
                         word_delimiter_token=" ", model_max_length=config.get("model_max_length"),
                         clean_up_tokenization_spaces=False).save_pretrained(folder)


def family(layout: Layout) -> Family:
    """The export's description of ``layout`` (its config keys are wav2vec 2.0's)."""
    keys = {"num_hidden_layers": "n_layers", "hidden_size": "block.d_model", "num_attention_heads": "block.n_heads",
            "intermediate_size": "block.d_ff", "layer_norm_eps": "block.norm_eps", "do_stable_layer_norm": "block.prenorm",
            "conv_dim": "embedder.conv_dim", "conv_kernel": "embedder.conv_kernel",
            "conv_stride": "embedder.conv_stride", "conv_bias": "embedder.conv_bias",
            "feat_extract_norm": "embedder.feat_extract_norm", "num_conv_pos_embeddings": "embedder.n_conv_pos",
            "num_conv_pos_embedding_groups": "embedder.conv_pos_groups", "vocab_size": "head.vocab_size",
            "hidden_dropout": "block.dropout", "attention_dropout": "block.attn_dropout",
            "activation_dropout": "block.ffn_dropout", "final_dropout": "head.dropout"}
    return Family(
        hf_class=layout.hf_class, config_class=layout.config_class, keys=keys,
        activations={hf: zoo for hf, zoo in HF_ACTIVATIONS.items() if hf != "gelu_new"}, activation_key="hidden_act",
        shape=lambda config, net: shape(config, layout),
        state_dict=lambda sd, net: state_dict(sd, net, layout),
        example=waves, outputs=lambda hf, x: hf(x).logits,
        # no SpecAugment on the features in the zoo (so no masked_spec_embed), no LayerDrop;
        # the activation of the convs is the Blocks' (one key each side)
        extra=lambda net: {"mask_time_prob": 0.0, "layerdrop": 0.0, "num_feat_extract_layers":
                           len(net["embedder"]["conv_dim"]), "feat_extract_activation": net["embedder"]["activation"],
                           "feat_proj_dropout": net["embedder"]["dropout"]}
        # the conv lists as plain lists (the table's copies are OmegaConf's, which the config refuses)
        | {key: list(net["embedder"][zoo]) for key, zoo in (("conv_dim", "conv_dim"), ("conv_kernel", "conv_kernel"),
                                                             ("conv_stride", "conv_stride"))},
        processors=feature_extractor, tokenizer_files=ctc_tokenizer)


FAMILY = family(WAV2VEC2)

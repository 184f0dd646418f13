"""Hugging Face Whisper (``WhisperForConditionalGeneration``) -> zoo Whisper: one short,
shape-checked mapping onto ``model=whisper`` (an EncoderDecoder of the same Block), from a model
in memory or a checkpoint folder (:func:`pretrained`, the ``model.init_from=DIR`` hook)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_one_block, check_vocab, init_net, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.family import Family, config_only, tokens

log = logging.getLogger(__name__)

MODEL_TYPES = ("whisper",)  # the config.json model_type values this converter reads
# every WhisperConfig key: the shape and the activation read; the dropouts, layer drops and
# SpecAugment's masking (training only: the import's net is for eval), the init's scale, the audio
# classifier's keys (not this class's), median_filter_width (generate's word timestamps) and the
# released configs' forced_decoder_ids (generate's) and num_hidden_layers (encoder_layers) ignored;
# the decoder's tokens unscaled and the head the token table
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"vocab_size", "num_mel_bins", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim",
                     "decoder_layers", "decoder_attention_heads", "decoder_ffn_dim", "activation_function", "d_model",
                     "max_source_positions", "max_target_positions"}),
    ignores=frozenset({"encoder_layerdrop", "decoder_layerdrop", "dropout", "attention_dropout", "activation_dropout",
                       "init_std", "apply_spec_augment", "mask_time_prob", "mask_time_length", "mask_time_min_masks",
                       "mask_feature_prob", "mask_feature_length", "mask_feature_min_masks", "use_weighted_layer_sum",
                       "classifier_proj_size", "median_filter_width", "forced_decoder_ids", "num_hidden_layers"}),
    fixed={"scale_embedding": False, "tie_word_embeddings": True})


def whisper_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=whisper`` the
    shape (and dropout) of a Hugging Face Whisper ``config.json``; every dependent key is listed,
    so the same values apply to a resolved config. A key the converter does not implement is
    refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    check_one_block(config)
    c = config
    d, vocab, context = c["d_model"], c["vocab_size"], c["max_target_positions"]
    return {
        "n_encoder_layers": c["encoder_layers"],
        "n_decoder_layers": c["decoder_layers"],
        "context": context,
        "encoder_embedder.n_mels": c["num_mel_bins"],
        "encoder_embedder.max_len": c["max_source_positions"],
        "decoder_embedder.max_len": context,
        "decoder_embedder.vocab_size": vocab,
        "head.vocab_size": vocab,
        "block.d_model": d,
        "block.n_heads": c["encoder_attention_heads"],
        "block.d_ff": c["encoder_ffn_dim"],
        "block.activation": c.get("activation_function", "gelu"),
        "block.dropout": c.get("dropout", 0.0),
        "block.attn_dropout": c.get("attention_dropout", 0.0),
        "block.ffn_dropout": c.get("activation_dropout", 0.0),
    }


def _layer(sd: dict[str, Tensor], h: str, z: str, cross: bool) -> dict[str, Tensor]:
    """One Whisper layer (prefix ``h``) -> one zoo Block (prefix ``z``)."""
    attentions = [("self_attn", "attn")] + ([("encoder_attn", "cross_attn")] if cross else [])
    out: dict[str, Tensor] = {}
    for hf_attn, zoo_attn in attentions:
        for hf_proj, zoo_proj in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "out")):
            out[f"{z}{zoo_attn}.{zoo_proj}.weight"] = sd[f"{h}{hf_attn}.{hf_proj}.weight"]
            if hf_proj != "k_proj":  # Whisper's keys have no bias
                out[f"{z}{zoo_attn}.{zoo_proj}.bias"] = sd[f"{h}{hf_attn}.{hf_proj}.bias"]
        zoo_norm = "attn_norm" if zoo_attn == "attn" else "cross_norm"
        out[f"{z}{zoo_norm}.weight"] = sd[f"{h}{hf_attn}_layer_norm.weight"]
        out[f"{z}{zoo_norm}.bias"] = sd[f"{h}{hf_attn}_layer_norm.bias"]
    for hf_name, zoo_name in (("fc1", "ffn.fc_in"), ("fc2", "ffn.fc_out"), ("final_layer_norm", "ffn_norm")):
        out[f"{z}{zoo_name}.weight"] = sd[f"{h}{hf_name}.weight"]
        out[f"{z}{zoo_name}.bias"] = sd[f"{h}{hf_name}.bias"]
    return out


def whisper_state_dict(hf: dict[str, Tensor], n_encoder_layers: int, n_decoder_layers: int) -> dict[str, Tensor]:
    """Rename Whisper's weights to the zoo's. The encoder's sinusoidal table is stored in
    the checkpoint as weights and is copied as is (not recomputed)."""
    sd = {k.removeprefix("model."): v for k, v in hf.items()}
    out = {
        "encoder.embedder.conv1.weight": sd["encoder.conv1.weight"],
        "encoder.embedder.conv1.bias": sd["encoder.conv1.bias"],
        "encoder.embedder.conv2.weight": sd["encoder.conv2.weight"],
        "encoder.embedder.conv2.bias": sd["encoder.conv2.bias"],
        "encoder.embedder.positions.weight": sd["encoder.embed_positions.weight"],
        "encoder.stack.norm.weight": sd["encoder.layer_norm.weight"],
        "encoder.stack.norm.bias": sd["encoder.layer_norm.bias"],
        "decoder.embedder.tokens.weight": sd["decoder.embed_tokens.weight"],
        "decoder.embedder.positions.weight": sd["decoder.embed_positions.weight"],
        "decoder.stack.norm.weight": sd["decoder.layer_norm.weight"],
        "decoder.stack.norm.bias": sd["decoder.layer_norm.bias"],
    }
    for i in range(n_encoder_layers):
        out |= _layer(sd, f"encoder.layers.{i}.", f"encoder.stack.blocks.{i}.", cross=False)
    for i in range(n_decoder_layers):
        out |= _layer(sd, f"decoder.layers.{i}.", f"decoder.stack.blocks.{i}.", cross=True)
    out["head.proj.weight"] = out["decoder.embedder.tokens.weight"]  # tied (proj_out is the same matrix)
    return out


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo Whisper (built from conf/model/whisper.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    net = build_net("whisper", shape_overrides(whisper_shape(cfg)), {"vocab_size": cfg["vocab_size"]})
    load_mapped(net, whisper_state_dict(hf_model.state_dict(), cfg["encoder_layers"], cfg["decoder_layers"]))
    return net


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the Whisper folder at ``path``, the net
    holding its weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = whisper_shape(config)
    check_vocab(net_cfg, "decoder_embedder.vocab_size", config["vocab_size"], path)
    return init_net(net_cfg, shape, whisper_state_dict(state, shape["n_encoder_layers"], shape["n_decoder_layers"]))


NO_TIMESTAMPS = "<|notimestamps|>"  # the ASR pipeline reads ids above this token's as timestamps


def _byte_level(tok_json: dict[str, Any]) -> dict[str, Any]:
    """A ``tokenizers`` JSON (a char-level vocabulary or a Metaspace BPE, as the zoo's speech
    data trains) as the byte-level BPE ``WhisperTokenizer`` rebuilds from a folder's vocabulary
    and merges (it keeps no pre-tokenizer or decoder of the file): each token's text (``▁`` a
    space) in GPT-2's byte alphabet, so that decoding gives the same text. Whisper's own
    (byte-level already) is returned as it is. Ids do not move. Encoding is the run's too, but for
    a character of more than one UTF-8 byte: no merge joins its bytes (the ASR pipeline only decodes)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    if (tok_json.get("pre_tokenizer") or {}).get("type") == "ByteLevel":
        return tok_json
    alphabet = bytes_to_unicode()
    specials = {t["content"] for t in tok_json.get("added_tokens", [])}
    metaspace = "Metaspace" in json.dumps(tok_json.get("pre_tokenizer"))

    def byte_text(token: str) -> str:
        if token in specials:
            return token
        return "".join(alphabet[b] for b in (token.replace("▁", " ") if metaspace else token).encode())

    model = tok_json["model"]
    if model.get("type") not in ("WordLevel", "BPE"):
        raise ValueError(f"a {model.get('type')} tokenizer has no WhisperTokenizer (a byte-level BPE) equivalent")
    merges = [m.split(" ") if isinstance(m, str) else m for m in model.get("merges", [])]
    return tok_json | {
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": metaspace, "trim_offsets": True, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": model.get("unk_token"),
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {byte_text(t): i for t, i in model["vocab"].items()},
                  "merges": [[byte_text(a), byte_text(b)] for a, b in merges]}}


def tokenizer_folder(folder: Path) -> None:
    """Make the tokenizer folder ``folder`` (written by :func:`zoo.data.tokenizers.save_folder`) one
    that ``WhisperTokenizer`` reads: the ASR pipeline decodes a Whisper's tokens with it alone
    (``_decode_asr``). The vocabulary becomes byte-level (:func:`_byte_level`); ``<|notimestamps|>``
    is added above the model's ids, so that no id of the model reads as a timestamp."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_str(json.dumps(_byte_level(json.loads((folder / "tokenizer.json").read_text()))))
    if tok.token_to_id(NO_TIMESTAMPS) is None:
        tok.add_special_tokens([AddedToken(NO_TIMESTAMPS, special=True, normalized=False)])
    tok.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config |= {"tokenizer_class": "WhisperTokenizer",
               "add_prefix_space": json.loads(tok.to_str())["pre_tokenizer"]["add_prefix_space"],
               "added_tokens_decoder": {str(i): {"content": t.content, "special": True, "normalized": False,
                                                 "lstrip": False, "rstrip": False, "single_word": False}
                                        for i, t in tok.get_added_tokens_decoder().items()}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def feature_extractor(n_mels: int, window: int) -> dict[str, Any]:
    """``WhisperFeatureExtractor``'s config that computes the zoo's features of a run padded to
    ``window`` samples (``data.pad_audio``): its ``chunk_length`` is that window, in whole seconds."""
    from zoo.data.audio import HOP_LENGTH, N_FFT, SAMPLE_RATE

    return {"feature_extractor_type": "WhisperFeatureExtractor", "processor_class": "WhisperProcessor",
            "feature_size": n_mels, "sampling_rate": SAMPLE_RATE, "hop_length": HOP_LENGTH, "n_fft": N_FFT,
            "chunk_length": window // SAMPLE_RATE, "n_samples": window,
            "nb_max_frames": window // HOP_LENGTH, "padding_value": 0.0, "padding_side": "right",
            "return_attention_mask": False, "dither": 0.0}


def _processors(net: dict[str, Any], hparams: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``preprocessor_config.json``: the feature extractor of the encoder's window (none where that
    window is not a whole number of seconds, which WhisperFeatureExtractor cannot be configured for)."""
    from zoo.data.audio import HOP_LENGTH, SAMPLE_RATE

    if hparams.get("audio_window") is None:
        log.warning("this run read each utterance's own log-mel frames (data.pad_audio=false); Hugging Face's "
                    "feature extractor pads to the encoder's window, so the ASR pipeline's transcripts can differ "
                    "from zoo transcribe's. A run with data.pad_audio=true reads audio as the pipeline does")
    e = net["encoder_embedder"]
    window = 2 * e["max_len"] * HOP_LENGTH
    if window % SAMPLE_RATE:  # WhisperFeatureExtractor pads to chunk_length * rate samples: an int
        log.warning("the encoder's window is %g s, not a whole number of seconds: WhisperFeatureExtractor cannot "
                    "be configured for it, no preprocessor_config.json is written", window / SAMPLE_RATE)
        return {}
    return {"preprocessor_config.json": feature_extractor(e["n_mels"], window)}


FAMILY = Family(
    hf_class="WhisperForConditionalGeneration", config_class="WhisperConfig",
    keys={"encoder_layers": "n_encoder_layers", "decoder_layers": "n_decoder_layers", "d_model": "block.d_model",
          "encoder_attention_heads": "block.n_heads", "decoder_attention_heads": "block.n_heads",
          "encoder_ffn_dim": "block.d_ff", "decoder_ffn_dim": "block.d_ff", "num_mel_bins": "encoder_embedder.n_mels",
          "max_source_positions": "encoder_embedder.max_len", "max_target_positions": "context",
          "vocab_size": "head.vocab_size", "dropout": "block.dropout", "attention_dropout": "block.attn_dropout",
          "activation_dropout": "block.ffn_dropout"},
    activations={"gelu": "gelu", "relu": "relu", "silu": "silu"}, activation_key="activation_function",
    shape=config_only(whisper_shape),
    state_dict=lambda sd, net: whisper_state_dict(sd, net["n_encoder_layers"], net["n_decoder_layers"]),
    # the encoder's two convolutions halve 2 x max_source_positions frames to its positions
    example=lambda net: (torch.randn(2, net["encoder_embedder"]["n_mels"], 2 * net["encoder_embedder"]["max_len"]),
                         tokens(net, "head.vocab_size", 12)),
    outputs=lambda hf, x: hf(input_features=x[0], decoder_input_ids=x[1]).logits,
    # Whisper's default special ids are the 51k-token vocabulary's (the config requires a start id):
    # export() sets the checkpoint's own
    extra=lambda net: {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None,
                       "decoder_start_token_id": 0, "begin_suppress_tokens": None},
    processors=_processors, tokenizer_files=tokenizer_folder)

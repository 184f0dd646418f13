"""Hugging Face T5 (``T5ForConditionalGeneration``, v1.0 and v1.1) -> zoo T5.

:func:`from_transformers` converts a loaded model; :func:`load_pretrained` reads a
checkpoint directory without needing ``transformers``; :func:`pretrained` is the
``model.init_from=DIR`` hook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, init_net, load_mapped, read_checkpoint_dir,
                               shape_overrides)
from zoo.data.span_corruption import holds_sentinels
from zoo.data.tokenizers import TEXT_PAD, HFTokenizer, first_token
from zoo.convert.family import Family, tokens

MODEL_TYPES = ("t5",)  # the config.json model_type values this converter reads (v1.0 and v1.1 alike)
EXTRA = 102  # model=t5 adds sentinels + eos + start to the data's vocabulary (conf/model/t5.yaml)
# every T5Config key: the shape, the activation and the head's scale read (n_positions, which
# T5Config no longer has, is the context); the activation is dense_act_fn and is_gated_act, which
# T5Config derives from feed_forward_proj where the config omits them; the dropouts (the import's net is for eval), the init's
# scale and output_past (transformers 3's use_cache, in the released configs) change no logits
CONFIG_KEYS = ConfigKeys(
    reads=frozenset({"vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
                     "relative_attention_num_buckets", "relative_attention_max_distance", "layer_norm_epsilon",
                     "feed_forward_proj", "dense_act_fn", "is_gated_act", "scale_decoder_outputs", "tie_word_embeddings",
                     "n_positions"}),
    ignores=frozenset({"dropout_rate", "classifier_dropout", "initializer_factor",
                       "output_past"}))


def head_is_tied(state: dict[str, Tensor]) -> bool:
    """Whether the checkpoint's output head is the shared embedding (v1.0) or its own (v1.1)."""
    shared = state["shared.weight"] if "shared.weight" in state else state["encoder.embed_tokens.weight"]
    return "lm_head.weight" not in state or torch.equal(state["lm_head.weight"], shared)


def t5_shape(config: dict, tied: bool) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=t5`` the shape
    (and dropout) of an HF T5 ``config.json``; every dependent key is listed, so the same values
    apply to a resolved config.

    The head's input is scaled by d_model^-0.5 in v1.0 (``tie_word_embeddings`` true in its
    config; newer ``transformers`` record it as ``scale_decoder_outputs``), not in v1.1. A key T5's
    converter does not implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(config, CONFIG_KEYS)
    proj = config.get("feed_forward_proj", "relu")
    # T5Config derives dense_act_fn and is_gated_act from feed_forward_proj unless the config gives
    # them (its layers read those two); it runs "gated-gelu" (and only it) with the tanh GELU
    gated = config.get("is_gated_act", proj.startswith("gated-"))
    act = config.get("dense_act_fn", "gelu_new" if proj == "gated-gelu" else proj.removeprefix("gated-"))
    activation = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "silu": "silu"}
    if act not in activation:
        raise ValueError(f"t5 config: dense_act_fn={act!r} (feed_forward_proj={proj!r}) is not implemented by the "
                         f"zoo; it computes {sorted(activation)}")
    scaled = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True))
    d, vocab, dropout = config["d_model"], config["vocab_size"], config.get("dropout_rate", 0.1)
    context = config.get("n_positions", 512)  # T5 has no limit; 512 is its training length
    embedder = {"vocab_size": vocab, "max_len": context}
    bias = {"n_heads": config["num_heads"], "num_buckets": config.get("relative_attention_num_buckets", 32),
            "max_distance": config.get("relative_attention_max_distance", 128)}
    return {
        "n_encoder_layers": config["num_layers"],
        "n_decoder_layers": config.get("num_decoder_layers") or config["num_layers"],
        "context": context,
        "tie_embeddings": tied,
        "block.d_model": d,
        "block.n_heads": config["num_heads"],
        "block.head_dim": config["d_kv"],
        "block.d_ff": config["d_ff"],
        "block.norm_eps": config.get("layer_norm_epsilon", 1e-6),
        "block.activation": activation[act],
        "block.gated": gated,
        "block.dropout": dropout,
        "block.attn_dropout": dropout,
        "block.ffn_dropout": dropout,
        **{f"{part}.{k}": v for part in ("encoder_embedder", "decoder_embedder") for k, v in embedder.items()},
        **{f"{part}.{k}": v for part in ("encoder_bias", "decoder_bias") for k, v in bias.items()},
        "head.vocab_size": vocab,
        "head.scale": d ** -0.5 if scaled else 1.0,
    }


def t5_state_dict(hf: dict[str, Tensor], n_encoder: int, n_decoder: int, gated: bool, tied: bool) -> dict[str, Tensor]:
    """Rename T5's weights to the zoo's (no transposes: both store Linear as (out, in))."""
    shared = hf["shared.weight"] if "shared.weight" in hf else hf["encoder.embed_tokens.weight"]
    out = {
        "encoder.embedder.tokens.weight": shared,
        "decoder.embedder.tokens.weight": shared,
        "head.proj.weight": shared if tied else hf["lm_head.weight"],
        "encoder.stack.norm.weight": hf["encoder.final_layer_norm.weight"],
        "decoder.stack.norm.weight": hf["decoder.final_layer_norm.weight"],
        "encoder.bias.embedding.weight": hf["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
        "decoder.bias.embedding.weight": hf["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
    }

    def attention(src: str, dst: str) -> dict[str, Tensor]:
        return {f"{dst}.{z}.weight": hf[f"{src}.{h}.weight"] for z, h in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))}

    def ffn(src: str, dst: str) -> dict[str, Tensor]:
        names = (("gate", "wi_0"), ("fc_in", "wi_1"), ("fc_out", "wo")) if gated else (("fc_in", "wi"), ("fc_out", "wo"))
        return {f"{dst}.{z}.weight": hf[f"{src}.{h}.weight"] for z, h in names}

    for stack, n in (("encoder", n_encoder), ("decoder", n_decoder)):
        for i in range(n):
            h, z = f"{stack}.block.{i}.layer", f"{stack}.stack.blocks.{i}"
            out |= attention(f"{h}.0.SelfAttention", f"{z}.attn")
            out[f"{z}.attn_norm.weight"] = hf[f"{h}.0.layer_norm.weight"]
            ff = 1
            if stack == "decoder":
                out |= attention(f"{h}.1.EncDecAttention", f"{z}.cross_attn")
                out[f"{z}.cross_norm.weight"] = hf[f"{h}.1.layer_norm.weight"]
                ff = 2
            out |= ffn(f"{h}.{ff}.DenseReluDense", f"{z}.ffn")
            out[f"{z}.ffn_norm.weight"] = hf[f"{h}.{ff}.layer_norm.weight"]
    return out


@torch.no_grad()
def from_state(config: dict, state: dict[str, Tensor]) -> torch.nn.Module:
    """A zoo T5 with the shape of ``config`` (an HF T5 config dict) holding ``state``."""
    shape = t5_shape(config, head_is_tied(state))
    net = build_net("t5", shape_overrides(shape), {"vocab_size": config["vocab_size"] - EXTRA})
    load_mapped(net, _state_dict(state, shape))
    return net.eval()


def _state_dict(state: dict[str, Tensor], shape: dict[str, Any]) -> dict[str, Tensor]:
    """:func:`t5_state_dict` for a checkpoint of ``shape``."""
    return t5_state_dict(state, shape["n_encoder_layers"], shape["n_decoder_layers"], shape["block.gated"],
                         shape["tie_embeddings"])


def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo T5 holding a ``T5ForConditionalGeneration``'s weights."""
    return from_state(hf_model.config.to_dict(), hf_model.state_dict())


def load_pretrained(directory: str | Path) -> torch.nn.Module:
    """A zoo T5 from an HF checkpoint directory (``config.json`` + weights, sharded or not)."""
    return from_state(*read_checkpoint_dir(directory, MODEL_TYPES))


def sentinel_tokenizer(path: str | Path) -> HFTokenizer | None:
    """The folder's tokenizer where it holds T5's sentinels (a Hugging Face T5's layout:
    ``<extra_id_0>`` .. among its ids, which the weights' rows cover, padded above), else None
    (the zoo's layout: the data's ids + the 102 model=t5 adds; a folder of weights alone)."""
    try:
        tokenizer = HFTokenizer.from_pretrained_dir(path)
    except FileNotFoundError:
        return None
    return tokenizer if holds_sentinels(tokenizer) else None


def check_start(config: dict, tokenizer: HFTokenizer, path: str) -> None:
    """A folder whose tokenizer holds the sentinels starts decoding from its pad token (T5's
    convention, which data=multi30k follows for a tokenizer without ``<s>``)."""
    pad = tokenizer.token_id(first_token(tokenizer, TEXT_PAD, "padding", path))
    start = config.get("decoder_start_token_id", pad)
    if start != pad:
        raise ValueError(f"{path}/config.json has decoder_start_token_id={start}, but its tokenizer's pad token is "
                         f"id {pad}: the zoo starts T5's decoder from the pad token")


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], torch.nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the T5 folder at ``path``, the net
    holding its weights). The net's vocabulary is the checkpoint's ``vocab_size``: the data's plus
    the zoo's 102 added ids, or, where the folder's tokenizer holds the sentinels itself
    (:func:`sentinel_tokenizer`), at least the data's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = t5_shape(config, head_is_tied(state))
    tokenizer = sentinel_tokenizer(path)
    check_vocab(net_cfg, "encoder_embedder.vocab_size", config["vocab_size"], path, added=EXTRA,
                padded=tokenizer is not None)
    if tokenizer is not None:
        check_start(config, tokenizer, path)
    return init_net(net_cfg, shape, _state_dict(state, shape))


def feed_forward_proj(net: dict[str, Any]) -> str:
    """T5's ``feed_forward_proj`` of the zoo net (``gated-gelu`` means the tanh GELU in T5Config,
    a plain ``gelu`` the exact one, so a gated exact GELU has no name)."""
    act, gated = net["block"]["activation"], net["block"]["gated"]
    names = ({"relu": "relu", "gelu_tanh": "gelu", "silu": "silu"} if gated else
             {"relu": "relu", "gelu_tanh": "gelu_new", "gelu": "gelu", "silu": "silu"})
    if act not in names:
        raise ValueError(f"block.activation={act!r} (gated={gated}) has no T5ForConditionalGeneration equivalent "
                         f"(it has {sorted(names)})")
    return ("gated-" if gated else "") + names[act]


def _untie(hf: torch.nn.Module, net: dict[str, Any]) -> None:
    """transformers 5 ties T5's head to the embedding whatever the config says: v1.1 (a head of
    its own) needs its own tensor, which ``from_pretrained`` keeps when the two differ."""
    if not net["tie_embeddings"]:
        hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach().clone())


FAMILY = Family(
    hf_class="T5ForConditionalGeneration", config_class="T5Config",
    keys={"num_layers": "n_encoder_layers", "num_decoder_layers": "n_decoder_layers", "n_positions": "context",
          "d_model": "block.d_model", "num_heads": "block.n_heads", "d_kv": "block.head_dim", "d_ff": "block.d_ff",
          "layer_norm_epsilon": "block.norm_eps", "dropout_rate": "block.dropout", "vocab_size": "head.vocab_size",
          "relative_attention_num_buckets": "encoder_bias.num_buckets",
          "relative_attention_max_distance": "encoder_bias.max_distance"},
    shape=lambda config, net: t5_shape(config, net["tie_embeddings"]),
    state_dict=lambda sd, net: t5_state_dict(sd, net["n_encoder_layers"], net["n_decoder_layers"],
                                             net["block"]["gated"], net["tie_embeddings"]),
    example=lambda net: (tokens(net, "head.vocab_size"), tokens(net, "head.vocab_size", 12)),
    outputs=lambda hf, x: hf(input_ids=x[0], decoder_input_ids=x[1]).logits,
    extra=lambda net: {"feed_forward_proj": feed_forward_proj(net), "scale_decoder_outputs": net["head"]["scale"] != 1.0},
    prepare=_untie)

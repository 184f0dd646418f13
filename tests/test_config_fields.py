"""Every field of a family's ``transformers`` config class, at a value other than its default, is
either implemented by the zoo's converter (the zoo net's logits equal the reference's) or refused in
one line naming the field: never loaded and different.

The families come from the registry (:func:`zoo.convert.families.declared`); each covered one has a
tiny configuration here (:data:`TINY`, 2 layers, 32 wide, a small vocabulary). A field is perturbed
by :func:`perturbed` (numbers scaled, booleans flipped, strings to another legal value, None to a
plausible value, a rotary table to a linearly scaled one); a value ``transformers`` itself rejects
(at construction or in its forward) is skipped: there is nothing to be exact against. The reference
is drawn away from its init (:func:`exactness.randomise`) and run on an odd length (13 tokens), no
padding (each family's own exactness test pads). The default suite runs the fields of Llama, GPT-2
and BERT that change the computation; the rest is ``slow``."""

from __future__ import annotations

import importlib
from typing import Any, Callable

import pytest
import torch
import transformers as T

from exactness import assert_matches, randomise
from zoo.convert.common import GENERIC_KEYS
from zoo.convert.decoder import Decoder
from zoo.convert.families import declared
from zoo.convert.wav2vec2 import waves

LENGTH = 13  # an odd length, shorter than every tiny context
DECODER = {"vocab_size": 61, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
ENCODER = {"vocab_size": 61, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
           "num_attention_heads": 4, "max_position_embeddings": 32}
BART = {"vocab_size": 61, "max_position_embeddings": 32, "encoder_layers": 2, "decoder_layers": 2, "d_model": 32,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48}
TOWER = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4}
TEXT_TOWER = TOWER | {"vocab_size": 61, "max_position_embeddings": 16}  # CLIP's, SigLIP's
VISION_TOWER = TOWER | {"image_size": 16, "patch_size": 4}
VISION = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
          "image_size": 16, "patch_size": 4, "num_labels": 3}
DINOV2 = {k: v for k, v in VISION.items() if k != "intermediate_size"}  # its width: mlp_ratio
VIDEO = {k: v for k, v in VISION.items() if k != "patch_size"} | {"num_frames": 4}  # its patches: tubelets
AUDIO = {k: v for k, v in ENCODER.items() if k != "max_position_embeddings"} | {
    "conv_dim": [16, 16], "conv_kernel": [5, 3], "conv_stride": [3, 2], "num_conv_pos_embeddings": 8,
    "num_conv_pos_embedding_groups": 4}
# family module -> its tiny config's values (a sub-config's under its key: text_config, vision_config) (the class is its FAMILY's config_class)
TINY: dict[str, dict[str, Any]] = {
    "llama": DECODER, "mistral": DECODER | {"sliding_window": 5}, "qwen2": DECODER, "qwen3": DECODER | {"head_dim": 8},
    "olmo2": DECODER, "phi3": DECODER | {"pad_token_id": 0},
    "gemma2": DECODER | {"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 5},
    "gemma3": DECODER | {"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 5, "layer_types":
                         ["sliding_attention", "full_attention"]},
    "embeddinggemma": DECODER | {"head_dim": 8, "query_pre_attn_scalar": 8, "sliding_window": 6, "layer_types":
                                 ["sliding_attention", "full_attention"], "use_bidirectional_attention": True},
    "mixtral": DECODER | {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": DECODER | {"head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24},
    "gpt2": {"vocab_size": 61, "n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 4},
    "bert": ENCODER,
    "roberta": ENCODER | {"max_position_embeddings": 34}, "xlm_roberta": ENCODER | {"max_position_embeddings": 34},
    "vit": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
            "image_size": 16, "patch_size": 4, "num_labels": 3},
    "deit": VISION, "dinov2": DINOV2, "dinov2_registers": DINOV2 | {"num_register_tokens": 2},
    "beit": VISION | {"use_relative_position_bias": True},
    "swin": {"embed_dim": 16, "depths": [2, 2], "num_heads": [2, 4], "window_size": 2, "image_size": 16,
             "patch_size": 2, "num_labels": 3},
    "vivit": VIDEO | {"tubelet_size": [2, 4, 4]}, "videomae": VIDEO | {"tubelet_size": 2, "patch_size": 4},
    "vitdet": {"hidden_size": 32, "mlp_ratio": 2, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 16,
               "pretrain_image_size": 16, "patch_size": 4, "window_size": 2, "window_block_indices": [1]},
    "wav2vec2": AUDIO, "hubert": AUDIO,
    "yolos": VISION | {"image_size": [16, 16], "use_mid_position_embeddings": False, "num_detection_tokens": 3},
    "gpt_neo": {"vocab_size": 61, "hidden_size": 32, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 32,
                "window_size": 5, "attention_types": [[["global", "local"], 1]]},
    "distilbert": {"vocab_size": 61, "dim": 32, "hidden_dim": 48, "n_layers": 2, "n_heads": 4,
                   "max_position_embeddings": 32},
    "gpt_neox": {"vocab_size": 61, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "max_position_embeddings": 32},
    "bloom": {"vocab_size": 61, "hidden_size": 32, "n_layer": 2, "n_head": 4, "seq_length": 32},
    "bart": BART, "mbart": BART,
    "whisper": {"vocab_size": 61, "num_mel_bins": 8, "encoder_layers": 2, "decoder_layers": 2, "d_model": 32,
                "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48,
                "max_source_positions": 16, "max_target_positions": 32, "pad_token_id": 0, "bos_token_id": 0,
                "eos_token_id": 0, "decoder_start_token_id": 0},
    "modernbert": ENCODER | {"local_attention": 4, "pad_token_id": 0},
    "big_bird": ENCODER | {"max_position_embeddings": 64, "block_size": 2, "num_random_blocks": 1, "pad_token_id": 0},
    "clip": {"projection_dim": 16, "text_config": TEXT_TOWER | {"eos_token_id": 5}, "vision_config": VISION_TOWER},
    "siglip": {"text_config": TEXT_TOWER | {"eos_token_id": 5}, "vision_config": VISION_TOWER},
    "llava": {"text_config": DECODER | {"max_position_embeddings": 128}, "vision_config": VISION_TOWER,
              "image_token_index": 60},
    "t5": {"vocab_size": 61, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2, "num_heads": 4},
}
CHEAP = ("llama", "gpt2", "bert")  # the default suite's share (its fields that compute); the rest is slow
# The registry's families this test does not cover yet (each named, none silently):
# the *ForSequenceClassification exports (task=classify): their import is the base family's (its keys checked
# by the base's declaration, swept above); the classifier's own keys (num_labels, id2label) are not swept yet
NOT_COVERED = {"bert_classifier", "roberta_classifier", "distilbert_classifier"}
# the bare encoders (task=embed): their import is the base family's too, their config its config
NOT_COVERED |= {"bert_model", "roberta_model", "distilbert_model"}
NOT_COVERED |= {"bert_qa", "roberta_qa", "distilbert_qa"}  # the *ForQuestionAnswering exports (task=qa), likewise
NOT_COVERED |= {"bert_tagger", "roberta_tagger", "distilbert_tagger"}  # the *ForTokenClassification exports (task=tag), likewise
NOT_COVERED |= {"modernbert_classifier", "llama_classifier", "qwen2_classifier", "qwen3_classifier"}  # likewise

# None -> a plausible value, by field (a None field not named here has no such value in a tiny
# model: a token id it never sees, a size derived from the others)
FROM_NONE = {"sliding_window": 5, "head_dim": 16, "n_inner": 40, "intermediate_size": 40,
             "attn_logit_softcapping": 5.0, "final_logit_softcapping": 5.0, "use_bidirectional_attention": True,
             "pad_token_id": 3, "bos_token_id": 3, "eos_token_id": 3, "classifier_dropout": 0.3,
             "summary_activation": "tanh", "adapter_attn_dim": 16}
# a string field -> legal values, the first that differs from the tiny config's is taken
OTHER_STRING = {"hidden_act": ("gelu", "relu"), "activation": ("gelu", "relu"), "hidden_activation": ("gelu", "relu"),
                "activation_function": ("relu", "gelu"), "summary_type": ("last",), "problem_type": ("regression",),
                "position_embedding_type": ("relative_key",), "pooler_act": ("relu",),
                "feed_forward_proj": ("gated-gelu",), "dense_act_fn": ("gelu", "relu"),
                "classifier_activation": ("gelu", "relu"), "classifier_pooling": ("mean",),
                "attention_type": ("original_full",), "vision_feature_select_strategy": ("full",),
                "projector_hidden_act": ("relu",),
                "feat_extract_activation": ("gelu", "relu"), "feat_extract_norm": ("group", "layer"),
                "ctc_loss_reduction": ("sum", "mean")}  # the last three: wav2vec 2.0's, HuBERT's
# a field whose value has a structure of its own -> another value of that structure
OTHER_VALUE = {"attention_types": [[["local", "global"], 1]], "attention_layers": ["local", "global"],  # GPT-Neo
               "out_features": ["stage1"], "out_indices": [1], "stage_names": ["stem", "stage1"],  # vision backbones
               "pool_scales": [1, 2]}  # BEiT's segmentation head
SKIP = object()


def perturbed(key: str, value: Any) -> Any:
    """``value`` (the tiny config's) moved to another plausible value, or :data:`SKIP`."""
    if key in OTHER_VALUE:
        return OTHER_VALUE[key]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 if value else 1
    if isinstance(value, float):
        return value * 2 if value else 0.25
    if value is None:
        return FROM_NONE.get(key, SKIP)
    if isinstance(value, str):
        # model_type, transformers_version, ...: not a choice of computation
        return next((other for other in OTHER_STRING.get(key, ()) if other != value), SKIP)
    if isinstance(value, dict) and "rope_type" in value:
        return value | {"rope_type": "linear", "factor": 2.0}
    if isinstance(value, dict) and value and all(isinstance(v, dict) and "rope_type" in v for v in value.values()):
        return {kind: table | {"rope_type": "linear", "factor": 2.0} for kind, table in value.items()}
    if isinstance(value, list) and value and all(kind in ("full_attention", "sliding_attention") for kind in value):
        swap = {"full_attention": "sliding_attention", "sliding_attention": "full_attention"}
        return [swap[kind] for kind in value]
    if isinstance(value, list) and not value:
        return [0]  # mlp_only_layers: the first layer dense
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [v * 2 for v in value]  # Swin's depths and heads per stage
    return SKIP  # label maps, architectures: no computation


def converter(family: str) -> Callable[[torch.nn.Module], torch.nn.Module]:
    """``from_transformers`` of the family module (its :class:`Decoder`'s, for the shared decoders)."""
    module = importlib.import_module(f"zoo.convert.{family}")
    decoders = [value for value in vars(module).values()  # the family's own (LLaVA's module imports Llama's)
                if isinstance(value, Decoder) and value.hf_class == declared()[family].hf_class]
    return decoders[0].from_transformers if decoders else module.from_transformers


def example(config: dict[str, Any]) -> torch.Tensor:
    """(2, 13) token ids of the config's vocabulary (BigBird's: past its full attention; and (2, 11) the decoder's, of an encoder-decoder;
    after Whisper's log-mel frames), (2, C, S, S) images of its size, (2, F, C, S, S) clips of its
    frames, (2, T) waveforms of a dozen output vectors (wav2vec 2.0's), or a two-tower or LLaVA input."""
    gen = torch.Generator().manual_seed(1)
    if "image_token_index" in config:
        return prompt(config, gen)
    if "text_config" in config and "vision_config" in config:
        return captions(config["text_config"], gen), example(config["vision_config"])
    if "conv_kernel" in config:
        torch.manual_seed(1)
        return waves({"embedder": config})
    if "num_frames" in config:
        size = (config["num_frames"], config["num_channels"], config["image_size"], config["image_size"])
        return torch.randn(2, *size, generator=gen)
    if "image_size" in config:
        side = config["image_size"]
        sides = tuple(side) if isinstance(side, list) else (side, side)  # YOLOS's: (height, width)
        return torch.randn(2, config["num_channels"], *sides, generator=gen)
    length = LENGTH
    if "block_size" in config:  # BigBird: long enough to stay block-sparse (Hugging Face falls back to full below)
        length = (6 + 2 * config["num_random_blocks"]) * config["block_size"] + 1
    ids = torch.randint(0, config["vocab_size"], (2, length), generator=gen)
    if "num_mel_bins" in config:  # Whisper: log-mel frames, twice the encoder's positions
        return torch.randn(2, config["num_mel_bins"], 2 * config["max_source_positions"], generator=gen), ids
    if config.get("is_encoder_decoder"):
        return ids, torch.randint(0, config["vocab_size"], (2, LENGTH - 2), generator=gen)
    return ids


def captions(text: dict[str, Any], gen: torch.Generator) -> torch.Tensor:
    """(2, 13) token ids of a two-tower model's text config, ending in its end of text (CLIP pools there)."""
    ids = torch.randint(0, text["vocab_size"], (2, LENGTH), generator=gen)
    eos = text.get("eos_token_id")
    if eos is not None:
        ids[ids == eos] = (eos + 1) % text["vocab_size"]
        ids[:, -1] = eos
    return ids


def prompt(config: dict[str, Any], gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaVA's (2, L) ids, an image's placeholders after the first token, and its (2, C, S, S) images."""
    text, vision, image_id = config["text_config"], config["vision_config"], config["image_token_index"]
    ids = torch.randint(0, text["vocab_size"], (2, LENGTH), generator=gen)
    ids[ids == image_id] = (image_id + 1) % text["vocab_size"]
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    placeholders = torch.full((2, patches + (config["vision_feature_select_strategy"] == "full")), image_id)
    return torch.cat([ids[:, :1], placeholders, ids[:, 1:]], 1), example(vision)


def with_changed(tiny: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    """The tiny config with ``changed`` (a sub-config's field as ``text_config.<field>``)."""
    out = dict(tiny)
    for key, value in changed.items():
        sub, _, name = key.rpartition(".")
        if sub:
            out[sub] = out.get(sub, {}) | {name: value}
        else:
            out[key] = value
    return out


def reference(family: str, changed: dict[str, Any]) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor] | None:
    """(the Hugging Face model of the tiny config with ``changed``, the input, its logits), or None
    where transformers rejects that config."""
    exported = declared()[family]
    try:
        config = getattr(T, exported.config_class)(**with_changed(TINY[family], changed))
        torch.manual_seed(0)
        hf = randomise(getattr(T, exported.hf_class)(config).eval())
        x = example(config.to_dict())
        with torch.no_grad():
            return hf, x, exported.outputs(hf, x)
    except Exception:  # transformers refuses the value (a ValueError, a shape error in its forward, ...)
        return None


@torch.no_grad()
def check_field(family: str, key: str, value: Any) -> str:
    """``key=value`` on the family's tiny config: refused naming ``key`` in one line, or exact.
    Returns what happened ("refused", "exact", or why it was skipped)."""
    if value is SKIP:
        return "no other value"
    made = reference(family, {key: value})
    if made is None:
        return "transformers rejects it"
    hf, x, logits = made
    try:
        net = converter(family)(hf).eval()
    except (ValueError, SystemExit) as err:
        message = str(err)
        assert field_name(key) in message, f"{family} {key}={value!r}: refused without naming {key!r}: {message}"
        assert "\n" not in message, f"{family} {key}={value!r}: the refusal is not one line: {message}"
        return "refused"
    assert_matches(declared()[family].ours(net, x), logits, what=f"{family} with {key}={value!r}")
    return "exact"


def tiny_fields(family: str) -> dict[str, Any]:
    """Every field of the family's config class, as its ``to_dict`` writes the tiny config; a
    sub-config's (CLIP's ``text_config``, ...) each as ``text_config.<field>``."""
    fields: dict[str, Any] = {}
    for key, value in getattr(T, declared()[family].config_class)(**TINY[family]).to_dict().items():
        if key.endswith("_config") and isinstance(value, dict):
            fields |= {f"{key}.{name}": sub_value for name, sub_value in value.items()}
        else:
            fields[key] = value
    return fields


def field_name(key: str) -> str:
    """The field's own name (of ``text_config.hidden_act``: ``hidden_act``)."""
    return key.rpartition(".")[2]


# (family, field) for every field of every covered family's config class; the default suite checks
# the fields of CHEAP's families that change the computation (not PretrainedConfig's bookkeeping)
FIELDS = [pytest.param(family, key, marks=() if family in CHEAP and field_name(key) not in GENERIC_KEYS else pytest.mark.slow,
                       id=f"{family}-{key}")
          for family in TINY for key in tiny_fields(family)]


def test_every_registry_family_is_covered_or_named():
    """A family added to the registry is swept here or named in :data:`NOT_COVERED`."""
    assert set(declared()) == set(TINY) | NOT_COVERED
    assert not set(TINY) & NOT_COVERED


@pytest.mark.parametrize("family, key", FIELDS)
def test_a_config_field_is_exact_or_refused_by_name(family, key):
    check_field(family, key, perturbed(field_name(key), tiny_fields(family)[key]))


@pytest.mark.parametrize("family", list(TINY))
def test_the_sweep_checks_the_fields_that_compute(family):
    """Most fields are perturbed to a value the sweep can check (a field left at "no other value"
    is named in :data:`FROM_NONE` / :data:`OTHER_STRING` or is bookkeeping)."""
    values = {key: perturbed(field_name(key), value) for key, value in tiny_fields(family).items()}
    unchecked = sorted(key for key, value in values.items() if value is SKIP and field_name(key) not in GENERIC_KEYS)
    assert unchecked == [], f"{family}: no perturbation for {unchecked}"

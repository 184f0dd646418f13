"""``model.init_from=DIR`` of a Hugging Face folder whose config.json says something the weights or
the zoo's defaults would otherwise silently contradict: each case loads as transformers 5's
``from_pretrained`` loads it (the same logits) or is refused in one line naming the folder's key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as T
from safetensors.torch import load_file, save_file

from exactness import assert_matches, randomise
from test_init_from import VIT_DIMS, objective_from
from zoo.convert.gemma3 import GEMMA3
from zoo.convert.llama import LLAMA

VOCAB = 61
LLAMA_SHAPE = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}


def saved(model: torch.nn.Module, folder: Path, **config) -> Path:
    """``model`` (drawn away from its init) written by ``save_pretrained`` to ``folder``, its config.json
    then edited to hold ``config``'s values (a key set to None is removed)."""
    randomise(model).save_pretrained(folder)
    written = json.loads((folder / "config.json").read_text())
    written.update(config)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in written.items() if v is not None}))
    return folder


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def assert_loads_as_transformers(folder: Path, model: str, hf_class: type) -> None:
    """The zoo's ``model.init_from=folder`` gives the logits of transformers' ``from_pretrained``."""
    reference = hf_class.from_pretrained(folder).eval()
    net = objective_from(model, folder, {"vocab_size": VOCAB}).net.eval()
    x = tokens()
    assert_matches(net(x), reference(x).logits, what=f"{model} from {folder.name}")


def refusal(folder: Path, model: str) -> str:
    """The one-line message ``model.init_from=folder`` is refused with."""
    with pytest.raises((ValueError, SystemExit)) as err:
        objective_from(model, folder, {"vocab_size": VOCAB})
    message = str(err.value)
    assert "\n" not in message, message
    return message


def llama(tie: bool = False) -> T.LlamaForCausalLM:
    torch.manual_seed(0)
    return T.LlamaForCausalLM(T.LlamaConfig(**LLAMA_SHAPE, tie_word_embeddings=tie))


@pytest.mark.parametrize("model, hf_class, build", [
    ("llama", T.LlamaForCausalLM, llama),
    ("gpt", T.GPT2LMHeadModel, lambda: T.GPT2LMHeadModel(T.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4, tie_word_embeddings=False))),
])
def test_a_tied_config_beside_its_own_head_loads_both_as_transformers_does(tmp_path, model, hf_class, build):
    """tie_word_embeddings=true with an lm_head.weight of other values: transformers keeps both, untied
    (the zoo once overwrote the embedding with the head)."""
    folder = saved(build(), tmp_path, tie_word_embeddings=True)
    assert "lm_head.weight" in load_file(folder / "model.safetensors")
    assert_loads_as_transformers(folder, model, hf_class)


def test_an_untied_config_without_a_head_is_refused_naming_the_key(tmp_path):
    """tie_word_embeddings=false and no lm_head.weight: transformers draws the head at random, so the
    zoo cannot match it (it once copied the embedding)."""
    folder = saved(llama(), tmp_path)
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if k != "lm_head.weight"}, folder / "model.safetensors",
              metadata={"format": "pt"})
    assert "tie_word_embeddings=False" in refusal(folder, "llama")


def test_old_style_rope_scaling_beside_a_default_rotary_table_is_applied(tmp_path):
    """A config.json with rope_scaling {type: linear, factor: 4} beside rope_parameters {rope_type:
    default}: transformers 5 rotates with the scaled table (rope_scaling replaces rope_parameters)."""
    folder = saved(llama(), tmp_path, rope_scaling={"type": "linear", "factor": 4.0})
    assert T.LlamaConfig.from_pretrained(folder).rope_parameters["rope_type"] == "linear"
    assert_loads_as_transformers(folder, "llama", T.LlamaForCausalLM)


def test_a_scaled_rotary_table_the_zoo_lacks_is_refused_naming_it(tmp_path):
    folder = saved(llama(), tmp_path, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    assert "rope_type='dynamic'" in refusal(folder, "llama")


def test_a_config_key_no_converter_knows_is_refused_naming_it():
    config = T.LlamaConfig(**LLAMA_SHAPE).to_dict() | {"attn_temperature_tuning": True}
    with pytest.raises(ValueError, match=r"^llama config: attn_temperature_tuning=True is not implemented by the zoo"):
        LLAMA.shape(config)


@torch.no_grad()
def test_gemma3_ignores_attn_logit_softcapping_as_transformers_does():
    """Gemma3Attention keeps ``attn_logit_softcapping`` but never caps with it (transformers 5)."""
    torch.manual_seed(0)
    hf = randomise(T.Gemma3ForCausalLM(T.Gemma3TextConfig(
        **LLAMA_SHAPE, head_dim=8, query_pre_attn_scalar=8, sliding_window=5, attn_logit_softcapping=0.5,
        layer_types=["sliding_attention", "full_attention"])).eval())
    x = tokens()
    assert_matches(GEMMA3.from_transformers(hf).eval()(x), hf(x).logits, what="Gemma 3 with attn_logit_softcapping")


def test_more_experts_per_token_than_experts_is_refused_naming_the_folders_key(tmp_path):
    """num_experts_per_tok above num_local_experts: refused before the net is built, naming the
    folder's key (not the zoo's block.top_k)."""
    torch.manual_seed(0)
    hf = T.MixtralForCausalLM(T.MixtralConfig(**LLAMA_SHAPE, num_local_experts=4, num_experts_per_tok=2))
    message = refusal(saved(hf, tmp_path, num_experts_per_tok=5), "mixtral")
    assert "num_experts_per_tok=5" in message and "top_k" not in message.replace("num_experts_per_tok", "")


@pytest.mark.parametrize("kind", ["gemma2", "gemma3"])
def test_gemma_sliding_layers_without_a_window_are_refused_naming_it(tmp_path, kind):
    """sliding_window: null beside sliding layers: transformers 5 refuses to run it too."""
    config_class, hf_class = {"gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM),
                              "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM)}[kind]
    config = config_class(**LLAMA_SHAPE, head_dim=8, sliding_window=None,
                          layer_types=["sliding_attention", "full_attention"])
    torch.manual_seed(0)
    hf = hf_class(config).eval()
    with pytest.raises((ValueError, TypeError)):  # a ValueError naming sliding_window, or a TypeError before it
        hf(tokens())
    hf.save_pretrained(tmp_path)
    assert "sliding_window=None" in refusal(tmp_path, kind)


@torch.no_grad()
def test_a_window_wider_than_the_context_runs_as_transformers_does(tmp_path):
    """Qwen2 sliding layers under a window past max_position_embeddings cut nothing: transformers runs
    them as causal layers, so does the zoo (its LocalMask refuses a window it would never use)."""
    torch.manual_seed(0)
    hf = T.Qwen2ForCausalLM(T.Qwen2Config(**LLAMA_SHAPE, use_sliding_window=True, sliding_window=64,
                                          max_window_layers=1))
    assert_loads_as_transformers(saved(hf, tmp_path), "qwen2", T.Qwen2ForCausalLM)


def test_a_swin_window_larger_than_a_stage_grid_is_refused_naming_it(tmp_path):
    """window_size 5 over 32-pixel images in patches of 4: the second stage's grid is 4 x 4, which the
    window's relative position table does not fit (transformers fails in its forward)."""
    config = T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=5,
                          num_labels=10)
    torch.manual_seed(0)
    T.SwinForImageClassification(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as err:
        objective_from("swin", tmp_path, VIT_DIMS)
    assert "window_size=5" in str(err.value) and "4 x 4" in str(err.value) and "\n" not in str(err.value)

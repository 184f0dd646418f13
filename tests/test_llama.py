"""The Llama preset: exact against Hugging Face, and trainable with train.py's objective."""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.llama import from_transformers  # noqa: E402


def tiny_llama(tie: bool = False):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-6, tie_word_embeddings=tie,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    if not tie:  # transformers may tie a tiny model's head despite the config: give it its own
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        assert_untied(model)
    return randomise(model)


@pytest.mark.parametrize("tie", [False, True])
def test_llama_logits_match_transformers(tie):
    hf = tiny_llama(tie)
    net = from_transformers(hf).eval()
    tokens, real = padded_tokens(97, 37)  # one row right-padded, one left-padded
    # fp32 only: Llama's rotary tables compute in float32 whatever the dtype (float64 is ~5e-7 off)
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="Llama logits")


def test_llama_cached_decoding_matches_full_forward():
    net = from_transformers(tiny_llama()).eval()
    tokens = torch.randint(0, 97, (2, 20))
    with torch.no_grad():
        full = net(tokens)
        cache = net.new_cache()
        steps = [net(tokens[:, :12], cache=cache)] + [net(tokens[:, t : t + 1], cache=cache) for t in range(12, 20)]
    assert_matches(torch.cat(steps, dim=1), full, what="cached decoding")


def test_llama_preset_is_rmsnorm_swiglu_gqa_untied():
    cfg = compose_config(["model=llama"])
    block = cfg.model.net.block
    assert (block.norm, block.activation, block.gated, block.n_kv_heads) == ("rmsnorm", "silu", True, 2)
    assert not any(block[f"bias_{k}"] for k in ("q", "k", "v", "out", "ffn"))
    assert cfg.model.net.rotary and not cfg.model.net.tie_embeddings


def test_train_llama_on_shakespeare_few_steps(tmp_path):
    from omegaconf import open_dict

    from zoo.train.run import train

    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text("First Citizen:\nBefore we proceed.\n" * 200)
    cfg = compose_config([
        "model=llama", "data=tinyshakespeare", "data.check=false", f"paths.data_dir={tmp_path / 'data'}",
        f"paths.output_dir={tmp_path / 'out'}", "trainer.max_steps=3", "trainer.val_check_interval=3",
        "trainer.limit_val_batches=1", "data.val_batches=1", "data.batch_size=2", "+model.sample_tokens=5",
        "+trainer.enable_progress_bar=false", "~callbacks.progress_bar",
    ])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "out")
    metrics = train(cfg)
    # the reported perplexity is the loss's, and three steps on one repeated line beat guessing
    # uniformly among its characters (at init the loss is ln V or above)
    assert metrics["test/ppl"] == pytest.approx(math.exp(metrics["test/loss"]), rel=1e-5)
    assert metrics["test/loss"] < math.log(len(set("First Citizen:\nBefore we proceed.\n")))

"""The Qwen2 preset: exact against Hugging Face (q/k/v biases, per-layer sliding window, padding),
cached decoding against recomputation and transformers' greedy ``generate``, read from a folder
(``model.init_from=DIR``, the released Qwen2.5-0.5B layout too) and exported back (``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.qwen2 import QWEN2, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW = 8
# Qwen/Qwen2.5-0.5B's config.json (a Qwen2ForCausalLM), scaled down in width and depth only (896 wide,
# 24 layers of 14 heads / 2 kv heads of 64, d_ff 4864 -> 64 wide, 2 layers of 4 heads / 2 kv heads of
# 16, d_ff 176): its vocabulary, tied head, rotary base and context kept; no layer slides
QWEN25_0_5B = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 176,
    "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}


def tiny_qwen2(sliding: bool = True, **config):
    """3 layers, the first full and the last two sliding (``max_window_layers=1``) when ``sliding``."""
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=5000.0,
        use_sliding_window=sliding, sliding_window=WINDOW, max_window_layers=1, attn_implementation="sdpa", **config)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # its own head
    assert_untied(model)
    return randomise(model)


@pytest.mark.parametrize("sliding", [True, False])
@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
def test_qwen2_logits_match_transformers(sliding, length):
    hf = tiny_qwen2(sliding)
    net = from_transformers(hf).eval()
    local = LocalMask(WINDOW, causal=True)
    assert net.stack.layer_masks == ([CausalMask(), local, local] if sliding else [CausalMask()] * 3)
    attn = net.stack.blocks[0].attn
    assert all(getattr(attn, p).bias is not None for p in "qkv") and attn.out.bias is None
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    # fp32 only: Qwen2's rotary tables compute in float32 whatever the dtype
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="Qwen2 logits")
    if sliding and length > WINDOW:
        hf.config.layer_types = ["full_attention"] * 3  # the same weights without the window: it must matter
        hf.model.has_sliding_layers = False
        for layer in hf.model.layers:
            layer.attention_type = layer.self_attn.layer_type = "full_attention"
            layer.self_attn.sliding_window = None
        with torch.no_grad():
            full = hf(tokens, attention_mask=real.long()).logits
        assert (full[0, WINDOW:] - ref[0, WINDOW:]).abs().max() > 1e-3


def test_qwen2_layer_types_that_slide_without_a_window_are_refused():
    config = tiny_qwen2(False).config.to_dict() | {"layer_types": ["full_attention", "sliding_attention", "full_attention"]}
    with pytest.raises(ValueError, match="layer_types names sliding_attention layers but use_sliding_window=False"):
        QWEN2.shape(config)


def test_qwen2_preset_is_llama_with_qkv_biases():
    net = compose_config(["model=qwen2"]).model.net
    assert (net.block.bias_q, net.block.bias_k, net.block.bias_v, net.block.bias_out) == (True, True, True, False)
    assert net.mask._target_ == "zoo.nn.masks.CausalMask" and net.rotary and net.block.norm == "rmsnorm"
    big = compose_config(["model=qwen2_0_5b"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.tie_embeddings) == \
        (24, 896, 14, 2, True)


@torch.no_grad()
def test_qwen2_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: a save_pretrained folder, its sliding layers included, through the shared reader."""
    model = check_folder(tmp_path, tiny_qwen2(), QWEN2)
    assert model.net.stack.layer_masks == [CausalMask(), LocalMask(WINDOW, causal=True), LocalMask(WINDOW, causal=True)]
    assert model.hparams.net["mask"]["_target_"] == "zoo.nn.masks.PerLayer"


@pytest.mark.parametrize("sliding", [True, False])
def test_qwen2_cached_decoding_equals_recomputation_and_transformers_generate(sliding):
    """21 tokens: past the window of the sliding layers, whose cache then keeps only the window."""
    hf = tiny_qwen2(sliding)
    check_generation(hf, from_transformers(hf).eval(), 97)


@torch.no_grad()
def test_qwen2_5_0_5b_layout_folder_gives_the_hf_logits(tmp_path):
    """The released Qwen2.5-0.5B config.json (scaled down in width and depth), written by save_pretrained."""
    hf = randomise(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**QWEN25_0_5B)).eval())
    net = check_folder(tmp_path, hf, QWEN2).hparams.net
    assert (net["tie_embeddings"], net["rotary_base"], net["context"], net["mask"]["_target_"]) == \
        (True, 1e6, 32768, "zoo.nn.masks.CausalMask")


@pytest.mark.parametrize("sliding", [True, False])
def test_qwen2_round_trips_through_the_export(sliding):
    hf = tiny_qwen2(sliding)
    assert check_round_trip(hf, QWEN2).config.layer_types == hf.config.layer_types


def test_zoo_export_writes_a_qwen2_folder_transformers_loads(tmp_path, capsys):
    assert check_zoo_export(tmp_path, capsys, QWEN2)["model_type"] == "qwen2"
"""The Phi-3 preset: exact against Hugging Face (fused qkv_proj / gate_up_proj cut by the shared
decoder mapping, a sliding window in every layer, grouped-query attention, padding), rolling-cache
decoding, read from a folder (``model.init_from=DIR``, the released layout too) and exported back
(the fused weights stacked again; ``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from windowed import greedy_decoding_kept_keys  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.phi3 import PHI3, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW = 8
# microsoft/Phi-3-mini-4k-instruct's config.json, scaled down in width and depth only (3072 wide,
# 32 layers of 32 heads, d_ff 8192 -> 64 wide, 2 layers of 4 heads, d_ff 160); its window of 2047 in
# a context of 4096 kept, so the window cuts only past 2047 positions
PHI3_MINI = {
    "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
    "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 160, "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 4, "original_max_position_embeddings": 4096,
    "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
    "sliding_window": 2047, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 32064,
}


def tiny_phi3(window: int | None = WINDOW, **config):
    """3 layers, 4 heads / 2 kv heads (Phi-3-medium's grouping): the fused q/k/v rows are uneven."""
    torch.manual_seed(0)
    cfg = transformers.Phi3Config(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-5, rope_theta=5000.0,
        sliding_window=window, pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="sdpa", **config)
    model = transformers.Phi3ForCausalLM(cfg).eval()
    assert_untied(model)
    return randomise(model)  # the norms too: away from their init of ones


@pytest.mark.parametrize("window", [WINDOW, None])
@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
def test_phi3_logits_match_transformers(window, length):
    hf = tiny_phi3(window)
    net = from_transformers(hf).eval()
    assert net.stack.layer_masks == [LocalMask(WINDOW, causal=True) if window else CausalMask()] * 3
    attn, ffn = net.stack.blocks[0].attn, net.stack.blocks[0].ffn
    assert (attn.q.weight.shape, attn.k.weight.shape, ffn.gate.weight.shape) == ((64, 64), (32, 64), (176, 64))
    fused = hf.model.layers[0].self_attn.qkv_proj.weight
    assert torch.equal(attn.k.weight, fused[64:96]) and torch.equal(attn.v.weight, fused[96:])
    assert torch.equal(ffn.fc_in.weight, hf.model.layers[0].mlp.gate_up_proj.weight[176:])  # up: the second half
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    # fp32 only: Phi-3's RMSNorm computes in float32 whatever the dtype
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="Phi-3 logits")
    if window and length > WINDOW:
        hf.config.sliding_window = None  # the same weights without the window: it must matter
        with torch.no_grad():
            full = hf(tokens, attention_mask=real.long()).logits
        assert (full[0, WINDOW:] - ref[0, WINDOW:]).abs().max() > 1e-3


@torch.no_grad()
def test_phi3_cached_decoding_equals_recomputation_and_transformers():
    """A prompt of 11 (past one window), then single steps: the rolling cache's logits are the full
    forward's and Hugging Face's, and greedy decoding with the cache is the one without."""
    hf = tiny_phi3()
    net = from_transformers(hf).eval()
    tokens = torch.randint(0, 97, (2, 21), generator=torch.Generator().manual_seed(2))
    cache = net.new_cache()
    steps = torch.cat([net(tokens[:, :11], cache=cache)] + [net(tokens[:, t: t + 1], cache=cache) for t in range(11, 21)], 1)
    assert_matches(steps, net(tokens), what="cached decoding against recomputation")
    assert_matches(steps, hf(tokens).logits, what="cached decoding against Hugging Face")
    assert greedy_decoding_kept_keys(net, 97, WINDOW) == [WINDOW - 1] * 3


def test_phi3_preset_is_llama_under_a_window_in_every_layer():
    net = compose_config(["model=phi3"]).model.net
    assert net.mask._target_ == "zoo.nn.masks.LocalMask" and net.mask.causal and net.mask.window < net.context
    assert (net.block.norm, net.block.gated, net.block.bias_q, net.rotary) == ("rmsnorm", True, False, True)
    big = compose_config(["model=phi3_mini"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.block.d_ff, big.context,
            big.mask.window, big.tie_embeddings) == (32, 3072, 32, 32, 8192, 4096, 2047, False)


@pytest.mark.parametrize("rope, says", [
    ({"rope_scaling": {"type": "su", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8}}, "rope_type='su'"),
    ({"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8}}, "rope_type='longrope'"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
])
def test_phi3_long_context_or_partial_rotary_is_refused(rope, says):
    with pytest.raises(ValueError, match=says):
        PHI3.shape(PHI3_MINI | rope)


@torch.no_grad()
def test_phi3_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: a save_pretrained folder, its window and fused weights through the shared reader."""
    model = check_folder(tmp_path, tiny_phi3(), PHI3)
    assert model.net.stack.layer_masks == [LocalMask(WINDOW, causal=True)] * 3


@torch.no_grad()
def test_phi3_mini_layout_folder_gives_the_hf_logits(tmp_path):
    """The released Phi-3-mini config.json (scaled down in width and depth), written by save_pretrained."""
    hf = randomise(transformers.Phi3ForCausalLM(transformers.Phi3Config(**PHI3_MINI)).eval())
    model = check_folder(tmp_path, hf, PHI3)
    assert model.hparams.net["mask"] == {"_target_": "zoo.nn.masks.LocalMask", "window": 2047, "causal": True}
    assert (model.hparams.net["context"], model.hparams.net["block"]["norm_eps"]) == (4096, 1e-5)


@pytest.mark.parametrize("window", [WINDOW, None])
def test_phi3_round_trips_through_the_export(window):
    back = check_round_trip(tiny_phi3(window), PHI3)
    assert back.config.sliding_window == window
    assert back.model.layers[0].self_attn.qkv_proj.weight.shape == (128, 64)  # stacked again: 64 + 32 + 32


def test_zoo_export_writes_a_phi3_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, PHI3)
    assert (config["model_type"], config["sliding_window"]) == ("phi3", 16)

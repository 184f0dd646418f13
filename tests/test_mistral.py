"""The Mistral preset: exact against Hugging Face with a sliding window that cuts, rolling-cache
decoding."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from windowed import greedy_decoding_kept_keys  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.mistral import from_transformers  # noqa: E402
from zoo.nn.masks import LocalMask  # noqa: E402

WINDOW = 8


def tiny_mistral():
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-6, sliding_window=WINDOW,
        attn_implementation="sdpa",
    )
    return randomise(transformers.MistralForCausalLM(cfg).eval())


@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
def test_mistral_logits_match_transformers_with_a_window_that_cuts(length):
    hf = tiny_mistral()
    net = from_transformers(hf).eval()
    assert net.stack.layer_masks == [LocalMask(WINDOW)] * 2
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    # fp32 only: Mistral's rotary tables compute in float32 whatever the dtype (float64 is ~6e-7 off)
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
        hf.config.sliding_window = None  # the same weights without the window: the window must matter
        full_causal = hf(tokens, attention_mask=real.long()).logits
    assert_matches(ours, ref, real[..., None], what="Mistral logits")
    if length > WINDOW:
        assert (full_causal[0, WINDOW:] - ref[0, WINDOW:]).abs().max() > 1e-3  # the window cut
    assert_matches(ours[0, :WINDOW], full_causal[0, :WINDOW], what="inside the first window")


@torch.no_grad()
def test_mistral_rolling_cache_across_the_window_matches_transformers():
    """A prompt of 11 (past one window of 8), then 10 single steps: the rolling cache's logits equal
    the full forward's and Hugging Face's."""
    hf = tiny_mistral()
    net = from_transformers(hf).eval()
    tokens = torch.randint(0, 97, (2, 21), generator=torch.Generator().manual_seed(2))
    cache = net.new_cache()
    steps = torch.cat([net(tokens[:, :11], cache=cache)] + [net(tokens[:, t : t + 1], cache=cache) for t in range(11, 21)], 1)
    assert_matches(steps, net(tokens), what="rolling-cache decoding against recomputation")
    assert_matches(steps, hf(tokens).logits, what="rolling-cache decoding against Hugging Face")
    assert [layer.k.shape[2] for layer in cache.layers] == [WINDOW - 1] * 2


def test_mistral_greedy_decoding_of_4x_the_window_equals_full_recomputation():
    net = from_transformers(tiny_mistral()).eval()
    assert greedy_decoding_kept_keys(net, 97, WINDOW) == [WINDOW - 1] * 2  # the w - 1 keys a later query sees


def test_mistral_preset_is_llama_under_a_window_shorter_than_the_context():
    net = compose_config(["model=mistral"]).model.net
    assert net.mask._target_ == "zoo.nn.masks.LocalMask" and net.mask.causal
    assert net.mask.window < net.context
    assert (net.block.norm, net.block.gated, net.block.n_kv_heads, net.rotary) == ("rmsnorm", True, 2, True)
    big = compose_config(["model=mistral_7b"]).model.net
    assert (big.n_layers, big.block.d_model, big.mask.window) == (32, 4096, 4096)



@torch.no_grad()
def test_mistral_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: a save_pretrained folder, its window included, through the shared reader."""
    from test_init_from import objective_from

    hf = tiny_mistral()
    hf.save_pretrained(tmp_path)
    model = objective_from("mistral", tmp_path, {"vocab_size": 97})
    assert model.net.stack.layer_masks == [LocalMask(WINDOW)] * 2 and model.hparams.net["mask"]["window"] == WINDOW
    tokens = torch.randint(0, 97, (2, 37))
    assert_matches(model.net.eval()(tokens), hf(tokens).logits, what="Mistral logits from a folder")

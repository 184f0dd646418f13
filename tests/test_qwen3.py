"""The Qwen3 preset: exact against Hugging Face (per-head q/k norms, a head_dim of its own, per-layer
sliding window, padding), cached decoding against recomputation and transformers' greedy ``generate``,
read from a folder (``model.init_from=DIR``, the released Qwen3-0.6B layout too) and exported back
(``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.qwen3 import QWEN3, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW, HEAD_DIM = 8, 24  # 4 heads of 24 in 64 wide: head_dim is not d_model / n_heads, as in Qwen3-0.6B
# Qwen/Qwen3-0.6B's config.json, scaled down in width and depth only (1024 wide, 28 layers of 16 heads
# / 8 kv heads of 128, d_ff 3072 -> 64 wide, 2 layers of 4 heads / 2 kv heads of 32, d_ff 192): heads
# wider than hidden_size / heads as there, its vocabulary, tied head, rotary base and context kept
QWEN3_0_6B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 192, "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}


def tiny_qwen3(sliding: bool = True, **config):
    """3 layers, the first full and the last two sliding (``max_window_layers=1``) when ``sliding``."""
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=5000.0,
        use_sliding_window=sliding, sliding_window=WINDOW, max_window_layers=1, attn_implementation="sdpa", **config)
    model = transformers.Qwen3ForCausalLM(cfg).eval()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # its own head
    assert_untied(model)
    return randomise(model)  # the q/k norms too: away from their init of ones


@pytest.mark.parametrize("sliding", [True, False])
@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
def test_qwen3_logits_match_transformers(sliding, length):
    hf = tiny_qwen3(sliding)
    net = from_transformers(hf).eval()
    local = LocalMask(WINDOW, causal=True)
    assert net.stack.layer_masks == ([CausalMask(), local, local] if sliding else [CausalMask()] * 3)
    attn = net.stack.blocks[0].attn
    assert attn.q.weight.shape == (4 * HEAD_DIM, 64) and attn.q_norm.weight.shape == (HEAD_DIM,)
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="Qwen3 logits")


def test_qwen3_preset_is_llama_with_per_head_qk_norms():
    net = compose_config(["model=qwen3"]).model.net
    assert net.block.qk_norm == "head" and not net.block.bias_q and net.block.head_dim is None
    assert net.mask._target_ == "zoo.nn.masks.CausalMask" and net.rotary and net.block.norm == "rmsnorm"
    big = compose_config(["model=qwen3_0_6b"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.block.head_dim,
            big.tie_embeddings) == (28, 1024, 16, 8, 128, True)


@torch.no_grad()
def test_qwen3_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: a save_pretrained folder, its sliding layers and head_dim included."""
    model = check_folder(tmp_path, tiny_qwen3(), QWEN3)
    assert model.net.stack.layer_masks == [CausalMask(), LocalMask(WINDOW, causal=True), LocalMask(WINDOW, causal=True)]
    assert model.hparams.net["block"]["head_dim"] == HEAD_DIM


@pytest.mark.parametrize("sliding", [True, False])
def test_qwen3_cached_decoding_equals_recomputation_and_transformers_generate(sliding):
    hf = tiny_qwen3(sliding)
    check_generation(hf, from_transformers(hf).eval(), 97)


@torch.no_grad()
def test_qwen3_0_6b_layout_folder_gives_the_hf_logits(tmp_path):
    """The released Qwen3-0.6B config.json (scaled down in width and depth), written by save_pretrained."""
    hf = randomise(transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**QWEN3_0_6B)).eval())
    net = check_folder(tmp_path, hf, QWEN3).hparams.net
    assert (net["block"]["head_dim"], net["tie_embeddings"], net["rotary_base"], net["context"]) == \
        (32, True, 1e6, 40960)


@pytest.mark.parametrize("sliding", [True, False])
def test_qwen3_round_trips_through_the_export(sliding):
    hf = tiny_qwen3(sliding)
    back = check_round_trip(hf, QWEN3)
    assert back.config.layer_types == hf.config.layer_types and back.config.head_dim == HEAD_DIM


def test_zoo_export_writes_a_qwen3_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, QWEN3)
    assert (config["model_type"], config["head_dim"]) == ("qwen3", 8)  # 32 wide / 4 heads, written as a number


def test_qwen3_config_without_head_dim_reads_qwen3s_default():
    """Qwen3Config's head_dim is 128 when config.json omits it, not hidden_size / heads (as Llama's)."""
    config = tiny_qwen3(False).config.to_dict()
    del config["head_dim"]
    assert QWEN3.shape(config)["block.head_dim"] == transformers.Qwen3Config().head_dim == 128

"""The OLMo 2 preset: exact against Hugging Face (norms on each sublayer's output, q/k norms over
the whole projections, grouped-query attention, padding), cached decoding against recomputation and
transformers' greedy ``generate``, read from a folder (``model.init_from=DIR``, the released
OLMo-2-1B layout too) and exported back (``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.olmo2 import OLMO2, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask  # noqa: E402


# allenai/OLMo-2-0425-1B's config.json, scaled down in width and depth only (2048 wide, 16 layers of 16
# heads / 16 kv heads of 128, d_ff 8192 -> 64 wide, 2 layers of 4 heads / 4 kv heads of 16, d_ff 256):
# its vocabulary, untied head, rotary base and context kept
OLMO2_1B = {
    "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "eos_token_id": 100257,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 256,
    "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 4, "pad_token_id": 100277, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 500000, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
    "vocab_size": 100352,
}

def tiny_olmo2(**config):
    """3 layers, 4 heads / 2 kv heads of 16: the k norm is narrower than the q norm."""
    torch.manual_seed(0)
    cfg = transformers.Olmo2Config(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=5000.0,
        attn_implementation="sdpa", **config)
    model = transformers.Olmo2ForCausalLM(cfg).eval()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # its own head
    assert_untied(model)
    return randomise(model)  # the norms too: away from their init of ones


@pytest.mark.parametrize("length", [37, 5])
def test_olmo2_logits_match_transformers(length):
    hf = tiny_olmo2()
    net = from_transformers(hf).eval()
    assert net.stack.layer_masks == [CausalMask()] * 3
    block = net.stack.blocks[0]
    assert block.attn.q_norm.weight.shape == (64,) and block.attn.k_norm.weight.shape == (32,)
    assert isinstance(block.attn_norm, torch.nn.Identity)  # no norm on a sublayer's input
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="OLMo 2 logits")


def test_olmo2_preset_moves_llamas_norms():
    net = compose_config(["model=olmo2"]).model.net
    assert (net.block.input_norm, net.block.output_norm, net.block.qk_norm) == (False, True, "all")
    assert net.mask._target_ == "zoo.nn.masks.CausalMask" and net.rotary and net.block.norm == "rmsnorm"
    big = compose_config(["model=olmo2_1b"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.tie_embeddings) == \
        (16, 2048, 16, 16, False)


def test_olmo2_attention_bias_is_refused():
    with pytest.raises(ValueError, match="attention_bias"):
        OLMO2.shape(tiny_olmo2().config.to_dict() | {"attention_bias": True})


@torch.no_grad()
def test_olmo2_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: a save_pretrained folder through the shared reader."""
    check_folder(tmp_path, tiny_olmo2(), OLMO2)


def test_olmo2_cached_decoding_equals_recomputation_and_transformers_generate():
    hf = tiny_olmo2()
    check_generation(hf, from_transformers(hf).eval(), 97)


@torch.no_grad()
def test_olmo2_1b_layout_folder_gives_the_hf_logits(tmp_path):
    """The released OLMo-2-0425-1B config.json (scaled down in width and depth), written by save_pretrained."""
    hf = randomise(transformers.Olmo2ForCausalLM(transformers.Olmo2Config(**OLMO2_1B)).eval())
    assert_untied(hf)
    net = check_folder(tmp_path, hf, OLMO2).hparams.net
    assert (net["tie_embeddings"], net["rotary_base"], net["context"], net["block"]["n_kv_heads"]) == \
        (False, 5e5, 4096, 4)


def test_olmo2_round_trips_through_the_export():
    check_round_trip(tiny_olmo2(), OLMO2)


def test_zoo_export_writes_an_olmo2_folder_transformers_loads(tmp_path, capsys):
    assert check_zoo_export(tmp_path, capsys, OLMO2)["model_type"] == "olmo2"
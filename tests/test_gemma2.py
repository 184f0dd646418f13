"""The Gemma 2 preset: exact against Hugging Face (1 + w sandwich norms, soft-capped attention and
logits, query_pre_attn_scalar, sqrt(d) embedding, alternating sliding / global layers, padding),
cached and greedy decoding, read from a folder of the released layout (``model.init_from=DIR``) and
exported back (``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.gemma2 import GEMMA2, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW, HEAD_DIM, SCALAR, SOFTCAP, FINAL_SOFTCAP = 8, 24, 20, 2.0, 3.0  # caps low enough to bend
# google/gemma-2-2b's config.json, as the Hub holds it (written from the model card's release)
RELEASED = {"architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
            "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
            "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2",
            "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
            "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
            "torch_dtype": "float32", "vocab_size": 256000}


def tiny_gemma2(**config):
    """3 layers (sliding, global, sliding), 4 heads of 24 in 64 wide, attention scaled by 20 ** -0.5."""
    torch.manual_seed(0)
    cfg = transformers.Gemma2Config(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=48, rms_norm_eps=1e-6, rope_theta=5000.0,
        sliding_window=WINDOW, query_pre_attn_scalar=SCALAR, attn_logit_softcapping=SOFTCAP,
        final_logit_softcapping=FINAL_SOFTCAP, eos_token_id=None, attn_implementation="eager", **config)
    model = randomise(transformers.Gemma2ForCausalLM(cfg).eval())  # the norms too: away from their init of zeros
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as Gemma's
    return model


@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
def test_gemma2_logits_match_transformers(length):
    hf = tiny_gemma2()
    net = from_transformers(hf).eval()
    local = LocalMask(WINDOW, causal=True)
    assert net.stack.layer_masks == [local, CausalMask(), local]
    block = net.stack.blocks[0]
    assert block.attn.softcap == SOFTCAP and block.attn.scale == SCALAR ** -0.5 and net.head.softcap == FINAL_SOFTCAP
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert ref.abs().max() > 0.9 * FINAL_SOFTCAP  # the final cap bends these logits
    assert_matches(ours, ref, real[..., None], what="Gemma 2 logits")
    if length > WINDOW:  # the same weights, every layer global: the window must matter
        full = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
            **hf.config.to_dict() | {"layer_types": ["full_attention"] * 3})).eval()
        full.load_state_dict(hf.state_dict())
        with torch.no_grad():
            unwindowed = full(tokens, attention_mask=real.long()).logits
        assert (unwindowed[0, WINDOW:] - ref[0, WINDOW:]).abs().max() > 1e-3


def test_gemma2_decodes_with_its_cache_as_transformers_generates():
    """Soft-capped attention and logits while decoding, the sliding layers' rolling cache."""
    hf = tiny_gemma2()
    check_generation(hf, from_transformers(hf).eval(), hf.config.vocab_size)


def test_gemma2_preset_is_gemmas_pieces_over_llama():
    net = compose_config(["model=gemma2"]).model.net
    assert (net.block.norm, net.block.output_norm, net.block.activation, net.block.attn_softcap) == \
        ("rmsnorm_1p", True, "gelu_tanh", 50.0)
    assert net.embedder.scale and net.head.softcap == 30.0 and net.tie_embeddings and net.rotary
    assert [m._target_ for m in net.mask.masks] == ["zoo.nn.masks.LocalMask", "zoo.nn.masks.CausalMask"]
    big = compose_config(["model=gemma2_2b"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.block.head_dim,
            big.block.d_ff, big.context, big.mask.masks[0].window) == (26, 2304, 8, 4, 256, 9216, 8192, 4096)
    assert GEMMA2.shape(RELEASED)["block.attn_scale"] is None  # query_pre_attn_scalar 256 = head_dim


@torch.no_grad()
def test_gemma2_folder_of_the_released_layout_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: gemma-2-2b's config.json scaled down in width and depth only (its
    vocabulary, heads, head width, window and caps kept), written by save_pretrained."""
    small = RELEASED | {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    torch.manual_seed(0)
    hf = randomise(transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**small)).eval())
    model = check_folder(tmp_path, hf, GEMMA2)
    assert model.net.stack.layer_masks == [LocalMask(4096, causal=True), CausalMask()]
    assert model.hparams.net["block"]["head_dim"] == 256


def test_gemma2_round_trips_through_the_export():
    hf = tiny_gemma2()
    back = check_round_trip(hf, GEMMA2)
    assert (back.config.layer_types, back.config.query_pre_attn_scalar, back.config.attn_logit_softcapping) == \
        (hf.config.layer_types, SCALAR, SOFTCAP)


def test_zoo_export_writes_a_gemma2_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, GEMMA2)
    assert (config["model_type"], config["sliding_window"], config["final_logit_softcapping"]) == ("gemma2", 16, 30.0)


@pytest.mark.parametrize("changed, refusal", [
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention=True"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type='dynamic'"),
    ({"attention_bias": True}, "attention_bias"),
])
def test_gemma2_configs_the_zoo_cannot_express_are_refused(changed, refusal):
    with pytest.raises(ValueError, match=refusal):
        GEMMA2.shape(RELEASED | changed)

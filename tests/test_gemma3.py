"""The Gemma 3 (text) preset: exact against Hugging Face (1 + w sandwich norms, per-head q/k norms,
query_pre_attn_scalar, sqrt(d) embedding, sliding and global layers rotating with their own bases,
the global ones' linear position scaling, padding), cached and greedy decoding, read from a folder
of the released layout (``model.init_from=DIR``) and exported back (``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.gemma3 import GEMMA3, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW, HEAD_DIM, SCALAR, LOCAL_BASE, GLOBAL_BASE = 8, 24, 20, 10000.0, 1e6
LINEAR = {"rope_type": "linear", "factor": 8.0}  # Gemma 3 4B and up, on the global layers
# google/gemma-3-1b-pt's config.json, as the Hub holds it (written from the model card's release)
RELEASED = {"architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
            "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 1152, "initializer_range": 0.02, "intermediate_size": 6912,
            "max_position_embeddings": 32768, "model_type": "gemma3_text", "num_attention_heads": 4,
            "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0, "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000,
            "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "vocab_size": 262144}
# google/gemma-3-4b-pt's text_config: wider, 34 layers, the global layers' positions scaled by 8
RELEASED_4B = RELEASED | {"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
                          "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 131072,
                          "sliding_window": 1024, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                          "vocab_size": 262208}


def tiny_gemma3(scaling: dict | None = None, **config):
    """3 layers (sliding, global, sliding), 4 heads of 24 in 64 wide, attention scaled by 20 ** -0.5;
    ``scaling``: the global layers' rope scaling."""
    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=48, rms_norm_eps=1e-6,
        sliding_window=WINDOW, query_pre_attn_scalar=SCALAR, eos_token_id=None, attn_implementation="eager",
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_BASE},
                         "full_attention": {"rope_type": "default", "rope_theta": GLOBAL_BASE} | (scaling or {})},
        **config)
    model = randomise(transformers.Gemma3ForCausalLM(cfg).eval())  # the q/k norms too: away from their init
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as Gemma's
    return model


@pytest.mark.parametrize("scaling", [None, LINEAR])
@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
def test_gemma3_logits_match_transformers(scaling, length):
    hf = tiny_gemma3(scaling)
    net = from_transformers(hf).eval()
    local = LocalMask(WINDOW, causal=True)
    assert net.stack.layer_masks == [local, CausalMask(), local]
    attn = net.stack.blocks[0].attn
    assert attn.q_norm.weight.shape == (HEAD_DIM,) and attn.softcap is None and attn.scale == SCALAR ** -0.5
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="Gemma 3 logits")
    if scaling and length > WINDOW:  # the same weights without the scaling: it must matter
        with torch.no_grad():
            unscaled = tiny_gemma3()(tokens, attention_mask=real.long()).logits
        assert (unscaled - ref)[real].abs().max() > 1e-3


def test_gemma3_decodes_with_its_cache_as_transformers_generates():
    """Per-layer rotary tables (the global layers' scaled) and the sliding layers' rolling cache."""
    hf = tiny_gemma3(LINEAR)
    check_generation(hf, from_transformers(hf).eval(), hf.config.vocab_size)


def test_gemma3_preset_is_gemma2s_with_qk_norms_and_per_layer_rotary():
    net = compose_config(["model=gemma3"]).model.net
    assert (net.block.norm, net.block.qk_norm, net.block.attn_softcap, net.head.softcap) == \
        ("rmsnorm_1p", "head", None, None)
    assert [m._target_.rsplit(".")[-1] for m in net.mask.masks] == ["LocalMask"] * 5 + ["CausalMask"]
    assert list(net.rotary_base) == [LOCAL_BASE] * 5 + [GLOBAL_BASE] and net.embedder.scale
    big = compose_config(["model=gemma3_1b"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.block.head_dim,
            big.block.d_ff, big.context, big.mask.masks[0].window) == (26, 1152, 4, 1, 256, 6912, 32768, 512)


def test_released_configs_read_their_per_layer_rotary_tables():
    """The Hub's config.json keys (rope_local_base_freq, rope_scaling, sliding_window_pattern):
    1B rotates its global layers with base 1e6 unscaled, 4B scales their positions by 8."""
    one, four = GEMMA3.shape(RELEASED), GEMMA3.shape(RELEASED_4B)
    assert one["rotary_base"] == four["rotary_base"] == [10000.0] * 5 + [1e6]
    assert one["rotary_scale"] == 1.0 and four["rotary_scale"] == [1.0] * 5 + [8.0]
    assert [m["_target_"] for m in four["mask"]["masks"]] == ["zoo.nn.masks.LocalMask"] * 5 + ["zoo.nn.masks.CausalMask"]
    assert four["mask"]["masks"][0]["window"] == 1024


@torch.no_grad()
def test_gemma3_folder_of_the_released_layout_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: gemma-3-1b's config.json scaled down in width and depth only (7 layers:
    five sliding, one global, one sliding; its vocabulary, heads, head width, window kept)."""
    small = RELEASED | {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 7}
    torch.manual_seed(0)
    hf = randomise(transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**small)).eval())
    model = check_folder(tmp_path, hf, GEMMA3)
    assert model.net.stack.layer_masks == [LocalMask(512, causal=True)] * 5 + [CausalMask(), LocalMask(512, causal=True)]
    assert model.hparams.net["rotary_base"] == [10000.0] * 5 + [1e6]


@pytest.mark.parametrize("scaling", [None, LINEAR])
def test_gemma3_round_trips_through_the_export(scaling):
    hf = tiny_gemma3(scaling)
    back = check_round_trip(hf, GEMMA3)
    assert back.config.layer_types == hf.config.layer_types
    assert back.config.rope_parameters == hf.config.rope_parameters


def test_zoo_export_writes_a_gemma3_folder_transformers_loads(tmp_path, capsys):
    """Two layers (sliding, global), the global one's positions scaled by 8, as Gemma 3 4B's."""
    config = check_zoo_export(tmp_path, capsys, GEMMA3, "model.net.mask.masks=[{_target_:zoo.nn.masks.LocalMask,"
                              "window:8,causal:true},{_target_:zoo.nn.masks.CausalMask}]",
                              "model.net.rotary_base=[10000.0,1000000.0]", "model.net.rotary_scale=[1.0,8.0]")
    assert config["model_type"] == "gemma3_text" and config["layer_types"] == ["sliding_attention", "full_attention"]
    assert config["rope_parameters"]["full_attention"] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}


@pytest.mark.parametrize("changed, refusal", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 8.0}}, "rope_type='yarn' is not supported"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, "has no 'full_attention' entry"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention=True"),
])
def test_gemma3_configs_the_zoo_cannot_express_are_refused(changed, refusal):
    with pytest.raises(ValueError, match=refusal):
        GEMMA3.shape(RELEASED | changed)

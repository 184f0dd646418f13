"""The Mixtral preset: exact against Hugging Face (logits and router logits, padding, a sliding
window or none), the load-balancing loss and the training loss equal to the reference's, read from
a folder (``model.init_from=DIR``, the released config's layout) and exported back (``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from moe_family import check_cached_decoding, check_logits_and_routers, check_training_loss, moe_layers  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.mixtral import MIXTRAL, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW, VOCAB = 8, 97


def tiny_mixtral(window: int | None = None, **config):
    """2 layers, 4 experts of 48, 2 per token, every parameter (routers included) away from its init."""
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=1e-5, rope_theta=5000.0,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=window, attn_implementation="sdpa", **config)
    model = transformers.MixtralForCausalLM(cfg).eval()
    assert_untied(model)
    return randomise(model)


@pytest.mark.parametrize("window", [None, WINDOW])
@pytest.mark.parametrize("length", [37, 5])
def test_mixtral_logits_and_router_logits_match_transformers(window, length):
    hf = tiny_mixtral(window)
    net = from_transformers(hf).eval()
    assert net.stack.layer_masks == [CausalMask() if window is None else LocalMask(WINDOW, causal=True)] * 2
    assert [(m.n_experts, m.top_k, m.norm_topk) for m in moe_layers(net)] == [(4, 2, True)] * 2
    check_logits_and_routers(hf, net, VOCAB, length)


def test_mixtral_training_loss_adds_the_load_balancing_loss_as_transformers():
    from test_init_from import objective_from

    hf = tiny_mixtral()
    hf.config.router_aux_loss_coef = hf.router_aux_loss_coef = 0.3  # large: a missing aux loss fails the bound
    objective = objective_from("mixtral", "null", {"vocab_size": VOCAB}, "model.aux_loss_coef=0.3",
                               *[f"model.net.{k}={v}" for k, v in (("n_layers", 2), ("block.d_model", 32),
                                 ("block.n_heads", 4), ("block.d_ff", 48), ("block.n_experts", 4),
                                 ("block.norm_eps", 1e-5), ("rotary_base", 5000.0), ("context", 48))])
    objective.net.load_state_dict(from_transformers(hf).state_dict())
    check_training_loss(hf, objective.eval(), VOCAB)


def test_mixtral_cached_decoding_equals_recomputation():
    check_cached_decoding(from_transformers(tiny_mixtral(WINDOW)).eval(), VOCAB)


@torch.no_grad()
def test_mixtral_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: save_pretrained writes the released layout (block_sparse_moe.experts.{e}.w1/w2/w3)."""
    hf = tiny_mixtral()
    model = check_folder(tmp_path, hf, MIXTRAL)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert "model.layers.1.block_sparse_moe.experts.3.w3.weight" in f.keys()
    assert model.hparams.net["block"]["n_experts"] == 4


@torch.no_grad()
def test_mixtral_8x7b_layout_scaled_down_loads_from_its_folder(tmp_path):
    """The released Mixtral-8x7B config.json with only width and depth scaled down."""
    from test_init_from import objective_from

    released = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
                "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
                "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
                "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
                "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
                "vocab_size": 32000}
    scaled = released | {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 1, "vocab_size": 120}
    torch.manual_seed(0)
    hf = randomise(transformers.MixtralForCausalLM(transformers.MixtralConfig(**scaled)).eval())
    hf.save_pretrained(tmp_path)
    model = objective_from("mixtral", tmp_path, {"vocab_size": 120})
    tokens = torch.randint(0, 120, (2, 19))
    assert_matches(model.net.eval()(tokens), hf(tokens).logits, what="Mixtral-8x7B layout from its folder")
    big = compose_config(["model=mixtral_8x7b"]).model.net
    assert {k: v for k, v in MIXTRAL.shape(released).items() if k.startswith("block.")} == {
        "block.d_model": 4096, "block.n_heads": 32, "block.n_kv_heads": 8, "block.d_ff": 14336, "block.norm_eps": 1e-5,
        "block.attn_dropout": 0.0, "block.n_experts": 8, "block.top_k": 2, "block.norm_topk": True,
        "block.activation": "silu", "block.bias_q": False, "block.bias_k": False, "block.bias_v": False,
        "block.bias_out": False}
    assert (big.n_layers, big.block.d_model, big.block.d_ff, big.block.n_experts, big.block.top_k, big.context,
            big.rotary_base, big.mask._target_) == (32, 4096, 14336, 8, 2, 32768, 1e6, "zoo.nn.masks.CausalMask")


@pytest.mark.parametrize("window", [None, WINDOW])
def test_mixtral_round_trips_through_the_export(window):
    back = check_round_trip(tiny_mixtral(window), MIXTRAL)
    assert back.config.sliding_window == window and back.config.num_local_experts == 4


def test_zoo_export_writes_a_mixtral_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, MIXTRAL)
    assert (config["model_type"], config["num_local_experts"], config["num_experts_per_tok"]) == ("mixtral", 8, 2)


def test_mixtral_refuses_router_jitter():
    config = tiny_mixtral().config.to_dict() | {"router_jitter_noise": 0.1}
    with pytest.raises(ValueError, match="router_jitter_noise"):
        MIXTRAL.shape(config)


def test_mixtral_flops_count_the_active_experts_only():
    from zoo.nn.flops import linear_flops

    ffn = moe_layers(from_transformers(tiny_mixtral()))[0]
    expert = 2 * 3 * 32 * 48  # gate, up, down
    assert linear_flops(ffn) == 2 * expert + 2 * 32 * 4  # top 2 of 4 experts, and the router

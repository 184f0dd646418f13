"""The Qwen3-MoE preset: exact against Hugging Face (logits and router logits, per-head q/k norms,
top-k weights renormalised or not, padding), the load-balancing and training losses equal to the
reference's, read from a folder (the released config's layout) and exported back (``zoo export``)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from moe_family import check_cached_decoding, check_logits_and_routers, check_training_loss, moe_layers  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.qwen3_moe import QWEN3_MOE, from_transformers  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

VOCAB, HEAD_DIM, WINDOW = 97, 12, 8  # 4 heads of 12 in 32 wide: head_dim is not d_model / n_heads


def tiny_qwen3_moe(norm_topk: bool = False, **config):
    """2 layers, 8 experts of 24, 3 per token, every parameter (routers, q/k norms) away from its init."""
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, moe_intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=48,
        rms_norm_eps=1e-6, rope_theta=5000.0, num_experts=8, num_experts_per_tok=3, norm_topk_prob=norm_topk,
        attn_implementation="sdpa", **config)
    model = transformers.Qwen3MoeForCausalLM(cfg).eval()
    assert_untied(model)
    return randomise(model)


@pytest.mark.parametrize("norm_topk", [False, True])
@pytest.mark.parametrize("length", [37, 5])
def test_qwen3_moe_logits_and_router_logits_match_transformers(norm_topk, length):
    hf = tiny_qwen3_moe(norm_topk)
    net = from_transformers(hf).eval()
    assert net.stack.layer_masks == [CausalMask()] * 2 and net.stack.blocks[0].attn.q_norm.weight.shape == (HEAD_DIM,)
    assert [(m.n_experts, m.top_k, m.norm_topk) for m in moe_layers(net)] == [(8, 3, norm_topk)] * 2
    check_logits_and_routers(hf, net, VOCAB, length)


def test_qwen3_moe_sliding_window_is_every_layers():
    hf = tiny_qwen3_moe(use_sliding_window=True, sliding_window=WINDOW)
    net = from_transformers(hf).eval()
    assert net.stack.layer_masks == [LocalMask(WINDOW, causal=True)] * 2
    check_logits_and_routers(hf, net, VOCAB, 29)


def test_qwen3_moe_training_loss_adds_the_load_balancing_loss_as_transformers():
    from test_init_from import objective_from

    hf = tiny_qwen3_moe(True)
    hf.config.router_aux_loss_coef = hf.router_aux_loss_coef = 0.3  # large: a missing aux loss fails the bound
    objective = objective_from("qwen3_moe", "null", {"vocab_size": VOCAB}, "model.aux_loss_coef=0.3",
                               *[f"model.net.{k}={v}" for k, v in (
                                   ("n_layers", 2), ("block.d_model", 32), ("block.n_heads", 4), ("block.head_dim", HEAD_DIM),
                                   ("block.d_ff", 24), ("block.n_experts", 8), ("block.top_k", 3),
                                   ("rotary_base", 5000.0), ("context", 48))])
    objective.net.load_state_dict(from_transformers(hf).state_dict())
    check_training_loss(hf, objective.eval(), VOCAB)


def test_qwen3_moe_cached_decoding_equals_recomputation():
    check_cached_decoding(from_transformers(tiny_qwen3_moe(True)).eval(), VOCAB)


@torch.no_grad()
def test_qwen3_moe_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: save_pretrained writes one tensor per expert (mlp.experts.{e}.gate_proj, ...)."""
    model = check_folder(tmp_path, tiny_qwen3_moe(True), QWEN3_MOE)
    block = model.hparams.net["block"]
    assert (block["n_experts"], block["top_k"], block["norm_topk"], block["d_ff"], block["head_dim"]) == (8, 3, True, 24, HEAD_DIM)


@torch.no_grad()
def test_qwen3_30b_a3b_layout_scaled_down_loads_from_its_folder(tmp_path):
    """The released Qwen3-30B-A3B config.json (num_experts spelt as released) with only width and depth scaled down."""
    import json

    from test_init_from import objective_from

    released = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
                "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
                "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
                "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
                "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
                "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
                "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
                "tie_word_embeddings": False, "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
    scaled = released | {"hidden_size": 32, "head_dim": 16, "intermediate_size": 64, "moe_intermediate_size": 16,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 16, "num_experts_per_tok": 4,
                         "vocab_size": 120}
    torch.manual_seed(0)
    hf = randomise(transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**scaled)).eval())
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(  # as released: num_experts, not transformers' num_local_experts
        {k: v for k, v in config.items() if k != "num_local_experts"} | {"num_experts": 16}))
    model = objective_from("qwen3_moe", tmp_path, {"vocab_size": 120})
    tokens = torch.randint(0, 120, (2, 19))
    assert_matches(model.net.eval()(tokens), hf(tokens).logits, what="Qwen3-30B-A3B layout from its folder")
    shape = QWEN3_MOE.shape(released)
    assert (shape["block.d_ff"], shape["block.n_experts"], shape["block.top_k"], shape["block.norm_topk"],
            shape["block.head_dim"]) == (768, 128, 8, True, 128)
    big = compose_config(["model=qwen3_moe_30b_a3b"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.head_dim, big.block.d_ff, big.block.n_experts, big.block.top_k,
            big.block.norm_topk, big.context) == (48, 2048, 128, 768, 128, 8, True, 40960)


@pytest.mark.parametrize("norm_topk", [False, True])
def test_qwen3_moe_round_trips_through_the_export(norm_topk):
    back = check_round_trip(tiny_qwen3_moe(norm_topk), QWEN3_MOE)
    assert (back.config.norm_topk_prob, back.config.num_experts, back.config.head_dim) == (norm_topk, 8, HEAD_DIM)


def test_zoo_export_writes_a_qwen3_moe_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, QWEN3_MOE)
    assert (config["model_type"], config["num_experts_per_tok"], config["norm_topk_prob"]) == ("qwen3_moe", 4, True)


@pytest.mark.parametrize("dense", [{"decoder_sparse_step": 2}, {"mlp_only_layers": [1]}])
def test_qwen3_moe_refuses_dense_layers_among_the_experts(dense):
    with pytest.raises(ValueError, match=next(iter(dense))):
        QWEN3_MOE.shape(tiny_qwen3_moe().config.to_dict() | dense)

"""The Pythia preset (GPT-NeoX): exact against Hugging Face's ``GPTNeoXForCausalLM`` in float64 (the
per-head fused query/key/value rows, partial rotary, both residual layouts, padding on either side),
cached decoding against recomputation and transformers' greedy ``generate``, read from a folder
(``model.init_from=DIR``, the released Pythia-160m layout too) and exported back (``zoo export``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.gpt_neox import FAMILY, from_transformers, gpt_neox_shape  # noqa: E402

# the shared decoder checks' view of this converter (tests/decoder_family.py)
NEOX = SimpleNamespace(model="pythia", hf_class=FAMILY.hf_class, shape=gpt_neox_shape,
                       from_transformers=from_transformers)
# EleutherAI/pythia-160m's config.json, scaled down in width and depth only (768 wide, 12 layers of
# 12 heads of 64, d_ff 3072 -> 64 wide, 2 layers of 4 heads of 16, d_ff 256): rotary on a quarter of
# each head (4 of 16 values), the parallel residual, its vocabulary and context kept
PYTHIA_160M = {
    "architectures": ["GPTNeoXForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "bos_token_id": 0,
    "classifier_dropout": 0.1, "eos_token_id": 0, "hidden_act": "gelu", "hidden_dropout": 0.0, "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 256, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 4, "num_hidden_layers": 2, "rope_scaling": None,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False, "torch_dtype": "float16",
    "use_cache": True, "use_parallel_residual": True, "vocab_size": 50304,
}


def tiny_neox(parallel: bool = True, rotary_pct: float = 0.25, dtype=torch.float64, **config):
    """3 layers of 4 heads of 16, a quarter of each head rotating (4 values), every weight drawn."""
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=48, rotary_pct=rotary_pct, rotary_emb_base=5000, use_parallel_residual=parallel,
        layer_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, attn_implementation="sdpa", **config)
    model = transformers.GPTNeoXForCausalLM(cfg).eval()
    assert_untied(model)
    return randomise(model).to(dtype)  # the norms and every bias too: away from their init


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("length", [37, 5])
def test_pythia_logits_match_transformers_in_float64(parallel, length):
    """Float64: GPT-NeoX computes cleanly in it (its rotary table, like the zoo's, in float32 then cast)."""
    hf = tiny_neox(parallel)
    net = from_transformers(hf).double().eval()
    block = net.stack.blocks[0]
    assert (block.parallel, net.stack.blocks[0].attn.q.weight.shape) == (parallel, (64, 64))
    # per head, its query, key and value rows side by side: head 1's keys are fused rows 64..80
    fused = hf.gpt_neox.layers[0].attention.query_key_value
    assert torch.equal(block.attn.k.weight[16:32], fused.weight[64:80].float().double())
    assert torch.equal(block.attn.v.bias[:16], fused.bias[32:48])
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what=f"Pythia logits (parallel={parallel})")


@torch.no_grad()
def test_partial_rotary_and_the_residual_layout_matter():
    """The reference's outputs move when either knob moves: the checks above see both."""
    tokens = torch.randint(0, 97, (2, 37), generator=torch.Generator().manual_seed(3))
    base = tiny_neox()(tokens).logits
    for other in (tiny_neox(parallel=False), tiny_neox(rotary_pct=1.0)):
        assert (other(tokens).logits - base).abs().max() > 1e-3


@torch.no_grad()
def test_pythia_cached_decoding_equals_recomputation_and_transformers_generate():
    hf = tiny_neox(dtype=torch.float32)
    check_generation(hf, from_transformers(hf).eval(), 97)


def test_pythia_presets():
    net = compose_config(["model=pythia"]).model.net
    b = net.block
    assert (b.norm, b.norm_bias, b.activation, b.gated, b.parallel, b.bias_q, b.bias_out, b.bias_ffn) == \
        ("layernorm", True, "gelu", False, True, True, True, True)
    assert (net.rotary, net.rotary_fraction, net.tie_embeddings, net.embedder.positions) == (True, 0.25, False, "none")
    big = compose_config(["model=pythia_160m"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.d_ff, big.context, big.rotary_base,
            big.rotary_fraction) == (12, 768, 12, 3072, 2048, 10000.0, 0.25)


@pytest.mark.parametrize("change, says", [
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_type='linear'"),
    ({"hidden_act": "silu"}, "hidden_act='silu'"),
    ({"rotary_pct": 0.1}, "rotary_fraction=0.1"),  # 1.6 of a head of 16 values: not an even number
])
def test_what_the_zoo_cannot_express_is_refused(change, says):
    with pytest.raises(ValueError, match=says):
        gpt_neox_shape(PYTHIA_160M | change)


@torch.no_grad()
def test_pythia_folder_gives_the_hf_logits(tmp_path):
    check_folder(tmp_path, tiny_neox(parallel=False, dtype=torch.float32), NEOX)


@torch.no_grad()
def test_pythia_160m_layout_folder_gives_the_hf_logits(tmp_path):
    """The released Pythia-160m config.json (scaled down in width and depth), written by
    save_pretrained (``embed_out``, the config's rotary_pct / rotary_emb_base as transformers 5 keeps them)."""
    hf = randomise(transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**PYTHIA_160M)).eval())
    model = check_folder(tmp_path, hf, NEOX)
    net = model.hparams.net
    assert (net["rotary_fraction"], net["rotary_base"], net["context"], net["block"]["parallel"]) == \
        (0.25, 10000.0, 2048, True)


@pytest.mark.parametrize("parallel", [True, False])
def test_pythia_round_trips_through_the_export(parallel):
    back = check_round_trip(tiny_neox(parallel, dtype=torch.float32), NEOX)
    assert (back.config.use_parallel_residual, back.config.rope_parameters["partial_rotary_factor"]) == (parallel, 0.25)


def test_zoo_export_writes_a_gpt_neox_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, NEOX)
    assert (config["model_type"], config["use_parallel_residual"], config["tie_word_embeddings"]) == \
        ("gpt_neox", True, False)

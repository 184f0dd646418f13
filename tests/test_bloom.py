"""The BLOOM preset: exact against Hugging Face's ``BloomForCausalLM`` (ALiBi with a power-of-two
head count and another, the embedding LayerNorm, the per-head fused query/key/value rows, padding on
either side), cached decoding against recomputation and transformers' greedy ``generate``, read from
a folder (``model.init_from=DIR``) and exported back (``zoo export``).

BLOOM's reference is not clean in float64: it takes the softmax in float32 (``dtype=torch.float32``,
then back), where float64's most negative mask value is -inf, so a left-padded row's padding
queries (every key masked) turn NaN and leak into its real tokens through the next layer's
additive mask; its tanh GELU's constant is 0.79788456 (sqrt(2/pi) to 8 digits). The checks run
in float32, at its bounds."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from decoder_family import check_folder, check_generation, check_round_trip, check_zoo_export  # noqa: E402
from exactness import assert_matches, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.convert.bloom import FAMILY, bloom_shape, from_transformers  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.nn.alibi import alibi_slopes  # noqa: E402

# the shared decoder checks' view of this converter (tests/decoder_family.py)
BLOOM = SimpleNamespace(model="bloom", hf_class=FAMILY.hf_class, shape=bloom_shape,
                        from_transformers=from_transformers)
# bigscience/bloom-560m's config.json, scaled down in width and depth only (1024 wide, 24 layers of 16
# heads -> 64 wide, 2 layers of 4 heads), with the Megatron-DeepSpeed switches it carries; its
# vocabulary kept
BLOOM_560M = {
    "apply_residual_connection_post_layernorm": False, "architectures": ["BloomForCausalLM"],
    "attention_dropout": 0.0, "attention_softmax_in_fp32": True, "bias_dropout_fusion": True, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 64, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": True, "model_type": "bloom", "n_head": 4, "n_inner": None,
    "n_layer": 2, "offset_alibi": 100, "pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": True,
    "skip_bias_add_qkv": False, "slow_but_exact": False, "unk_token_id": 0, "use_cache": True, "vocab_size": 250880,
}


def tiny_bloom(heads: int = 4):
    """3 layers 48 wide (``heads`` heads), every weight and norm drawn away from its init; a context
    of 48 (``seq_length``): the export's example is that long. (At 1024 positions BLOOM's scores carry
    ``slope * key`` up to 256 in float32, a rounding of 3e-5 the zoo's ``slope * (key - query)`` has
    not: logits 1e-4 apart, past float32's bound.)"""
    torch.manual_seed(0)
    cfg = transformers.BloomConfig(vocab_size=97, hidden_size=48, n_layer=3, n_head=heads, layer_norm_epsilon=1e-5,
                                   bos_token_id=1, eos_token_id=2, seq_length=48)
    return randomise(transformers.BloomForCausalLM(cfg).eval())


@pytest.mark.parametrize("heads", [4, 6])  # 6: the slopes of 4, then every other one of 8's
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("length", [37, 6])
def test_bloom_logits_match_transformers(heads, left, length):
    hf = tiny_bloom(heads)
    net = from_transformers(hf).eval()
    block = net.stack.blocks[0]
    # per head, its query, key and value rows side by side: head 1's keys are fused rows 3 * 8 + 8 ...
    d_head = 48 // heads
    fused = hf.transformer.h[0].self_attention.query_key_value
    assert torch.equal(block.attn.k.weight[d_head:2 * d_head], fused.weight[4 * d_head:5 * d_head])
    assert torch.equal(block.attn.v.bias[:d_head], fused.bias[2 * d_head:3 * d_head])
    assert torch.equal(net.embedder.norm.weight, hf.transformer.word_embeddings_layernorm.weight)
    tokens, real = padded_tokens(97, length, left=left)
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what=f"BLOOM logits ({heads} heads)")


def test_alibi_slopes_are_blooms_for_any_head_count():
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    for heads in (1, 4, 6, 12, 16, 112):  # BLOOM-176B has 112 heads
        assert torch.equal(alibi_slopes(heads), _get_alibi_slopes(heads, torch.device("cpu"))), heads


@torch.no_grad()
def test_alibi_and_the_embedding_norm_matter():
    """The reference's outputs move without ALiBi or the embedding norm: the checks above see both."""
    hf = tiny_bloom()
    net = from_transformers(hf).eval()
    tokens = torch.randint(0, 97, (2, 37), generator=torch.Generator().manual_seed(3))
    base = hf(tokens).logits
    assert_matches(net(tokens), base, what="BLOOM logits")
    net.bias = None  # no positions at all
    assert (net(tokens) - base).abs().max() > 1e-3
    hf.transformer.word_embeddings_layernorm = torch.nn.Identity()
    assert (hf(tokens).logits - base).abs().max() > 1e-3


@torch.no_grad()
def test_bloom_cached_decoding_equals_recomputation_and_transformers_generate():
    hf = tiny_bloom(heads=6)
    check_generation(hf, from_transformers(hf).eval(), 97)


def test_bloom_presets():
    net = compose_config(["model=bloom"]).model.net
    b = net.block
    assert (b.norm, b.activation, b.gated, b.bias_q, b.bias_out, b.bias_ffn, b.d_ff) == \
        ("layernorm", "gelu_tanh", False, True, True, True, 512)
    assert (net.bias._target_, net.bias.n_heads, net.tie_embeddings, net.embedder.positions, net.embedder.norm_eps) \
        == ("zoo.nn.alibi.ALiBi", 4, True, "none", 1e-5)
    big = compose_config(["model=bloom_560m"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.bias.n_heads, big.block.d_ff, big.context) == \
        (24, 1024, 16, 16, 4096, 2048)


@pytest.mark.parametrize("change, says", [
    ({"apply_residual_connection_post_layernorm": True}, "apply_residual_connection_post_layernorm=True"),
    ({"n_inner": 3000}, "n_inner=3000"),
    ({"alibi_bias_max": 16}, "alibi_bias_max"),
])
def test_what_the_zoo_cannot_express_is_refused(change, says):
    with pytest.raises(ValueError, match=says):
        bloom_shape(BLOOM_560M | change)


def test_the_560m_config_reads_with_blooms_training_length():
    shape = bloom_shape(BLOOM_560M)
    assert (shape["context"], shape["block.d_ff"], shape["bias.n_heads"], shape["tie_embeddings"]) == \
        (2048, 256, 4, True)


@torch.no_grad()
def test_bloom_folder_gives_the_hf_logits(tmp_path):
    check_folder(tmp_path, tiny_bloom(), BLOOM)


@torch.no_grad()
def test_bloom_560m_layout_folder_gives_the_hf_logits(tmp_path):
    """The released BLOOM-560m config.json (scaled down in width and depth), written by save_pretrained."""
    hf = randomise(transformers.BloomForCausalLM(transformers.BloomConfig(**BLOOM_560M)).eval())
    model = check_folder(tmp_path, hf, BLOOM)
    net = model.hparams.net
    assert (net["context"], net["bias"]["n_heads"], net["tie_embeddings"]) == (2048, 4, True)


@pytest.mark.parametrize("heads", [4, 6])
def test_bloom_round_trips_through_the_export(heads):
    back = check_round_trip(tiny_bloom(heads), BLOOM)
    assert (back.config.n_head, back.config.tie_word_embeddings) == (heads, True)


def test_zoo_export_writes_a_bloom_folder_transformers_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, BLOOM, "model.net.block.d_ff=128")  # BLOOM's is 4 x 32 wide
    assert (config["model_type"], config["seq_length"], config["tie_word_embeddings"]) == ("bloom", 24, True)


def test_card_command_trains_bloom_on_tinyshakespeare(tmp_path):
    """``python train.py model=bloom data=tinyshakespeare`` (here 10 steps, 2 layers 32 wide): the
    loss falls below a uniform guess and the checkpoint reads back with its ALiBi and embedding norm."""
    from conftest import write_shakespeare
    from zoo.objectives.loading import load
    from zoo.train.run import train

    metrics = train(compose_config([
        "model=bloom", "data=tinyshakespeare", f"paths.data_dir={write_shakespeare(tmp_path / 'data')}",
        f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_dir={tmp_path / 'out'}", "data.check=false",
        "data.batch_size=4", "data.val_batches=2", "trainer.accelerator=cpu", "trainer.max_steps=10",
        "trainer.val_check_interval=10", "optim.warmup_steps=2", "model.sample_tokens=5", "model.net.n_layers=2",
        "model.net.block.d_model=32", "model.net.block.n_heads=2", "model.net.context=32"]))
    net = load(tmp_path / "out" / "checkpoints" / "last.ckpt").net
    vocab = net.head.proj.weight.shape[0]
    assert all(metrics[k] < math.log(vocab) for k in ("train/loss", "val/loss", "test/loss")), metrics
    assert (type(net.bias).__name__, net.bias.n_heads, net.embedder.norm is not None) == ("ALiBi", 2, True)


@pytest.mark.parametrize("override, differs", [
    ("model.net.block.d_ff=256", "block.d_ff"),  # BLOOM's feed-forward is 4 x 128 wide
    ("model.net.block.activation=gelu", "block.activation"),
    ("model.net.bias.n_heads=2", "bias.n_heads"),  # slopes of another head count
])
def test_the_export_refuses_a_net_bloom_cannot_express(override, differs):
    from test_export import resolved_net
    from zoo.convert.export import hf_config

    with pytest.raises(ValueError, match=f"BloomForCausalLM cannot express this net.*{differs}"):
        hf_config(FAMILY, resolved_net("bloom", [override], {"vocab_size": 50}))

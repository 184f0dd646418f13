"""Scaled dot-product attention and multi-head attention."""

import torch

from exactness import assert_matches
from zoo.nn.attention import MultiHeadAttention, attention
from zoo.nn.block import Block, BlockConfig
from zoo.nn.context import fold_into_bias
from zoo.nn.feedforward import FeedForward
from zoo.nn.masks import CausalMask, causal_mask, padding_mask, prefix_lm_mask


def test_worked_example():
    """Q=[[1,0,1],[0,1,1]], K=[[1,1,0],[0,1,1]], V=[[1,2],[3,4]] (the textbook example)."""
    q = torch.tensor([[1.0, 0, 1], [0, 1, 1]])[None, None]
    k = torch.tensor([[1.0, 1, 0], [0, 1, 1]])[None, None]
    v = torch.tensor([[1.0, 2], [3, 4]])[None, None]
    for explicit in (False, True):  # the SDPA path and the inspection path
        out, weights = attention(q, k, v, return_weights=True) if explicit else attention(q, k, v)
        assert torch.allclose(out[0, 0], torch.tensor([[2.0, 3.0], [2.28, 3.28]]), atol=5e-3)
    assert torch.allclose(weights[0, 0], torch.tensor([[0.5, 0.5], [0.36, 0.64]]), atol=5e-3)


def test_inspection_path_equals_sdpa_path():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[..., 0] = True
    bias = fold_into_bias(torch.randn(1, 4, 5, 5), mask, True, 5, 5)  # additive float, -inf where hidden
    for kwargs in ({}, {"is_causal": True}, {"mask": mask}, {"mask": bias}, {"scale": 1.0}):
        fast, _ = attention(q, k, v, **kwargs)
        slow, weights = attention(q, k, v, return_weights=True, **kwargs)
        assert_matches(slow, fast, what=f"inspection path {sorted(kwargs)}")
        assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 5)), kwargs


def test_grouped_query_attention_equals_repeated_heads():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, n_heads=4, n_kv_heads=2)
    x = torch.randn(2, 5, 16)
    out = mha(x)
    # the same attention with each kv head written out twice as full multi-head attention
    full = MultiHeadAttention(16, n_heads=4)
    full.q.load_state_dict(mha.q.state_dict())
    full.out.load_state_dict(mha.out.state_dict())
    for name in ("k", "v"):
        w = getattr(mha, name).weight.view(2, 4, 16).repeat_interleave(2, 0).reshape(16, 16)
        b = getattr(mha, name).bias.view(2, 4).repeat_interleave(2, 0).reshape(16)
        getattr(full, name).load_state_dict({"weight": w, "bias": b})
    assert_matches(out, full(x), what="grouped-query attention")


def test_self_attention_is_permutation_equivariant_without_positions():
    torch.manual_seed(0)
    block = Block(BlockConfig(d_model=16, n_heads=4, d_ff=32)).eval()
    x = torch.randn(1, 7, 16)
    perm = torch.randperm(7)
    assert_matches(block(x[:, perm]), block(x)[:, perm], what="permuted outputs")


def test_masks():
    assert causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1, 4).tolist() == [[True, True, True, True]]  # a new token sees the whole cache
    pad = torch.tensor([[True, True, False]])
    assert padding_mask(pad).shape == (1, 1, 1, 3)
    prefix = prefix_lm_mask(torch.tensor([2]), 4)[0, 0]
    assert prefix.tolist() == [[True, True, False, False], [True, True, False, False],
                               [True, True, True, False], [True, True, True, True]]
    assert CausalMask()(4, 4, "cpu") == (None, True)  # the fused causal kernel


def test_parameter_counts_of_the_paper_base_model():
    """d_model 512, d_ff 2048, 8 heads: FFN 2,099,712 and multi-head attention 1,050,624 parameters."""
    ffn = FeedForward(512, 2048)
    mha = MultiHeadAttention(512, 8)
    assert sum(p.numel() for p in ffn.parameters()) == 2_099_712
    assert sum(p.numel() for p in mha.parameters()) == 1_050_624


def test_bad_shapes_fail_clearly():
    import pytest

    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_heads=3"):
        BlockConfig(d_model=100, n_heads=3)

"""Scaled dot-product attention and multi-head attention."""

import math

import pytest
import torch

from exactness import assert_matches
from zoo.nn.attention import MultiHeadAttention, attention
from zoo.nn.block import Block, BlockConfig
from zoo.nn.context import fold_into_bias
from zoo.nn.feedforward import FeedForward
from zoo.nn.masks import CausalMask, causal_mask, padding_mask, prefix_lm_mask


# The textbook example: Q=[[1,0,1],[0,1,1]], K=[[1,1,0],[0,1,1]], V=[[1,2],[3,4]], d_k = 3.
Q = [[1.0, 0, 1], [0, 1, 1]]
K = [[1.0, 1, 0], [0, 1, 1]]
V = [[1.0, 2], [3, 4]]


def worked_example_expected() -> dict[str, torch.Tensor]:
    """Its matrices, computed here from the definition (float64), not copied from the text."""
    q, k, v = (torch.tensor(m, dtype=torch.float64) for m in (Q, K, V))
    scores = torch.tensor([[sum(a * b for a, b in zip(qi, kj)) for kj in K] for qi in Q], dtype=torch.float64)
    scaled = scores / math.sqrt(3)
    weights = scaled.exp() / scaled.exp().sum(-1, keepdim=True)
    return {"q": q, "k": k, "scores": scores, "scaled": scaled, "weights": weights, "out": weights @ v}


def test_worked_example_numbers():
    """The seed's own numbers: QK^T = [[1,1],[1,2]], scaled [[0.58,0.58],[0.58,1.15]], weights
    [[0.5,0.5],[0.36,0.64]], output [[2,3],[2.28,3.28]] (to the text's two decimals)."""
    e = worked_example_expected()
    assert e["scores"].tolist() == [[1.0, 1.0], [1.0, 2.0]]
    assert e["scaled"].round(decimals=2).tolist() == [[0.58, 0.58], [0.58, 1.15]]
    assert e["weights"].round(decimals=2).tolist() == [[0.5, 0.5], [0.36, 0.64]]
    assert e["out"].round(decimals=2).tolist() == [[2.0, 3.0], [2.28, 3.28]]


def test_worked_example_through_attention():
    e = worked_example_expected()
    q, k, v = (torch.tensor(m, dtype=torch.float64)[None, None] for m in (Q, K, V))
    fast, _ = attention(q, k, v)
    slow, weights = attention(q, k, v, return_weights=True)
    torch.testing.assert_close(weights[0, 0], e["weights"], rtol=0, atol=1e-14)
    for out in (fast, slow):  # the SDPA path and the inspection path
        torch.testing.assert_close(out[0, 0], e["out"], rtol=0, atol=1e-14)


def test_worked_example_through_multi_head_attention():
    """The same numbers out of the module every family uses: one head of d_k = 3 whose
    projections give Q, K and V for the inputs e_1, e_2 (each weight's columns are the rows of
    Q, K, V; V padded with a zero column), no bias, and an identity output projection."""
    e = worked_example_expected()
    mha = MultiHeadAttention(d_model=3, n_heads=1, bias_q=False, bias_k=False, bias_v=False, bias_out=False).double()
    with torch.no_grad():
        for proj, rows in ((mha.q, Q), (mha.k, K), (mha.v, [r + [0.0] for r in V])):
            proj.weight.zero_()
            proj.weight[:, :2] = torch.tensor(rows, dtype=torch.float64).T
        mha.out.weight.copy_(torch.eye(3, dtype=torch.float64))
    x = torch.eye(3, dtype=torch.float64)[None, :2]  # (1, 2, 3): e_1, e_2
    with torch.no_grad():
        q, k = mha._heads(mha.q(x), 1)[0, 0], mha._heads(mha.k(x), 1)[0, 0]
        torch.testing.assert_close(q @ k.T, e["scores"], rtol=0, atol=0)
        torch.testing.assert_close(q @ k.T / math.sqrt(mha.d_head), e["scaled"], rtol=0, atol=1e-15)
        fast = mha(x)
        mha.keep_weights = True
        slow = mha(x)
    torch.testing.assert_close(mha.last_weights[0, 0], e["weights"], rtol=0, atol=1e-14)
    for out in (fast, slow):
        torch.testing.assert_close(out[0, :, :2], e["out"], rtol=0, atol=1e-14)
        assert torch.all(out[0, :, 2] == 0)


@pytest.mark.parametrize("d_k", [16, 64])
def test_dot_products_of_unit_variance_vectors_have_variance_d_k(d_k):
    """Why the scale is 1/sqrt(d_k): for q, k with independent N(0, 1) entries, q . k has mean 0 and
    variance d_k, and q . k / sqrt(d_k) variance 1. 40,000 draws (fixed seed): the variance
    estimate's standard error is sqrt((2 d_k^2 + 6 d_k) / n) / d_k < 0.8%, so 4% is > 5 sigma."""
    generator = torch.Generator().manual_seed(0)
    n = 40_000
    q, k = torch.randn(2, n, d_k, generator=generator, dtype=torch.float64)
    dots = (q * k).sum(-1)
    assert abs(dots.mean().item()) < 5 * math.sqrt(d_k / n)
    assert dots.var().item() == pytest.approx(d_k, rel=0.04)
    assert (dots / math.sqrt(d_k)).var().item() == pytest.approx(1.0, rel=0.04)


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
    mha = MultiHeadAttention(d_model=16, n_heads=4, n_kv_heads=2)
    x = torch.randn(2, 5, 16)
    out = mha(x)
    # the same attention with each kv head written out twice as full multi-head attention
    full = MultiHeadAttention(d_model=16, n_heads=4)
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
    mha = MultiHeadAttention(d_model=512, n_heads=8)
    assert sum(p.numel() for p in ffn.parameters()) == 2_099_712
    assert sum(p.numel() for p in mha.parameters()) == 1_050_624


def test_bad_shapes_fail_clearly():
    import pytest

    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_heads=3"):
        BlockConfig(d_model=100, n_heads=3)

"""Position encodings."""

import math

import torch

from zoo.nn.embedders import TokenEmbedder
from zoo.nn.positions import RotaryEmbedding, apply_rotary, sinusoids


def test_sinusoids_follow_the_paper():
    table = sinusoids(50, 16)
    for pos in (0, 3, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert math.isclose(table[pos, 2 * i], math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-6)


def test_sinusoid_offset_is_a_fixed_linear_map():
    """PE(pos + k) = M_k PE(pos) with M_k independent of pos."""
    d, k = 16, 7
    table = sinusoids(100, d)
    # M_k rotates each (sin, cos) pair by k * w_i: a block-diagonal matrix built from k alone
    m = torch.zeros(d, d)
    for i in range(d // 2):
        w = k / 10000 ** (2 * i / d)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[math.cos(w), math.sin(w)], [-math.sin(w), math.cos(w)]])
    assert torch.allclose(table[:-k] @ m.T, table[k:], atol=1e-4)  # the same M_k at every position


def test_rotary_scores_depend_on_relative_position_only():
    rope = RotaryEmbedding(8, 64)
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, 8).unbind(0)

    def score(i: int, j: int) -> float:
        cos, sin = rope(64)
        return (apply_rotary(q, cos[i], sin[i]) * apply_rotary(k, cos[j], sin[j])).sum().item()

    assert math.isclose(score(3, 1), score(20, 18), rel_tol=1e-4)


def test_positions_break_permutation_equivariance():
    emb = TokenEmbedder(10, 16, max_len=8, positions="learned")
    tokens = torch.tensor([[1, 2, 3, 4]])
    perm = torch.tensor([2, 0, 3, 1])
    assert not torch.allclose(emb(tokens)[:, perm], emb(tokens[:, perm]))


def test_too_long_sequence_names_the_lengths():
    import pytest

    emb = TokenEmbedder(10, 16, max_len=8)
    with pytest.raises(ValueError, match="length 9 is longer than the model's context of 8"):
        emb(torch.zeros(1, 9, dtype=torch.long))

"""The Sparse Transformer's strided and fixed patterns (zoo/nn/sparse.py), cell by cell against
the paper's definitions written as sets (Child et al. 2019, section 4.3), their cached
(q_len < k_len) rows, padding, a per-layer stack that alternates them with dense layers, and
their bad input."""

from __future__ import annotations

import pytest
import torch

from exactness import assert_matches, randomise
from zoo.models.model import Model
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import CausalMask, PerLayer
from zoo.nn.sparse import FixedMask, StridedMask

CPU = torch.device("cpu")


def paper_strided(i: int, stride: int) -> set[int]:
    """A(1) = {t, ..., i} with t = max(0, i - l); A(2) = {j : (i - j) mod l = 0}; j <= i."""
    return set(range(max(0, i - stride), i + 1)) | {j for j in range(i + 1) if (i - j) % stride == 0}


def paper_fixed(i: int, stride: int, summary: int) -> set[int]:
    """A(1) = {j : floor(j/l) = floor(i/l)}; A(2) = {j : j mod l in {l - c, ..., l}}; j <= i."""
    own = {j for j in range(i + 1) if j // stride == i // stride}
    return own | {j for j in range(i + 1) if j % stride in range(stride - summary, stride + 1)}


def seen(mask, length: int) -> list[set[int]]:
    cells, is_causal = mask(length, length, CPU)
    assert not is_causal and cells.dtype == torch.bool
    return [set(torch.nonzero(row).flatten().tolist()) for row in cells]


@pytest.mark.parametrize("stride", [2, 3, 4])
def test_strided_cells_are_the_papers_sets(stride):
    assert seen(StridedMask(stride), 17) == [paper_strided(i, stride) for i in range(17)]


def test_strided_concrete_row():
    # query 10, stride 3: the window 7..10 and every third key back from 10: 1, 4 (7 and 10 already in)
    assert sorted(seen(StridedMask(3), 11)[10]) == [1, 4, 7, 8, 9, 10]


@pytest.mark.parametrize(("stride", "summary"), [(2, 1), (4, 1), (4, 2), (5, 3)])
def test_fixed_cells_are_the_papers_sets(stride, summary):
    assert seen(FixedMask(stride, summary), 19) == [paper_fixed(i, stride, summary) for i in range(19)]


def test_fixed_concrete_row():
    # query 9, blocks of 4, summary 1: its own block 8..9 and the last cell of each block before: 3, 7
    assert sorted(seen(FixedMask(4), 10)[9]) == [3, 7, 8, 9]


@pytest.mark.parametrize("mask", [StridedMask(3), FixedMask(4, 2)])
def test_the_last_queries_of_a_longer_key_sequence_are_the_rows_of_the_full_mask(mask):
    full, _ = mask(12, 12, CPU)
    for q_len in (1, 5, 12):
        rows, _ = mask(q_len, 12, CPU)
        assert torch.equal(rows, full[-q_len:])


@pytest.mark.parametrize("mask", [StridedMask(2), FixedMask(3)])
def test_padding_is_hidden_too(mask):
    padding = torch.tensor([[True, True, True, True, False, False]])
    out, _ = mask(6, 6, CPU, padding)
    assert out.shape == (1, 1, 6, 6) and not out[..., 4:].any()
    alone, _ = mask(6, 6, CPU)
    assert torch.equal(out[0, 0, :, :4], alone[:, :4])


@pytest.mark.parametrize(("make", "match"), [
    (lambda: StridedMask(1), "StridedMask stride=1"),
    (lambda: StridedMask(2.0), "StridedMask stride=2.0"),
    (lambda: FixedMask(1), "FixedMask stride=1"),
    (lambda: FixedMask(4, 0), "FixedMask summary=0"),
    (lambda: FixedMask(4, 4), "summary=4 with stride=4"),
])
def test_bad_settings_are_refused_naming_the_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def lm(mask, context: int = 32) -> Model:
    torch.manual_seed(0)
    block = BlockConfig(d_model=16, n_heads=4, d_ff=32)
    return randomise(Model(TokenEmbedder(30, 16, max_len=context), mask, block, 2, LMHead(16, 30), context=context).eval())


@pytest.mark.parametrize(("mask", "match"), [
    (StridedMask(31), "stride=31 with the model's context=32"),
    (PerLayer([CausalMask(), FixedMask(32)]), "FixedMask stride=32 is not shorter than the model's context=32"),
])
def test_a_pattern_that_never_cuts_at_the_models_context_is_refused(mask, match):
    with pytest.raises(ValueError, match=match):
        lm(mask)


def test_gpt3_style_alternation_hides_what_the_pattern_hides_and_decodes_with_the_cache():
    net = lm(PerLayer([CausalMask(), StridedMask(4)]))
    tokens = torch.randint(0, 30, (2, 20))
    with torch.no_grad():
        full = net(tokens)
        dense = lm(CausalMask())(tokens)
        cache = net.new_cache()
        steps = [net(tokens[:, :5], cache=cache)]
        steps += [net(tokens[:, t : t + 1], cache=cache) for t in range(5, 20)]
    assert_matches(torch.cat(steps, dim=1), full, what="cached decoding under a strided layer")
    # the same weights without the sparse layer: equal while the pattern hides nothing
    # (queries 0..4 see every key: the window of 4 and themselves), different after
    assert_matches(full[:, :5], dense[:, :5], what="positions the pattern does not cut")
    assert (full[:, 5:] - dense[:, 5:]).abs().max() > 1e-3

"""The shared exactness bound itself: scale-aware, dtype-aware, and it can fail."""

import pytest
import torch

from exactness import assert_matches


def test_bound_scales_with_the_reference():
    ref = torch.tensor([27.0, -3.0, 0.5])
    assert_matches(ref + torch.tensor([1.1e-5, 0, 0]), ref)  # 1e-5 + 1e-6 * 27 = 3.7e-5 allowed
    with pytest.raises(AssertionError, match=r"max \|ref - out\| = [45]\.\d+e-05 at index \(0,\).*scale max \|ref\| = 27"):
        assert_matches(ref + torch.tensor([5e-5, 0, 0]), ref)


def test_float64_catches_what_fp32_noise_would_hide():
    ref = torch.randn(4, 5, dtype=torch.float64)
    wrong = ref * (1 + 1e-7)  # e.g. a slightly wrong constant: invisible in fp32
    assert_matches(wrong.float(), ref.float())
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(wrong, ref)


def test_mask_selects_the_compared_positions_and_nan_fails():
    ref = torch.zeros(2, 3)
    out = ref.clone()
    out[1, 2] = 1.0  # a padded position
    real = torch.tensor([[True, True, True], [True, True, False]])
    assert_matches(out, ref, real)
    with pytest.raises(AssertionError):
        assert_matches(out, ref)
    with pytest.raises(AssertionError, match="selects nothing"):
        assert_matches(out, ref, torch.zeros(2, 3, dtype=torch.bool))
    out[0, 0] = float("nan")
    with pytest.raises(AssertionError):
        assert_matches(out, ref, real)

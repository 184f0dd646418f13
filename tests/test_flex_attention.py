"""The FlexAttention backend (zoo/nn/flex.py) gives dense SDPA's outputs under the same mask
(inference on CPU; training there is refused), with padding and grouped-query heads."""

from __future__ import annotations

import pytest
import torch

from exactness import assert_matches
from zoo.nn import flex
from zoo.nn.attention import attention
from zoo.nn.masks import CausalMask, LocalMask, NoMask
from zoo.nn.sparse import StridedMask

pytestmark = pytest.mark.skipif(not flex.available(), reason="this torch has no FlexAttention")
CPU = torch.device("cpu")


@pytest.mark.parametrize("mask", [NoMask(), CausalMask(), LocalMask(20), StridedMask(16)], ids=repr)
def test_flex_equals_dense_sdpa(mask):
    torch.manual_seed(0)
    length = 128
    q = torch.randn(2, 4, length, 16)
    k, v = torch.randn(2, 2, length, 16), torch.randn(2, 2, length, 16)
    padding = torch.ones(2, length, dtype=torch.bool)
    padding[1, 100:] = False
    dense_mask, is_causal = mask(length, length, CPU, padding)
    want = attention(q, k, v, mask=dense_mask, is_causal=is_causal)[0]
    with torch.no_grad():
        got = flex.flex(q, k, v, flex.block_mask(mask, length, length, CPU, padding))
    real = padding[:, None, :, None].expand_as(want)
    assert_matches(got, want, where=real, what=f"FlexAttention under {mask!r}")


def test_training_on_cpu_is_refused():
    q = torch.randn(1, 1, 128, 16, requires_grad=True)
    with pytest.raises(ValueError, match="cannot train on CPU"):
        flex.flex(q, q, q, flex.block_mask(CausalMask(), 128, 128, CPU))

"""The one bound every exactness test uses: the zoo's output against a reference's.

An absolute bound on logits of any size passes or fails by the CPU it runs on: fp32
kernels round differently on different processors, and the rounding grows with the
values. So the bound scales with the reference:

    max |ref - out| <= atol + rtol * max |ref|

fp32: atol = 1e-5, rtol = 1e-6 (a few ulps of the largest value, summed over a short
chain of matmuls). float64: atol = 1e-10, rtol = 1e-12 -- the check that catches a wrong
formula hidden under fp32 noise, for the references that compute in float64 throughout.
A test that must be looser says why, next to its own ``atol``/``rtol``.
"""

from __future__ import annotations

import torch
from torch import Tensor

BOUNDS = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-10, 1e-12)}


def assert_matches(out: Tensor, ref: Tensor, where: Tensor | None = None, *,
                   atol: float | None = None, rtol: float | None = None, what: str = "output") -> None:
    """Assert ``out`` equals the reference ``ref`` within the scale-aware bound.

    Args:
        out, ref: same shape; the dtype picks the default bound (fp32 or float64).
        where: optional boolean mask broadcastable to the shape: compare only there (e.g. the
            real, unpadded positions, whose outputs are the only meaningful ones).
        atol, rtol: override the dtype's bound (say why in the test).
        what: named in the failure message.
    """
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != reference {ref.dtype}"
    default_atol, default_rtol = BOUNDS[ref.dtype]
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    diff = (out.detach() - ref.detach()).abs()
    scale_of = ref.detach().abs()
    if where is not None:
        keep = torch.broadcast_to(where.to(torch.bool), diff.shape)
        assert keep.any(), f"{what}: the comparison mask selects nothing"
        diff = diff.masked_fill(~keep, 0)
        scale_of = scale_of.masked_fill(~keep, 0)
    scale = scale_of.max().item()
    worst = diff.max().item()
    bound = atol + rtol * scale
    if not worst <= bound:  # also fails on NaN
        at = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        raise AssertionError(
            f"{what} differs from the reference: max |ref - out| = {worst:.3e} at index {at} "
            f"(ref {ref[at].item():.9g}, out {out[at].item():.9g}); reference scale max |ref| = {scale:.3g}; "
            f"bound atol + rtol * scale = {atol:g} + {rtol:g} * {scale:.3g} = {bound:.3e}")

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
from torch import Tensor, nn

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


# --- An honest reference -------------------------------------------------------------------------
# A tiny reference at its default init has every norm weight 1, every bias 0 and weights of std 0.02,
# so its activations are ~0.02 and its logits ~1e-1. Such a test cannot tell a norm or a bias read
# from the wrong module (they are all equal), nor an erf GELU from a tanh one (they differ by
# ~1e-4 at |x| ~ 2 but by ~1e-9 at |x| ~ 0.02). `randomise` draws every parameter away from its init:
# norms around 1, biases around 0, matrices at unit gain (activations of unit scale, attention that
# is far from uniform, logits spanning several units), so the bound is tight against what it checks.
NORM_STD = 0.1  # norm weights 1 + N(0, 0.1): every norm differs from every other
BIAS_STD = 0.1  # biases N(0, 0.1): every bias differs from zero and from every other


def _is_norm(module: nn.Module) -> bool:
    name = type(module).__name__
    return isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.modules.batchnorm._BatchNorm)) \
        or name.endswith(("Norm", "LayerNorm", "RMSNorm", "Norm2d"))


def randomise(model: nn.Module, seed: int = 0, gain: float = 1.0) -> nn.Module:
    """Draw every parameter of ``model`` away from its init, in place; returns ``model``.

    - a norm's weight: ``1 + N(0, NORM_STD)``; every bias (of a norm or not): ``N(0, BIAS_STD)``;
    - any other 1-D parameter (a scale: layer scale, a gate): ``1 + N(0, NORM_STD)``;
    - a Linear / Conv weight: ``N(0, gain / sqrt(fan_in))`` (unit gain: outputs of the inputs' scale);
      Hugging Face's ``Conv1D`` (GPT-2) stores (in, out), so its fan-in is the first dimension;
      transformers 5's mixture-of-experts ``*Router`` / ``*Experts`` hold (stacks of) Linear weights
      as plain parameters, (..., out, in): their fan-in is the last dimension;
    - an embedding table and any free tensor (CLS tokens, learned positions, mask tokens): ``N(0, 1)``.

    Tied parameters are drawn once (they stay tied). Buffers are left alone.
    """
    gen = torch.Generator().manual_seed(seed)
    owner = {}
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            owner.setdefault(id(p), (module, pname))
    with torch.no_grad():
        for _, p in model.named_parameters():
            module, pname = owner[id(p)]
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            stacked = type(module).__name__.endswith(("Router", "Experts")) and p.dim() >= 2
            if pname.endswith("bias"):
                p.copy_(noise * BIAS_STD)
            elif _is_norm(module) or p.dim() <= 1:
                p.copy_(1 + noise * NORM_STD)
            elif stacked:
                p.copy_(noise * (gain / p.shape[-1] ** 0.5))
            elif isinstance(module, nn.Embedding) or not isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)) \
                    and type(module).__name__ != "Conv1D":
                p.copy_(noise)
            else:
                fan_in = p.shape[0] if type(module).__name__ == "Conv1D" else p[0].numel()
                p.copy_(noise * (gain / fan_in ** 0.5))
    return model


def assert_untied(model: nn.Module) -> None:
    """Assert a model's output head does not share the input embedding (transformers 5 may tie a
    tiny model's head despite ``tie_word_embeddings=False``)."""
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    assert head.weight is not emb.weight and head.weight.data_ptr() != emb.weight.data_ptr(), \
        f"{type(model).__name__}: the head is the embedding (tied)"

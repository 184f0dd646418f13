"""Next-token cross-entropy of a large vocabulary without the full logits.

Qwen, Gemma and Llama 3 have 150k-260k-token vocabularies: the logits of one batch, (B, L, V) in
fp32, are larger than the network's activations, and a plain ``F.cross_entropy`` keeps them, their
log-softmax and their gradient at once. Here the loss is computed over chunks of positions: each
chunk's logits are made from the final hidden states and the head's matrix, reduced to their
logsumexp and the target's logit, and dropped; backward makes them again, chunk by chunk, to form the
gradients of the hidden states and of the head (the "cut cross-entropy" and Liger kernels' scheme, in
plain PyTorch). At most one chunk's logits (chunk, V) exist at a time; the result is the full
computation's up to fp32 rounding (the order of the sums differs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE = -100  # targets that carry no loss, as F.cross_entropy's default ignore_index


def _matmul_dtype(hidden: Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's where it is on (forward under bf16 autocast),
    else the hidden states'. Backward, which autocast does not cover, makes the logits in the same."""
    device = hidden.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype


def _logits(hidden: Tensor, weight: Tensor, bias: Tensor | None, softcap: float | None,
            dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """(chunk, D) -> (the chunk's logits (chunk, V) in fp32 (float64 stays), made in ``dtype``; their
    tanh(logits / softcap) or None)."""
    logits = F.linear(hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    if softcap is None:
        return logits, None
    capped = torch.tanh(logits / softcap)
    return capped * softcap, capped


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of hidden (N, D) @ weight (V, D).T + bias against targets (N,), by chunks.

    Where a gradient is wanted, forward forms it too, chunk by chunk, while the chunk's logits are at
    hand (Liger's fused linear cross-entropy): d loss / d logits = (softmax - one-hot) / count, then
    its products with the head's matrix and the chunk's hidden states. The step then does the three
    matmuls of the head that the full logits' forward and backward do, no recomputation; backward
    only scales the kept gradients (N, D) and (V, D) by the incoming one, in place (no second
    copy of the (V, D) one), so it runs once."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, chunk: int,
                softcap: float | None, grads: bool) -> Tensor:
        valid, dtype = targets != IGNORE, _matmul_dtype(hidden)
        count = valid.sum()
        want = [grads and needed for needed in ctx.needs_input_grad[:3]]
        d_hidden = torch.empty_like(hidden) if want[0] else None
        d_weight = torch.zeros_like(weight) if want[1] else None
        d_bias = torch.zeros_like(bias) if bias is not None and want[2] else None
        total = hidden.new_zeros((), dtype=torch.promote_types(dtype, torch.float32))
        for start in range(0, hidden.shape[0], chunk):
            h = hidden[start:start + chunk]
            logits, capped = _logits(h, weight, bias, softcap, dtype)
            target, keep = targets[start:start + chunk], valid[start:start + chunk]
            picked = logits.gather(1, target.clamp_min(0)[:, None]).squeeze(1)
            top = logits.amax(-1, keepdim=True)
            exp = logits.sub_(top).exp_()  # in place: the chunk's (chunk, V) buffer is the one there is
            sums = exp.sum(-1, keepdim=True)
            total += torch.where(keep, (top + sums.log()).squeeze(1) - picked, 0).sum()  # logsumexp - target's
            if not any(want):
                continue
            d = _logits_gradient(exp, sums, capped, target, torch.where(keep, 1 / count.to(total.dtype), 0))
            if d_hidden is not None:
                d_hidden[start:start + chunk] = d.to(dtype) @ weight.to(dtype)
            if d_weight is not None:  # summed in the weight's dtype (fp32 under autocast)
                d_weight.addmm_(d.T.to(weight.dtype), h.to(weight.dtype))
            if d_bias is not None:
                d_bias += d.sum(0).to(bias.dtype)
        ctx.save_for_backward(d_hidden, d_weight, d_bias)
        ctx.spent = False
        return total / count  # no target at all: 0 / 0 = nan, as F.cross_entropy

    @staticmethod
    def backward(ctx, grad: Tensor):
        if ctx.spent:
            raise RuntimeError("the chunked loss scales its gradients in place: backward runs once through it "
                               "(no retain_graph=True)")
        ctx.spent = True
        return *(None if d is None else d.mul_(grad.to(d.dtype)) for d in ctx.saved_tensors), None, None, None, None


def _logits_gradient(exp: Tensor, sums: Tensor, capped: Tensor | None, target: Tensor, weights: Tensor) -> Tensor:
    """d loss / d (the head's logits, before the soft-cap) of one chunk, (chunk, V): the softmax
    exp / sums minus the targets' one-hot, times each position's weight (1 / the targets counted, 0
    for -100); through softcap * tanh(x / softcap), times 1 - tanh^2. Made in place of ``exp`` and
    ``capped`` (the chunk's largest buffers)."""
    d = exp.mul_(weights[:, None] / sums)
    d.scatter_add_(1, target.clamp_min(0)[:, None], -weights[:, None])
    if capped is not None:
        d.mul_(capped.square_().neg_().add_(1))
    return d


def chunked_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, chunk: int,
                          softcap: float | None = None) -> Tensor:
    """Mean cross-entropy of the logits ``hidden @ weight.T + bias`` (soft-capped to
    ``softcap * tanh(logits / softcap)`` where given) against ``targets``, ``chunk`` positions at a
    time, forward and backward: ``F.cross_entropy(logits.float(), targets, ignore_index=-100)`` without
    the (N, V) logits. hidden (..., D), targets (...) ids (-100: no loss), weight (V, D), bias (V,)."""
    if chunk < 1:
        raise ValueError(f"the loss chunk must be a positive number of positions, got {chunk}")
    grads = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    return _ChunkedCrossEntropy.apply(hidden.flatten(0, -2), weight, bias, targets.flatten(), chunk, softcap, grads)

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
    """Mean cross-entropy of hidden (N, D) @ weight (V, D).T + bias against targets (N,), by chunks."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, chunk: int,
                softcap: float | None) -> Tensor:
        valid, dtype = targets != IGNORE, _matmul_dtype(hidden)
        total = hidden.new_zeros((), dtype=torch.promote_types(dtype, torch.float32))
        for start in range(0, hidden.shape[0], chunk):
            logits, _ = _logits(hidden[start:start + chunk], weight, bias, softcap, dtype)
            target, keep = targets[start:start + chunk], valid[start:start + chunk]
            picked = logits.gather(1, target.clamp_min(0)[:, None]).squeeze(1)
            total += torch.where(keep, torch.logsumexp(logits, -1) - picked, 0).sum()
            del logits
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.chunk, ctx.softcap, ctx.dtype = chunk, softcap, dtype
        return total / valid.sum()  # no target at all: 0 / 0 = nan, as F.cross_entropy

    @staticmethod
    def backward(ctx, grad: Tensor):
        hidden, weight, bias, targets = ctx.saved_tensors
        valid = targets != IGNORE
        per_target = grad / valid.sum()  # d loss / d (one position's loss)
        d_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        d_weight = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        d_bias = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[2] else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            h = hidden[start:start + ctx.chunk]
            logits, capped = _logits(h, weight, bias, ctx.softcap, ctx.dtype)
            target, keep = targets[start:start + ctx.chunk], valid[start:start + ctx.chunk]
            d = torch.softmax(logits, -1)  # d loss / d logits = softmax - one-hot(target), per position
            del logits
            d.scatter_add_(1, target.clamp_min(0)[:, None], -torch.ones_like(d[:, :1]))
            d.mul_(torch.where(keep, per_target, 0)[:, None])
            if capped is not None:  # through softcap * tanh(x / softcap): times 1 - tanh^2
                d.mul_(1 - capped.square_())
                del capped
            if d_hidden is not None:
                d_hidden[start:start + ctx.chunk] = d.to(ctx.dtype) @ weight.to(ctx.dtype)
            if d_weight is not None:  # summed in the weight's dtype (fp32 under autocast)
                d_weight.addmm_(d.T.to(weight.dtype), h.to(weight.dtype))
            if d_bias is not None:
                d_bias += d.sum(0).to(bias.dtype)
        return d_hidden, d_weight, d_bias, None, None, None


def chunked_cross_entropy(hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, chunk: int,
                          softcap: float | None = None) -> Tensor:
    """Mean cross-entropy of the logits ``hidden @ weight.T + bias`` (soft-capped to
    ``softcap * tanh(logits / softcap)`` where given) against ``targets``, ``chunk`` positions at a
    time, forward and backward: ``F.cross_entropy(logits.float(), targets, ignore_index=-100)`` without
    the (N, V) logits. hidden (..., D), targets (...) ids (-100: no loss), weight (V, D), bias (V,)."""
    if chunk < 1:
        raise ValueError(f"the loss chunk must be a positive number of positions, got {chunk}")
    return _ChunkedCrossEntropy.apply(hidden.flatten(0, -2), weight, bias, targets.flatten(), chunk, softcap)

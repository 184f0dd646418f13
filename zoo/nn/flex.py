"""The FlexAttention backend: PyTorch's ``flex_attention`` under a ``BlockMask`` built from the
same mask definition (the mask's ``cells``, used as FlexAttention's ``mask_mod``), so that the
blocks a mask hides are skipped by the kernel. For GPU training and for inference: this torch
has no FlexAttention backward on CPU (CPU training takes the block backend, zoo/nn/blocked.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.nn.masks import Mask


def available() -> bool:
    """Whether this torch has FlexAttention."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def block_mask(mask: Mask, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None):
    """A FlexAttention ``BlockMask`` of ``mask`` for ``q_len`` queries (the last of ``k_len``
    positions); key_padding (B, k_len) True at real keys."""
    from torch.nn.attention.flex_attention import create_block_mask

    if not mask.has_cells:
        raise ValueError(f"the flex attention backend needs a mask that says its cells; {mask!r} does not "
                         f"(use attention_backend=sdpa)")
    start = k_len - q_len

    def mask_mod(b, h, q, k):
        seen = mask.cells(q + start, k, k_len)
        return seen if key_padding is None else seen & key_padding[b, k]

    batch = None if key_padding is None else key_padding.shape[0]
    return create_block_mask(mask_mod, batch, None, q_len, k_len, device=device)


def flex(q: Tensor, k: Tensor, v: Tensor, mask, scale: float | None = None, softcap: float | None = None) -> Tensor:
    """q (B, H, Lq, Dh), k/v (B, Hkv, Lk, Dh) -> (B, H, Lq, Dh) under the ``BlockMask`` ``mask``;
    ``softcap`` c: the scaled scores become c * tanh(s / c) (FlexAttention's ``score_mod``)."""
    from torch.nn.attention.flex_attention import flex_attention

    if q.device.type == "cpu" and torch.is_grad_enabled() and q.requires_grad:
        raise ValueError("attention_backend=flex cannot train on CPU (this torch has no FlexAttention backward "
                         "there): use attention_backend=blocks")
    def capped(score: Tensor, b, h, q_idx, k_idx) -> Tensor:
        return torch.tanh(score / softcap) * softcap

    return flex_attention(q, k, v, score_mod=None if softcap is None else capped, block_mask=mask, scale=scale,
                          enable_gqa=k.shape[1] != q.shape[1])

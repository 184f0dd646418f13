"""Analytic training FLOPs (forward + backward) and the peak FLOP/s of accelerators, for MFU.

Counted as the matrix multiplications cost: every Linear layer costs 2 * in * out per
token in the forward pass, attention costs 2 * 2 * Lq * Lk * d per layer (scores and
the weighted sum), and the backward pass costs twice the forward. Norms, activations
and softmax are left out (they are not matmuls); so is the causal mask's saving, as
the dense kernels compute the full square.
"""

from __future__ import annotations

import time

import torch
from torch import nn


def linear_flops(module: nn.Module) -> int:
    """Forward FLOPs per token of every Linear inside ``module``."""
    return sum(2 * m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def cross_kv_flops(blocks: nn.ModuleList) -> int:
    """Forward FLOPs per *source* token of the cross-attention key/value projections
    (they read the encoder's output, not the decoder's positions)."""
    return sum(linear_flops(b.cross_attn.k) + linear_flops(b.cross_attn.v)
               for b in blocks if b.cross_attn is not None)


def attention_flops(blocks: nn.ModuleList, q_len: int, k_len: int, cross_len: int = 0) -> int:
    """Forward FLOPs of the attention products of one sequence through ``blocks``:
    self-attention over (q_len x k_len), cross-attention over (q_len x cross_len)."""
    total = 0
    for block in blocks:
        total += 4 * q_len * k_len * block.attn.n_heads * block.attn.d_head
        if block.cross_attn is not None:
            total += 4 * q_len * cross_len * block.cross_attn.n_heads * block.cross_attn.d_head
    return total


def tower_flops(tower, length: int, cross_len: int = 0) -> int:
    """Forward FLOPs of one sequence of ``length`` positions through a tower's Blocks
    (``zoo.nn.tower.Tower``; its embedder is left out), reading a memory of ``cross_len``
    positions if its Blocks have cross-attention."""
    kv = cross_kv_flops(tower.blocks)
    return (length * (linear_flops(tower.stack) - kv) + cross_len * kv
            + attention_flops(tower.blocks, length, length, cross_len))


def training_flops(forward_flops: int) -> int:
    """Forward + backward: the backward pass costs twice the forward."""
    return 3 * forward_flops


# Dense (not sparse) peak FLOP/s per device for the compute dtype, from the vendors' data sheets.
PEAK_FLOPS = {
    "H200": {torch.bfloat16: 989e12, torch.float16: 989e12, torch.float32: 67e12},
    "H100": {torch.bfloat16: 989e12, torch.float16: 989e12, torch.float32: 67e12},
    "A100": {torch.bfloat16: 312e12, torch.float16: 312e12, torch.float32: 19.5e12},
    "L40S": {torch.bfloat16: 362e12, torch.float16: 362e12, torch.float32: 91.6e12},
    "A10G": {torch.bfloat16: 125e12, torch.float16: 125e12, torch.float32: 31.2e12},
    "RTX 4090": {torch.bfloat16: 165e12, torch.float16: 165e12, torch.float32: 82.6e12},
    "V100": {torch.float16: 125e12, torch.float32: 15.7e12},
    "T4": {torch.float16: 65e12, torch.float32: 8.1e12},
}


def measured_matmul_flops(device: torch.device, dtype: torch.dtype, size: int = 1024, seconds: float = 0.5) -> float:
    """FLOP/s of a square matmul on ``device`` (for devices not in the table, e.g. CPUs)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b
    sync()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    sync()
    return 2 * size**3 * n / (time.perf_counter() - start)


def peak_flops(device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """(peak FLOP/s, where the figure comes from) for one device."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, table in PEAK_FLOPS.items():
            if key in name and dtype in table:
                return table[dtype], f"{name} data sheet, dense {str(dtype).removeprefix('torch.')}"
        return measured_matmul_flops(device, dtype), f"{name}, measured matmul"
    dtype = torch.float32 if dtype not in (torch.float32, torch.float64) else dtype  # CPU bf16 is emulated
    return measured_matmul_flops(device, dtype), f"{device.type}, measured matmul ({torch.get_num_threads()} threads)"

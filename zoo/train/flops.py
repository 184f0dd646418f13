"""The peak FLOP/s of accelerators, for MFU (the model's analytic FLOPs are :mod:`zoo.nn.flops`'s):
a vendor's data sheet for known GPUs, else a measured matmul."""

from __future__ import annotations

import time

import torch


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

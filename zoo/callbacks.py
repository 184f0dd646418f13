"""Callbacks the training configs add: throughput and model FLOPs utilisation."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.utilities import rank_zero_info

from zoo.flops import peak_flops


class Throughput(ThroughputMonitor):
    """Lightning's ``ThroughputMonitor`` for any zoo objective: logs samples/s, items/s
    (tokens, patches or frames) and MFU, the objective reporting ``flops_per_batch``
    (analytic, see zoo.flops) and counting its batches with ``batch_counts``. The peak
    FLOP/s is the device's dense figure (or a measured matmul) and is printed once."""

    def __init__(self, window_size: int = 50, **kwargs: Any):
        self._module: L.LightningModule | None = None
        super().__init__(batch_size_fn=lambda batch: self._module.batch_counts(batch)[0],
                         length_fn=lambda batch: self._module.batch_counts(batch)[1],
                         window_size=window_size, **kwargs)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._module = pl_module
        super().setup(trainer, pl_module, stage)
        precision = str(trainer.precision)
        dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16 if precision.startswith("16") else torch.float32
        peak, source = peak_flops(trainer.strategy.root_device, dtype)
        self.available_flops = peak
        for throughput in self._throughputs.values():
            throughput.available_flops = peak
        rank_zero_info(f"MFU is measured against {peak / 1e12:.2f} TFLOP/s per device ({source})")

"""Callbacks the training adds: throughput and model FLOPs utilisation; the stop on non-finite weights
or a non-finite loss; the checkpoint on SIGTERM."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from zoo.train.flops import peak_flops


class Throughput(ThroughputMonitor):
    """Lightning's ``ThroughputMonitor`` for any zoo objective: logs samples/s, items/s
    (tokens, patches or frames) and MFU, the objective reporting ``flops_per_batch``
    (analytic, see zoo.nn.flops) and counting its batches with ``batch_counts``. The peak
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


def non_finite(tensors: Mapping[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors of ``tensors`` (a state dict) that hold a NaN or an inf."""
    return [name for name, w in tensors.items() if w.is_floating_point() and not bool(torch.isfinite(w).all())]


class StopOnNonFinite(L.Callback):
    """Refuses to start from non-finite weights, naming them (a ``model.init_from`` or a resumed
    checkpoint that holds a NaN would otherwise read as a diverging run); stops the run at the first
    non-finite training loss or monitored validation metric, naming the step and the last finite
    training loss; and refuses to save a checkpoint that holds a non-finite weight, so that neither
    ``last.ckpt`` nor the best checkpoint is ever overwritten by a diverged model (train.py adds it
    unless ``detect_nan=false``; Lightning runs ModelCheckpoint's hooks after this one's). Under DDP
    the ranks decide together, so that none is left waiting."""

    def __init__(self, init_from: str | None = None) -> None:
        self.init_from = init_from  # the run's model.init_from, named when its weights are not finite
        self.step = 0
        self.last: tuple[int, float] | None = None  # (step, loss) of the last finite training loss

    def _stop(self, what: str) -> FloatingPointError:
        last = f"the last finite loss was {self.last[1]:.6g} at step {self.last[0]}" if self.last else "no finite loss yet"
        return FloatingPointError(f"{what} ({last}); the run stops without saving a checkpoint from here on: "
                                  f"lower optim.lr, or pass detect_nan=false to train on regardless")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Here the weights are those the run starts from: built, read from model.init_from, or restored.
        bad = non_finite(dict(pl_module.named_parameters()))
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False):
            source = (f"ckpt_path={trainer.ckpt_path}" if trainer.ckpt_path else
                      f"model.init_from={self.init_from}" if self.init_from else "the initialisation")
            which = f"{len(bad)} tensor(s), e.g. {bad[0]}" if bad else "tensors on another process"
            raise FloatingPointError(f"the weights this run starts from ({source}) are not finite: NaN or inf in "
                                     f"{which}; start from other weights, or pass detect_nan=false to train on "
                                     f"regardless")

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self.step = trainer.global_step  # the step this batch's loss is logged at

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # The mean over the ranks (what train/loss logs): not finite when any rank's is, so all ranks stop.
        loss = (outputs["loss"] if isinstance(outputs, dict) else outputs).detach().clone().float()
        loss = float(trainer.strategy.reduce(loss, reduce_op="mean"))
        if not math.isfinite(loss):
            raise self._stop(f"the training loss is {loss} at step {self.step}")
        self.last = (self.step, loss)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The metrics the checkpoints are ranked by: a non-finite one must not be saved as last (or best).
        monitored = {cb.monitor for cb in trainer.checkpoint_callbacks if getattr(cb, "monitor", None)}
        metrics = trainer.callback_metrics
        bad = {k: float(metrics[k]) for k in monitored if k in metrics and not math.isfinite(float(metrics[k]))}
        if trainer.strategy.reduce_boolean_decision(bool(bad), all=False) and not trainer.sanity_checking:
            raise self._stop(f"{', '.join(f'{k}={v}' for k, v in bad.items()) or 'a monitored metric is not finite'} "
                             f"at step {self.step}")

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Lightning writes the file after this hook: raising here leaves the earlier checkpoints as they are.
        bad = non_finite(checkpoint["state_dict"])
        if bad:
            raise self._stop(f"{len(bad)} weight tensors (e.g. {bad[0]}) are not finite at step {self.step}")


class SaveOnSigterm(L.Callback):
    """On SIGTERM (what SLURM and Kubernetes send before killing) Lightning's loops stop with
    ``SIGTERMException`` after the batch in progress: save ``last.ckpt`` there, so that the run
    resumes from the step it reached (train.py then exits 143)."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and trainer.state.fn == "fit" and trainer.checkpoint_callback:
            trainer.save_checkpoint(Path(trainer.checkpoint_callback.dirpath) / "last.ckpt")

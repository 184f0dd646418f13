"""An equal budget for the runs of a comparison: stop a run once it has spent its training FLOPs
(the zoo's analytic count, the objective's ``flops_per_batch``, the one the MFU divides), its tokens
(items: real tokens, patches, frames), its samples, or its seconds of training steps.

The spending is the global batch's (summed over the ranks; seconds: the slowest rank's), logged as
``budget/*`` in metrics.csv at every logged step, and with each validation as ``val/flops_spent``,
``val/tokens_spent`` and ``val/seconds_spent`` (what a study's pictures put the val metric against).
It is the callback's state, saved in every checkpoint: a resumed run goes on spending from where
the killed one stopped. At the end, ``budget.json`` in the run directory holds what was spent,
the run's last validation (``final``: its step and val/* metrics, as the run recorded them, what a
study's report calls final) and the run's own peak memory (:func:`peak_memory_mb`).

A budget of FLOPs, tokens or samples also ends the learning-rate schedule where it ends: after each
step, ``trainer.max_steps`` (the cosine schedule's length, read at every step; the config's value is
a cap) becomes the step the budget will end at, at this step's cost. Runs whose steps cost
differently (a larger patch: fewer FLOPs a step, more steps) thus each decay over their own budget,
not over a length one config fixes for all. (The schedule reads it from the third step on: the
second step's rate is set before the first step's cost is known, inside any warm-up of 2 or more.)"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig

KINDS = ("flops", "tokens", "samples", "seconds")


class Budget(L.Callback):
    """Stops training at the step whose spending is nearest ``limit`` of ``kind`` (a step's cost is
    all or nothing: the run ends within half a step of the budget); counts every kind."""

    def __init__(self, kind: str, limit: float) -> None:
        if kind not in KINDS or not float(limit) > 0:
            raise ValueError(f"budget.{kind}={limit}: a budget is a positive amount of one of {', '.join(KINDS)}")
        self.kind, self.limit = kind, float(limit)
        self.spent = dict.fromkeys(KINDS, 0.0)
        self._started = 0.0
        self._cap = -1  # trainer.max_steps as configured
        self.final: dict[str, float] = {}  # the last validation: its step and val/* metrics
        self.peak: dict[str, float] = {}  # the peak memory of the run's earlier starts (a resumed run)
        self._device, self._reset = torch.device("cpu"), False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":  # the run's own peak from here on, not an earlier run's in this process (a sweep)
            self._device = trainer.strategy.root_device
            self._reset = reset_peak_memory(self._device)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._cap = trainer.max_steps

    @classmethod
    def from_config(cls, budget: DictConfig | dict | None) -> Budget | None:
        """The callback of a run's ``budget:`` settings (``budget.flops=1e15``; at most one set),
        None when none is set."""
        given = {k: v for k, v in (budget or {}).items() if v is not None}
        if len(given) > 1:
            raise ValueError(f"budget: {', '.join(f'{k}={v}' for k, v in given.items())}: a run has one budget; "
                             f"set one of {', '.join(KINDS)}")
        unknown = set(given) - set(KINDS)
        if unknown:
            raise ValueError(f"budget.{sorted(unknown)[0]}: no such budget; the kinds are {', '.join(KINDS)}")
        return cls(*next(iter(given.items()))) if given else None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        flops = pl_module.flops_per_batch
        if flops is None and self.kind == "flops":
            raise ValueError(f"budget.flops: {type(pl_module).__name__} counts no FLOPs (flops_per_batch); "
                             f"give the budget in tokens, samples or seconds")
        samples, items = pl_module.batch_counts(batch)
        step = torch.tensor([float(flops or 0), float(items), float(samples)], dtype=torch.float64,
                            device=pl_module.device)
        step = trainer.strategy.reduce(step, reduce_op="sum")
        seconds = trainer.strategy.reduce(torch.tensor(time.perf_counter() - self._started, dtype=torch.float64,
                                                       device=pl_module.device), reduce_op="max")
        cost = dict(zip(KINDS, [*step.tolist(), float(seconds)]))
        for kind in KINDS:
            self.spent[kind] += cost[kind]
        if self.spent[self.kind] + cost[self.kind] / 2 >= self.limit:
            trainer.should_stop = True  # (Lightning validates once more, and logs this step)
        if self.kind != "seconds" and cost[self.kind] > 0:  # the steps left at this step's cost, as the stop rounds
            end = trainer.global_step + math.ceil((self.limit - self.spent[self.kind]) / cost[self.kind] - 0.5)
            trainer.fit_loop.epoch_loop.max_steps = end if self._cap < 0 else min(end, self._cap)
        logged = {f"budget/{kind}": self.spent[kind] for kind in KINDS}
        pl_module.log_dict({**logged, "budget/used": self.spent[self.kind] / self.limit}, on_step=True, on_epoch=False)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            pl_module.log_dict({f"val/{kind}_spent": self.spent[kind] for kind in ("flops", "tokens", "seconds")})

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:  # (the epoch's metrics are in callback_metrics by now)
            self.final = {"step": trainer.global_step, **{k: float(v) for k, v in trainer.callback_metrics.items()
                                                          if k.startswith("val/")}}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_info(f"budget: spent {self.spent[self.kind]:.6g} of {self.limit:.6g} {self.kind} "
                       f"({self.spent[self.kind] / self.limit:.2%}) in {trainer.global_step} steps")
        if trainer.is_global_zero:
            summary = {"kind": self.kind, "limit": self.limit, "spent": self.spent, "steps": trainer.global_step,
                       "parameters": sum(p.numel() for p in pl_module.parameters()),
                       "peak_memory_mb": self._peak(), "final": self.final}
            Path(trainer.default_root_dir, "budget.json").write_text(json.dumps(summary, indent=1) + "\n")

    def _peak(self) -> dict[str, float]:
        """This start's peak memory, or an earlier start's where that was higher."""
        now = peak_memory_mb(self._device, self._reset)
        return {k: max(v, self.peak.get(k, 0.0)) for k, v in now.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"spent": dict(self.spent), "final": dict(self.final), "peak_memory_mb": self._peak()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.spent.update(state_dict["spent"])
        self.final = dict(state_dict.get("final", {}))
        self.peak = dict(state_dict.get("peak_memory_mb", {}))


def reset_peak_memory(device: torch.device) -> bool:
    """Start measuring a run's peak memory: on a GPU reset torch's peak statistics; on a CPU
    (Linux) give back the memory an earlier run of this process freed (``malloc_trim``) and reset
    the process's peak resident set (``/proc/self/clear_refs``) to what it holds now. Returns
    whether it could (not on a system without those)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    except (OSError, AttributeError):
        return False
    return True


def peak_memory_mb(device: torch.device, since_reset: bool = False) -> dict[str, float]:
    """The peak memory: on a GPU the tensors' (``max_memory_allocated``, since the last
    :func:`reset_peak_memory`); on a CPU, where ``since_reset`` (a reset that worked), the peak
    resident set since then (Linux's VmHWM: it includes what the process holds besides the run,
    Python, torch and the data), else ``cpu_rss_process``, the whole process's peak (``ru_maxrss``)."""
    if device.type == "cuda":
        return {"cuda_allocated": torch.cuda.max_memory_allocated(device) / 2**20}
    if since_reset:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return {"cpu_rss": int(line.split()[1]) / 2**10}  # KiB
    return {"cpu_rss_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10}

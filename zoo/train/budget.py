"""An equal budget for the runs of a comparison: stop a run once it has spent its training FLOPs
(the zoo's analytic count, the objective's ``flops_per_batch``, the one the MFU divides), its tokens
(items: real tokens, patches, frames), its samples, or its seconds of training steps.

The spending is the global batch's (summed over the ranks; seconds: the slowest rank's), logged as
``budget/*`` in metrics.csv at every logged step, and with each validation as ``val/flops_spent``,
``val/tokens_spent`` and ``val/seconds_spent`` (what a study's pictures put the val metric against).
It is the callback's state, saved in every checkpoint: a resumed run goes on spending from where
the killed one stopped. At the end, ``budget.json`` in the run directory holds what was spent.

A budget of FLOPs, tokens or samples also ends the learning-rate schedule where it ends: after each
step, ``trainer.max_steps`` (the cosine schedule's length, read at every step; the config's value is
a cap) becomes the step the budget will end at, at this step's cost. Runs whose steps cost
differently (a larger patch: fewer FLOPs a step, more steps) thus each decay over their own budget,
not over a length one config fixes for all. (The schedule reads it from the third step on: the
second step's rate is set before the first step's cost is known, inside any warm-up of 2 or more.)"""

from __future__ import annotations

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

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_info(f"budget: spent {self.spent[self.kind]:.6g} of {self.limit:.6g} {self.kind} "
                       f"({self.spent[self.kind] / self.limit:.2%}) in {trainer.global_step} steps")
        if trainer.is_global_zero:
            summary = {"kind": self.kind, "limit": self.limit, "spent": self.spent, "steps": trainer.global_step,
                       "parameters": sum(p.numel() for p in pl_module.parameters()),
                       "peak_memory_mb": peak_memory_mb(trainer.strategy.root_device)}
            Path(trainer.default_root_dir, "budget.json").write_text(json.dumps(summary, indent=1) + "\n")

    def state_dict(self) -> dict[str, Any]:
        return {"spent": dict(self.spent)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.spent.update(state_dict["spent"])


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """The peak memory this process has used: on a GPU the tensors' (``max_memory_allocated``),
    on a CPU the process's peak resident set (Linux reports it in KiB)."""
    if device.type == "cuda":
        return {"cuda_allocated": torch.cuda.max_memory_allocated(device) / 2**20}
    return {"cpu_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10}

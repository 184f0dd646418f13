"""A check that a run is on track: the validation milestones a recipe states, and one
warning in the log when a run falls behind them (so nobody waits out a failed run).

A milestone is (step, metric, bound): by ``step`` the metric is at least (accuracy,
BLEU) or at most (loss, WER) the bound. It is checked at the first validation at or
after its step, on the metrics Lightning holds then (``trainer.callback_metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

log = logging.getLogger(__name__)
BOUNDS = ("at_least", "at_most")


@dataclass(frozen=True)
class Milestone:
    step: int
    metric: str
    bound: str  # one of BOUNDS
    value: float

    def met(self, measured: float) -> bool:
        return measured >= self.value if self.bound == "at_least" else measured <= self.value

    def __str__(self) -> str:
        return f"{self.metric} {'>=' if self.bound == 'at_least' else '<='} {self.value:g} by step {self.step:,}"


def parse(milestones: Mapping) -> list[Milestone]:
    """``{step: {metric: bound}}`` -> milestones sorted by step. A bound is a number (at
    least) or ``{at_least: x}`` / ``{at_most: x}``, e.g.
    ``{6000: {"val/accuracy": 0.8}, 2000: {"val/loss": {"at_most": 1.5}}}``."""
    out = []
    for step, metrics in milestones.items():
        try:
            step = int(step)
        except (TypeError, ValueError):
            raise ValueError(f"milestone step {step!r} is not an integer") from None
        if step < 1:
            raise ValueError(f"milestone step {step} must be >= 1")
        if not isinstance(metrics, Mapping) or not metrics:
            raise ValueError(f"milestone at step {step} must map metric names to bounds, got {metrics!r}")
        for metric, spec in metrics.items():
            if isinstance(spec, Mapping):
                if len(spec) != 1 or next(iter(spec)) not in BOUNDS:
                    raise ValueError(f"milestone {metric!r} at step {step}: {dict(spec)!r} must be one of "
                                     f"{{at_least: x}} or {{at_most: x}}")
                bound, value = next(iter(spec.items()))
            else:
                bound, value = "at_least", spec
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"milestone {metric!r} at step {step}: bound {value!r} is not a number")
            out.append(Milestone(step, str(metric), bound, float(value)))
    return sorted(out, key=lambda m: m.step)


class RecipeMilestones(L.Callback):
    """Checks the milestones (see :func:`parse`) after each validation; the first one a run
    misses is logged as a warning, once: after that the run is known to be off track.
    A milestone whose metric is not logged fails with the names that are."""

    def __init__(self, milestones: Mapping | None = None):
        self.milestones = parse(milestones or {})
        self.pending = list(self.milestones)
        self.warned = False

    @rank_zero_only
    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.warned:
            return
        step = trainer.global_step
        due = [m for m in self.pending if m.step <= step]
        self.pending = [m for m in self.pending if m.step > step]
        for m in due:
            if m.metric not in trainer.callback_metrics:
                raise ValueError(f"recipe milestone {m} names a metric that is not logged; logged: "
                                 f"{sorted(trainer.callback_metrics)}")
            measured = float(trainer.callback_metrics[m.metric])
            if not m.met(measured):
                log.warning(f"this run is behind its recipe: {m.metric} = {measured:.4g} at step {step:,}, the recipe "
                            f"expects {m} (later milestones are not checked; a run this far behind usually "
                            f"misses the recipe's result)")
                self.warned = True
                return
            log.info(f"recipe milestone met: {m.metric} = {measured:.4g} at step {step:,} ({m})")

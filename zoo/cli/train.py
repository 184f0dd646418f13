"""``zoo train`` / ``python train.py``: compose conf/train.yaml, build data, model and Trainer, fit, test."""

from __future__ import annotations

import logging
import os
import warnings

import torch
from omegaconf import DictConfig, open_dict

from zoo.config import check_folders
from zoo.train import console
from zoo.train.run import optimized_metric, train

log = logging.getLogger(__name__)


def default_threads() -> int:
    """$OMP_NUM_THREADS when set, else the number of cores this process may run on."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() and int(given) > 0 else len(os.sched_getaffinity(0))


def set_threads(threads: int | None) -> int:
    """Run torch's CPU kernels on ``threads`` threads (None: :func:`default_threads`); returns the count.
    More threads than the cores this process may use only make them wait for each other: such a
    ``threads`` is lowered to the cores, with a warning."""
    count = default_threads() if threads is None else threads
    if count < 1:
        raise ValueError(f"threads={threads}: expected a positive number of CPU threads, or null for the default")
    cores = len(os.sched_getaffinity(0))
    if threads is not None and threads > cores:
        warnings.warn(f"threads={threads} is more than the {cores} cores this process may use: running on "
                      f"{cores} threads", stacklevel=2)
        count = cores
    torch.set_num_threads(count)
    log.info("threads=%d (of %d cores this process may use; set threads=N to change)", count, cores)
    return count


# quick=true: the validation batches, and how many validations a run makes.
QUICK_VAL_BATCHES = 10
QUICK_VALIDATIONS = 4


def schedule_evaluation(cfg: DictConfig) -> None:
    """Fit ``cfg``'s evaluation to its length: with ``quick``, :data:`QUICK_VALIDATIONS` validations
    on :data:`QUICK_VAL_BATCHES` batches and no test stage; always, for a validation interval longer
    than the run (a short run then never validates, keeps no best
    checkpoint, and its test silently reads the last weights), a warning naming the setting that
    fixes it. Edits ``cfg`` in place, so that the run's config.yaml holds what ran."""
    trainer = cfg.trainer
    batches = trainer.max_steps * trainer.accumulate_grad_batches  # val_check_interval counts batches
    with open_dict(cfg):
        if cfg.get("quick"):
            trainer.limit_val_batches = min(trainer.limit_val_batches or QUICK_VAL_BATCHES, QUICK_VAL_BATCHES)
            trainer.val_check_interval = max(1, batches // QUICK_VALIDATIONS)
            cfg.test = False
            log.info("quick=true: %d validations on %d batches, no test stage",
                     batches // trainer.val_check_interval, trainer.limit_val_batches)
        interval = trainer.val_check_interval
        if isinstance(interval, int) and interval > batches:
            # A warning, not a change: moving the validations would move the samples they draw, and
            # a run resumed to a longer max_steps must see the same steps as one that ran through.
            warnings.warn(f"trainer.val_check_interval={interval} is longer than the run ({batches} batches): it "
                          f"never validates, keeps no best checkpoint and tests its last weights; pass "
                          f"trainer.val_check_interval={batches} (or quick=true) to validate", stacklevel=2)


def main(cfg: DictConfig) -> float | None:
    check_folders(cfg.paths)  # a data or cache folder that is a file: refused before anything is written
    console.install(cfg.paths.output_dir)  # before the first warning: harmless ones filtered, all logged
    set_threads(cfg.get("threads"))
    schedule_evaluation(cfg)
    # A sweeper (hparams_search=...) reads the value this returns: the run's optimized_metric.
    return optimized_metric(cfg, train(cfg))

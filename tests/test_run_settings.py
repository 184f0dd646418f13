"""The run settings a newcomer reaches for first: threads, quick=true, a validation interval that
fits a short run."""

from __future__ import annotations

import os

import pytest
import torch

from zoo.cli.train import QUICK_VAL_BATCHES, default_threads, schedule_evaluation, set_threads
from zoo.convert.common import compose_config


def test_threads_default_to_omp_num_threads_else_the_cores_this_process_may_use(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert default_threads() == 1 and set_threads(None) == 1 and torch.get_num_threads() == 1
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert default_threads() == len(os.sched_getaffinity(0))
        with pytest.raises(ValueError, match="threads=0: expected a positive number"):
            set_threads(0)
    finally:
        torch.set_num_threads(before)


def test_a_validation_interval_longer_than_the_run_is_warned_naming_the_fix():
    cfg = compose_config(["model=gpt_neo", "trainer.max_steps=10", "trainer.accumulate_grad_batches=2"])
    interval = cfg.trainer.val_check_interval
    assert interval > 20
    with pytest.warns(UserWarning, match=r"longer than the run \(20 batches\).*trainer.val_check_interval=20"):
        schedule_evaluation(cfg)
    assert cfg.trainer.val_check_interval == interval and cfg.test  # unchanged: resumed runs see the same steps


def test_quick_validates_four_times_on_few_batches_and_skips_the_test():
    cfg = compose_config(["quick=true", "trainer.max_steps=40"])
    schedule_evaluation(cfg)
    assert cfg.trainer.val_check_interval == 10 and cfg.trainer.limit_val_batches == QUICK_VAL_BATCHES
    assert not cfg.test

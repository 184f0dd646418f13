"""An equal budget (``budget.flops=``, ``tokens``, ``samples``, ``seconds``): the run stops within
half a step of it (2% here), logs what it spent in metrics.csv and budget.json, and a run killed
half-way resumes with what it had spent (the callback's state is in the checkpoint)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from conftest import ROOT, TINY_GPT, run_train
from zoo.objectives.optim import warmup_cosine
from zoo.train.budget import Budget
from zoo.train.run import objective

TOKENS_PER_STEP = 4 * 32  # TINY_GPT: data.batch_size=4 windows of model.net.context=32 tokens


def rows(run):
    with (run / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def last(run, key: str) -> float:
    return [float(r[key]) for r in rows(run) if r.get(key)][-1]


def test_one_budget_of_a_known_kind_is_taken_and_more_are_refused():
    assert Budget.from_config({"flops": None, "tokens": None}) is None
    budget = Budget.from_config({"flops": None, "tokens": 1000})
    assert (budget.kind, budget.limit) == ("tokens", 1000.0)
    with pytest.raises(ValueError, match="a run has one budget"):
        Budget.from_config({"flops": 1e9, "tokens": 1000})
    with pytest.raises(ValueError, match="a positive amount"):
        Budget.from_config({"seconds": 0})


@pytest.mark.slow
def test_a_flops_budget_stops_the_run_within_2_percent_and_logs_it(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, *TINY_GPT, "trainer.max_steps=1000", "trainer.val_check_interval=1000",
              "budget.flops=1e9", "test=false")
    spent = json.loads((run / "budget.json").read_text())
    assert spent["kind"] == "flops" and abs(spent["spent"]["flops"] - 1e9) <= 0.02 * 1e9
    # The zoo's own count of one step (what the MFU divides), from the run's own config: steps x that.
    cfg = OmegaConf.load(run / "config.yaml")
    per_step = objective(cfg).net.training_flops(4, 32)
    assert spent["spent"]["flops"] == spent["steps"] * per_step and spent["steps"] < 1000
    assert abs(spent["steps"] * per_step - 1e9) <= per_step / 2  # the nearest step
    assert last(run, "budget/flops") == pytest.approx(spent["spent"]["flops"], rel=1e-6)
    assert last(run, "budget/tokens") == spent["steps"] * TOKENS_PER_STEP
    assert last(run, "val/flops_spent") == pytest.approx(spent["spent"]["flops"], rel=1e-6)  # a last validation
    # The cosine schedule ends where the budget does, not at trainer.max_steps=1000 (a cap): the rate at
    # each step from the third on (the second's is set before the first step's cost is known) is the
    # schedule's of that length, down to its floor at the last step.
    cfg_optim, steps = cfg.optim, spent["steps"]
    rates = {int(r["step"]): float(r["lr-AdamW/pg1"]) for r in rows(run) if r.get("lr-AdamW/pg1")}
    assert sorted(rates)[-1] == steps - 1 and len(rates) == steps
    for step, rate in rates.items():
        if step >= 2:
            expected = cfg_optim.lr * warmup_cosine(step, cfg_optim.warmup_steps, steps, cfg_optim.lr, cfg_optim.min_lr)
            assert rate == pytest.approx(expected, rel=1e-6), step


@pytest.mark.slow
def test_a_budget_run_killed_half_way_resumes_with_what_it_had_spent(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    common = [*TINY_GPT, "trainer.max_steps=100", "trainer.val_check_interval=100", "test=false",
              f"budget.tokens={TOKENS_PER_STEP * 30}"]
    env = dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir), ZOO_CACHE_DIR=str(tmp_path / "cache"))
    first = subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", *common,
                            "+callbacks.sigterm._target_=tests.sigterm_at.SigtermAt", "+callbacks.sigterm.step=12"],
                           env=env, cwd=ROOT, capture_output=True, timeout=300)
    assert first.returncode == 143, first.stderr[-2000:]
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert [s["spent"]["tokens"] for k, s in saved["callbacks"].items() if "Budget" in k] == [12 * TOKENS_PER_STEP]
    run_train(run, shakespeare_dir, *common, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    spent = json.loads((run / "budget.json").read_text())
    assert spent["steps"] == 30 and spent["spent"]["tokens"] == 30 * TOKENS_PER_STEP

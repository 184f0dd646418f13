"""The conventions users bring: each logger writes its files, an Optuna sweep runs trials and
reports the best, and callbacks=rich composes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, TINY_GPT, run_train

SHORT = [*TINY_GPT, "trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1",
         "test=false", "model.sample_tokens=0"]


def test_tensorboard_and_csv_together(tmp_path, shakespeare_dir):
    pytest.importorskip("tensorboard", reason="the loggers extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    run_train(run, shakespeare_dir, "logger=many", *SHORT)
    assert (run / "metrics.csv").exists() and (run / "curves.png").exists()  # curves still from the CSV
    events = EventAccumulator(str(run / "tensorboard")).Reload()
    tags = events.Tags()["scalars"]
    assert "train/loss" in tags and "val/loss" in tags
    assert {"train/samples", "train/lengths"} <= set(tags), tags  # the throughput monitor's counters
    assert len(events.Scalars("train/loss")) == 4
    # the resolved config is logged as hyperparameters (e.g. the model's width)
    hparams = yaml.safe_load((run / "tensorboard" / "hparams.yaml").read_text())
    assert hparams["model"]["net"]["block"]["d_model"] == 32


@pytest.mark.slow  # wandb's service process takes ~10 s to start
def test_wandb_offline(tmp_path, shakespeare_dir):
    pytest.importorskip("wandb", reason="the loggers extra is not installed")
    run = tmp_path / "run"
    os.environ["WANDB_MODE"] = "offline"
    try:
        run_train(run, shakespeare_dir, "logger=wandb", *SHORT)
    finally:
        del os.environ["WANDB_MODE"]
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    (record,) = runs[0].glob("run-*.wandb")  # what `wandb sync` uploads: metrics and config records
    data = record.read_bytes()
    assert b"train/loss" in data and b"val/loss" in data and b"d_model" in data


@pytest.mark.slow  # importing mlflow takes ~10 s
def test_mlflow_tracks_into_sqlite_in_the_run_directory(tmp_path, shakespeare_dir):
    pytest.importorskip("mlflow", reason="the loggers extra is not installed")
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, "logger=mlflow", *SHORT)
    with sqlite3.connect(run / "mlflow.db") as db:
        keys = {k for (k,) in db.execute("select distinct key from metrics")}
        steps = db.execute("select count(*) from metrics where key = 'train/loss'").fetchone()[0]
        params = dict(db.execute("select key, value from params"))
    assert {"train/loss", "val/loss"} <= keys and steps == 4
    assert params["model/net/block/d_model"] == "32"


def test_rich_callbacks_compose_and_train(tmp_path, shakespeare_dir):
    out = run_train(tmp_path / "run", shakespeare_dir, "callbacks=rich", *SHORT)
    assert "RichProgressBar" in (tmp_path / "run" / "config.yaml").read_text()
    assert out.returncode == 0
    # the model table is printed, without Lightning's FLOPs (it counts a forward on no input: 0)
    assert "Params" in out.stdout and "trainable" in out.stdout and "FLOPs" not in out.stdout + out.stderr


@pytest.mark.slow
def test_optuna_sweep_runs_trials_and_reports_the_best(tmp_path, shakespeare_dir):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="the sweep extra is not installed")
    env = dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir), ZOO_CACHE_DIR=str(tmp_path / "cache"))
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hparams_search=gpt_optuna", "hydra.sweeper.n_trials=2",
           f"hydra.sweep.dir={sweep}", *TINY_GPT, "trainer.max_steps=3", "trainer.val_check_interval=3",
           "model.sample_tokens=0", "data.batch_size=4"]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    trials = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in trials] == ["0", "1"]  # each trial in its own run directory
    assert all((p / "checkpoints" / "last.ckpt").exists() for p in trials)
    optims = [yaml.safe_load((p / "config.yaml").read_text())["optim"] for p in trials]
    assert optims[0]["lr"] != optims[1]["lr"]  # the sampler varied the parameters
    assert all(o["min_lr"] == pytest.approx(0.1 * o["lr"]) for o in optims)  # and min_lr follows lr
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert "optim.lr" in best["best_params"] and best["best_value"] > 0
    assert "Best parameters" in out.stdout + out.stderr

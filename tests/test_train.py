"""train.py end to end: configs compose, a short run, resuming, sampling, bad input."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import hydra
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, TINY_GPT, run_train

CONF = ROOT / "conf"


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("model", _options("model"))
def test_every_model_config_composes(model):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={model}"])
    assert cfg.model.net._target_ and hydra.utils.get_class(cfg.model._target_).accepts


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.parametrize("name", _options("data"))
def test_every_data_config_composes_to_a_data_module(name):
    from lightning import LightningDataModule

    cfg = _compose(f"data={name}")
    assert issubclass(hydra.utils.get_class(cfg.data._target_), LightningDataModule)


@pytest.mark.parametrize("name", _options("trainer"))
def test_every_trainer_config_names_only_trainer_arguments(name):
    """A misspelt Trainer argument would fail only when a run starts: every key is one of Trainer's."""
    import inspect

    import lightning

    cfg = _compose(f"trainer={name}")
    assert cfg.trainer._target_ == "lightning.Trainer"
    unknown = set(cfg.trainer) - {"_target_"} - set(inspect.signature(lightning.Trainer).parameters)
    assert not unknown, f"trainer={name} sets {sorted(unknown)}, which lightning.Trainer does not take"


@pytest.mark.parametrize("name", _options("experiment"))
def test_every_experiment_composes_with_the_choices_it_names(name):
    """An experiment's ``override /group: choice`` lines are what the composed run uses, and it names itself."""
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    overrides = dict(line.split("override /", 1)[1].split("#")[0].strip().split(": ")
                     for line in text.splitlines() if "- override /" in line)
    assert overrides, f"experiment={name} overrides no group"
    cfg = _compose(f"experiment={name}")
    choices = cfg.hydra.runtime.choices
    assert {group: choices[group] for group in overrides} == overrides
    assert cfg.task_name == name


def _losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def loss_steps(run_dir: Path) -> list[int]:
    """The steps of the training-loss rows of the run's metrics.csv, in the file's order (a step
    logged twice shows twice)."""
    with open(run_dir / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_short_run_writes_checkpoints_config_log_and_sample(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    out = run_train(run, shakespeare_dir, *TINY_GPT, "trainer.max_steps=6", "trainer.val_check_interval=3")
    assert (run / "checkpoints" / "last.ckpt").exists()
    assert list((run / "checkpoints").glob("best-*.ckpt"))
    assert (run / "config.yaml").exists() and (run / "metrics.csv").exists()
    assert (run / "samples.txt").read_text() and "--- sample ---" in out.stdout
    assert "test/loss" in out.stdout
    # generate.py samples from the checkpoint with the KV cache
    gen = subprocess.run([sys.executable, "generate.py", f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
                          "prompt=CITIZEN", "max_new_tokens=15"], cwd=ROOT, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    assert gen.stdout.startswith("CITIZEN") and len(gen.stdout.split("\n")[0]) >= len("CITIZEN") + 1


def test_resume_continues_at_the_same_step_with_the_same_losses(tmp_path, shakespeare_dir):
    common = [*TINY_GPT, "data.train_batches=40", "optim.decay_steps=12", "trainer.val_check_interval=4",
              "callbacks.model_checkpoint.save_top_k=-1", "test=false", "model.sample_tokens=0"]
    straight = tmp_path / "straight"
    run_train(straight, shakespeare_dir, *common, "trainer.max_steps=12")
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, *common, "trainer.max_steps=8")
    run_train(run, shakespeare_dir, *common, "trainer.max_steps=12", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    a, b = _losses(straight), _losses(run)
    # the log holds both segments, each step once (the resumed one continues at the step where it stopped)
    assert loss_steps(run) == list(range(12))
    for step in range(12):
        assert b[step] == pytest.approx(a[step], rel=1e-5), step


def test_missing_data_names_the_url_and_path(tmp_path):
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "nowhere"))
    out = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "tinyshakespeare/input.txt" in out.stderr and "https://" in out.stderr


def test_truncated_data_file_names_the_path(tmp_path, shakespeare_dir):
    out = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT,
                         env=dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir)), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert "input.txt has" in out.stderr and "expected 1115394" in out.stderr


def test_unknown_model_lists_the_choices(tmp_path):
    out = subprocess.run([sys.executable, "train.py", "model=nope"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0 and "gpt" in out.stderr and "nope" in out.stderr


def test_generate_with_a_missing_checkpoint_says_so(tmp_path):
    out = subprocess.run([sys.executable, "generate.py", f"ckpt={tmp_path / 'no.ckpt'}"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "no.ckpt does not exist" in out.stderr

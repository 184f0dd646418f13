"""Faults in training: a diverging run stops without saving non-finite weights; a run directory
that holds a run is never silently reused."""

import csv
import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TINY_GPT, run_train
from zoo.train.run_dir import claim

QUICK = [*TINY_GPT, "test=false", "model.sample_tokens=0"]
DIVERGE = ["optim.lr=1e3", "optim.warmup_steps=0", "trainer.val_check_interval=1", "trainer.max_steps=8"]


def _finite(path) -> bool:
    weights = torch.load(path, weights_only=True)["state_dict"].values()
    return all(bool(torch.isfinite(w).all()) for w in weights if w.is_floating_point())


def test_non_finite_loss_stops_the_run_and_saves_no_non_finite_weights(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    with pytest.raises(AssertionError) as failed:
        run_train(run, shakespeare_dir, *QUICK, *DIVERGE)
    message = str(failed.value)
    assert "loss=nan at step" in message, message[-2000:]  # one line, no traceback (HYDRA_FULL_ERROR=1 gives it)
    assert "detect_nan=false" in message
    saved = sorted((run / "checkpoints").glob("*.ckpt"))
    assert saved, "the steps before the divergence saved a checkpoint"
    assert all(_finite(p) for p in saved), saved
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    step = int(message.split("at step ")[1].split()[0].rstrip(":"))
    assert last["global_step"] <= step  # an earlier step's checkpoint, left as it was


@pytest.mark.slow
def test_detect_nan_false_trains_on(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, *QUICK, *DIVERGE, "detect_nan=false")  # all 8 steps, on NaN
    with open(run / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(losses) == 8 and math.isnan(losses[-1])


def _earlier_run(run):
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("earlier: run\n")
    (run / "metrics.csv").write_text("step,train/loss\n0,9.0\n")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"the earlier run's")


def test_a_second_run_into_a_run_directory_stops(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    _earlier_run(run)
    with pytest.raises(AssertionError, match=r"already holds a run \(config.yaml, metrics.csv, checkpoints\)"):
        run_train(run, shakespeare_dir, *QUICK, "trainer.max_steps=2", timeout=120)
    assert (run / "config.yaml").read_text() == "earlier: run\n"
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == b"the earlier run's"


def test_overwrite_removes_the_earlier_run_first(tmp_path, shakespeare_dir):
    run = tmp_path / "run"
    _earlier_run(run)
    run_train(run, shakespeare_dir, *QUICK, "trainer.max_steps=2", "trainer.val_check_interval=2", "overwrite=true")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best-step=2.ckpt", "last.ckpt"]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2
    assert "earlier" not in (run / "config.yaml").read_text()
    assert "9.0" not in (run / "metrics.csv").read_text()


def test_run_directory_check(tmp_path):
    run = tmp_path / "run"
    claim(run, None, overwrite=False, global_rank=0)  # nothing there yet
    _earlier_run(run)
    with pytest.raises(FileExistsError, match="pass overwrite=true"):
        claim(run, str(tmp_path / "other" / "checkpoints" / "last.ckpt"), overwrite=False, global_rank=0)
    claim(run, str(run / "checkpoints" / "last.ckpt"), overwrite=False, global_rank=0)  # resumes this run
    # the other ranks re-enter the directory rank 0 claimed, by design
    claim(run, None, overwrite=False, global_rank=1)
    (run / "tensorboard").mkdir()  # an earlier run's logger files go too
    (run / "mlflow.db").write_text("")
    claim(run, None, overwrite=True, global_rank=0)
    assert not any((run / name).exists() for name in ("checkpoints", "config.yaml", "tensorboard", "mlflow.db"))


def _in_process(run, data_dir, *overrides: str) -> list[str]:
    return [*QUICK, "trainer=cpu", f"paths.output_dir={run}", f"paths.data_dir={data_dir}",
            f"paths.cache_dir={run.parent / 'cache'}", "trainer.max_steps=2", *overrides]


def test_a_stray_slurm_procid_does_not_skip_the_run_directory_check(tmp_path, shakespeare_dir, monkeypatch):
    """Lightning runs this process as rank 0 (no SLURM job around it): the check must hold."""
    from zoo.cli.commands import call

    monkeypatch.setenv("SLURM_PROCID", "1")
    run = tmp_path / "run"
    _earlier_run(run)
    with pytest.raises(FileExistsError, match="already holds a run"):
        call("train", _in_process(run, shakespeare_dir))
    assert (run / "config.yaml").read_text() == "earlier: run\n"


def test_a_resume_from_an_unreadable_checkpoint_changes_nothing_of_the_run(tmp_path, shakespeare_dir):
    from zoo.cli.commands import call

    run = tmp_path / "run"
    _earlier_run(run)  # its last.ckpt is truncated (not a checkpoint)
    (run / "hparams.yaml").write_text("earlier: hparams\n")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(RuntimeError, match="not a checkpoint: .*last.ckpt"):
        call("train", _in_process(run, shakespeare_dir, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"))
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before


def test_a_run_directory_in_use_refuses_a_second_run_naming_the_first(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from zoo.train.run_dir import claim; "
         f"claim(Path({str(run)!r}), None, False, 0); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FileExistsError, match=rf"in use by a run still going \(PID {holder.pid} on "):
            claim(run, None, overwrite=True, global_rank=0)  # not even overwrite=true takes it
    finally:
        holder.kill()
        holder.wait()
    claim(run, None, overwrite=False, global_rank=0)  # free once that run has ended


def test_the_shuffled_order_follows_the_run_seed():
    """seed= is honoured by the data order too: a loader given no seed of its own shuffles by
    the run's (train.py seeds torch with it first), as cifar10, wikitext and speech do."""
    import lightning as L

    from zoo.data.base import ZooDataModule

    data = ZooDataModule("unused", "unused", batch_size=4)
    items = list(range(64))

    def first_batches(seed: int) -> list[list[int]]:
        L.seed_everything(seed)
        batches = iter(data.loader(items, shuffle=True, train=True))
        return [next(batches).tolist() for _ in range(3)]

    assert first_batches(1) == first_batches(1)
    assert first_batches(1) != first_batches(2)


@pytest.mark.slow
def test_a_diverging_sweep_trial_is_failed_and_the_sweep_goes_on(tmp_path, shakespeare_dir):
    """Trials 0-3 draw lr=1e3 (sampler seed 1234) and diverge; 4 and 5 train; the sweep ends with its results."""
    import os

    env = dict(os.environ, ZOO_DATA_DIR=str(shakespeare_dir), ZOO_CACHE_DIR=str(tmp_path / "cache"))
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hparams_search=gpt_optuna", f"hydra.sweep.dir={sweep}",
           "hydra.sweeper.n_trials=6", 'hydra.sweeper.params={optim.lr:"choice(1e-3,1e3)"}', "optim.warmup_steps=0",
           "trainer.max_steps=6", "trainer.val_check_interval=3", "data.check=false", "model.net.n_layers=1",
           "model.net.context=32", "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.batch_size=4",
           "data.val_batches=2", "model.sample_tokens=0"]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert log.count("Failed experiment: the training loss is nan") + log.count("Failed experiment: val/loss=nan") >= 1
    assert "best_value" in (sweep / "optimization_results.yaml").read_text()
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == [str(i) for i in range(6)]

"""Data parallel training: 2 CPU processes (gloo) match one process step for step."""

import csv


import pytest
import torch

from conftest import TINY_GPT, run_train

pytestmark = pytest.mark.slow  # several multi-process runs: in CI (make test-all), not in `make test`

COMMON = [*TINY_GPT, "trainer.max_steps=6", "trainer.val_check_interval=3", "data.batch_size=8",
          "model.sample_tokens=0", "test=false"]


def _losses(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def _weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


def test_two_cpu_processes_match_one(tmp_path, shakespeare_dir):
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    run_train(single, shakespeare_dir, *COMMON, "trainer=cpu")
    run_train(ddp, shakespeare_dir, *COMMON, "trainer=ddp_cpu", "trainer.devices=2")
    a, b = _losses(single), _losses(ddp)
    assert sorted(a) == sorted(b) and len(a) == 6
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step
    wa, wb = _weights(single), _weights(ddp)
    for name in wa:
        assert torch.allclose(wa[name], wb[name], rtol=1e-4, atol=1e-5), name
    # one run directory: no per-rank copies of logs, configs or checkpoints
    names = sorted(p.name for p in ddp.iterdir())
    assert not [n for n in names if "process_1" in n or "rank" in n], names
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == sorted(
        p.name for p in (single / "checkpoints").iterdir())


def test_ddp_run_resumes_from_its_checkpoint(tmp_path, shakespeare_dir):
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    run_train(first, shakespeare_dir, *COMMON, "trainer=ddp_cpu", "trainer.devices=2")
    run_train(resumed, shakespeare_dir, *COMMON, "trainer=ddp_cpu", "trainer.devices=2", "trainer.max_steps=9",
              "data.train_batches=9", f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}")
    assert min(_losses(resumed)) == 6 and max(_losses(resumed)) == 8


def test_global_batch_that_does_not_divide_fails_clearly(tmp_path, shakespeare_dir):
    with pytest.raises(AssertionError, match=r"data.batch_size=5 \(the global batch\) does not divide over 2"):
        run_train(tmp_path / "odd", shakespeare_dir, *COMMON, "trainer=ddp_cpu", "trainer.devices=2",
                  "data.batch_size=5")

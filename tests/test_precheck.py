"""A command line the config alone refuses is refused before torch loads and before Hydra makes
a run directory: one line, the closest known name ("did you mean ...?"), nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from zoo.cli.precheck import Refused, check, target_parameters


@pytest.mark.parametrize("command, arguments, said", [
    ("train", ["model=gtp"], "model=gtp: no such model (did you mean gpt?)"),
    ("train", ["data=tinyshakspeare"], "no such data (did you mean tinyshakespeare?)"),
    ("train", ["trainer.max_stpes=10"], "trainer.max_stpes: unknown key (did you mean trainer.max_steps?)"),
    ("train", ["+trainer.max_stpes=10"], "+trainer.max_stpes: unknown key (did you mean trainer.max_steps?)"),
    ("train", ["modle=gpt"], "modle: unknown key (did you mean model?)"),
    ("train", ["trainer.max_steps=0"], "trainer.max_steps=0: a run trains for a positive number"),
    ("generate", ["ckpt=x.ckpt", "+promt=hi"], "+promt: unknown key (did you mean prompt?)"),
])
def test_the_config_alone_refuses_with_the_closest_name(command, arguments, said):
    with pytest.raises(Refused) as refusal:
        check(command, command, arguments)
    assert said in str(refusal.value) and "\n" not in str(refusal.value)


def test_keys_the_code_reads_pass():
    check("train", "train", ["+trainer.limit_test_batches=2", "+trainer.enable_progress_bar=false",
                             "trainer.max_steps=3", "+callbacks.extra._target_=x.Y", "hydra.run.dir=/nonexistent/run"])


def test_a_targets_arguments_are_read_from_its_source_without_importing_it():
    assert {"max_steps", "val_check_interval", "limit_test_batches"} <= target_parameters("lightning.Trainer")


def test_the_checks_refuse_before_torch_loads():
    code = ("import sys\nfrom zoo.cli.precheck import Refused, check\n"
            "try:\n    check('train', 'train', ['+trainer.max_stpes=10'])\nexcept Refused:\n"
            "    print(sorted({'torch', 'lightning', 'transformers'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_run_directory_that_holds_a_run_is_refused_before_hydra_writes_to_it(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- the earlier run's overrides\n")
    out = subprocess.run([sys.executable, "train.py", f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "already holds a run" in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".hydra", "checkpoints", "overrides.yaml"]
    assert (tmp_path / ".hydra" / "overrides.yaml").read_text() == "- the earlier run's overrides\n"


@pytest.mark.slow
@pytest.mark.parametrize("arguments, said", [
    (["train", "model=gtp"], "did you mean gpt?"),
    (["train", "data=tinyshakspeare"], "did you mean tinyshakespeare?"),
    (["train", "+trainer.max_stpes=10"], "did you mean trainer.max_steps?"),
    (["train", "trainer.max_steps=0"], "trainer.max_steps=0"),
    (["genrate", "prompt=hi"], "did you mean generate?"),
    (["generate", "ckpt=x.ckpt", "+promt=hi"], "did you mean prompt?"),
])
def test_a_misspelling_is_refused_within_5_s_in_one_line_leaving_no_directory(tmp_path, arguments, said):
    run = tmp_path / "run"
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "zoo", *arguments, f"hydra.run.dir={run}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))
    took = time.monotonic() - started
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not run.exists() and not (tmp_path / "outputs").exists()
    assert took < 5, f"refused after {took:.1f} s"


@pytest.mark.slow
def test_a_refusal_from_the_zoos_code_is_one_line_and_the_traceback_comes_with_hydra_full_error(tmp_path):
    arguments = [sys.executable, "generate.py", f"ckpt={tmp_path / 'no.ckpt'}"]
    out = subprocess.run(arguments, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stderr.strip().startswith("error: ") and "Traceback" not in out.stderr
    assert "no.ckpt does not exist" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    full = subprocess.run(arguments, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HYDRA_FULL_ERROR="1"))
    assert "Traceback" in full.stderr and "no.ckpt does not exist" in full.stderr

"""Fixtures shared by the tests: tiny generated datasets in the official layouts and
a helper that runs train.py as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def write_shakespeare(data_dir: Path) -> Path:
    """Write a small generated tinyshakespeare/input.txt into ``data_dir``; returns ``data_dir``."""
    text = "".join(
        f"CITIZEN {i}:\nWe are accounted poor citizens, the patricians good.\n"
        f"What authority surfeits on would relieve us: number {i * 7 % 13}.\n\n"
        for i in range(300)
    )
    (data_dir / "tinyshakespeare").mkdir(parents=True)
    (data_dir / "tinyshakespeare" / "input.txt").write_text(text)
    return data_dir


@pytest.fixture
def shakespeare_dir(tmp_path: Path) -> Path:
    """A data dir holding a small generated tinyshakespeare/input.txt."""
    return write_shakespeare(tmp_path / "data")


def run_train(run_dir: Path, data_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python train.py`` in a subprocess, its run directory at ``run_dir``."""
    env = dict(os.environ, ZOO_DATA_DIR=str(data_dir), ZOO_CACHE_DIR=str(run_dir.parent / "cache"),
               PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
    return out


def assert_refused_in_one_line(arguments: list[str], named: list[str], run_dir: Path) -> None:
    """``python train.py *arguments`` is refused by the start-up check in one line naming each of ``named``."""
    from zoo.cli.precheck import Refused, check

    with pytest.raises(Refused) as refused:
        check("train", "train", [*arguments, f"hydra.run.dir={run_dir}"])
    message = str(refused.value)
    assert "\n" not in message and all(name in message for name in named), message


TINY_GPT = [
    "data.check=false", "model.net.n_layers=2", "model.net.context=32", "model.net.block.d_model=32",
    "model.net.block.n_heads=2", "data.batch_size=4", "data.val_batches=2", "trainer.log_every_n_steps=1",
    "model.sample_tokens=20", "optim.warmup_steps=2",
]

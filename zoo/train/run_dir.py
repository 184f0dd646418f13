"""One run per run directory: a second run into a directory that holds one stops, resumes it, or
(``overwrite=true``) first removes the earlier run's files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# What a run leaves in its directory (train.py, the logger, the objectives' end-of-run files).
# Hydra's own .hydra/ and train.log belong to the run that is starting and are kept.
RUN_FILES = ("config.yaml", "metrics.csv", "hparams.yaml", "curves.png", "samples.txt", "examples.txt",
             "confusion.png", "captions.txt", "mlflow.db")
# ... and the folders (checkpoints, and what logger=tensorboard / wandb / mlflow write).
RUN_DIRS = ("checkpoints", "tensorboard", "wandb", "mlflow-artifacts")
# The files whose presence means that the directory holds a run.
MARKERS = ("config.yaml", "metrics.csv", "checkpoints")


def launched_into_run() -> bool:
    """Whether this process is not global rank 0 of its run, from the variables the launchers set:
    torchrun sets RANK, SLURM's srun SLURM_PROCID; Lightning's DDP children get LOCAL_RANK >= 1 (and
    NODE_RANK on other nodes). Those processes re-enter the run directory rank 0 has claimed, by design."""
    for global_rank in ("RANK", "SLURM_PROCID"):
        if global_rank in os.environ:
            return int(os.environ[global_rank]) != 0
    return int(os.environ.get("LOCAL_RANK", 0)) != 0 or int(os.environ.get("NODE_RANK", 0)) != 0


def holds_other_run(out: Path, ckpt_path: str | None, overwrite: bool) -> bool:
    """Whether ``out`` holds an earlier run that this one is not resuming (writing nothing: the
    command line asks this before Hydra writes the run's .hydra/, so a refused run changes nothing).

    Raises:
        FileExistsError: it does, and ``overwrite`` is false.
    """
    found = [name for name in MARKERS if (out / name).exists()]
    if not found:
        return False
    if ckpt_path and Path(ckpt_path).resolve().parent == (out / "checkpoints").resolve():
        return False  # resuming this run in its own directory
    if not overwrite:
        raise FileExistsError(
            f"{out} already holds a run ({', '.join(found)}): pick a new hydra.run.dir, resume that run with "
            f"ckpt_path={out / 'checkpoints' / 'last.ckpt'}, or pass overwrite=true to delete its files first")
    return True


def claim(out: Path, ckpt_path: str | None, overwrite: bool) -> None:
    """Make ``out`` this run's directory, on global rank 0 before any other process starts.

    Raises:
        FileExistsError: ``out`` holds an earlier run, ``ckpt_path`` is not one of its
            checkpoints and ``overwrite`` is false.
    """
    if launched_into_run() or not holds_other_run(out, ckpt_path, overwrite):
        return
    for name in RUN_DIRS:
        shutil.rmtree(out / name, ignore_errors=True)
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)

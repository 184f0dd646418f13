"""One run per run directory: a second run into a directory that holds one stops, resumes it, or
(``overwrite=true``) first removes the earlier run's files; a run that is still going holds a lock
on its directory, so that a second one started beside it is refused whatever it asks."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
from pathlib import Path
from typing import IO

# What a run leaves in its directory (train.py, the logger, the objectives' end-of-run files).
# Hydra's own .hydra/ and train.log belong to the run that is starting and are kept.
RUN_FILES = ("config.yaml", "metrics.csv", "hparams.yaml", "curves.png", "samples.txt", "examples.txt",
             "confusion.png", "captions.txt", "mlflow.db")
# ... and the folders (checkpoints, and what logger=tensorboard / wandb / mlflow write).
RUN_DIRS = ("checkpoints", "tensorboard", "wandb", "mlflow-artifacts")
# The files whose presence means that the directory holds a run.
MARKERS = ("config.yaml", "metrics.csv", "checkpoints")
LOCK = ".lock"  # holds "PID@host" of the run that has the directory; locked while that run lives

_held: IO[str] | None = None  # this process's lock (one run at a time per process: a sweep's trials)


def lock(out: Path, setting: str = "hydra.run.dir") -> None:
    """Lock ``out`` for this process until it exits or locks another directory (``setting``: the
    key that chose ``out``, which the refusal names: zoo compare's is ``out=``).

    Raises:
        FileExistsError: another live process holds ``out``, named by its PID and host.
    """
    global _held
    if _held is not None:
        _held.close()  # the previous trial's directory (the lock goes with the file description)
        _held = None
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / LOCK, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise FileExistsError(f"{out} is in use by a run still going ({holder}): wait for it to end, or pick "
                              f"another {setting}") from None
    handle.truncate(0)
    handle.write(f"PID {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    _held = handle


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
        resume = resume_from(out / "checkpoints")
        raise FileExistsError(f"{out} already holds a run ({', '.join(found)}): pick a new hydra.run.dir, "
                              + (f"resume that run with ckpt_path={resume}, " if resume else "")
                              + "or pass overwrite=true to delete its files first")
    return True


def resume_from(checkpoints: Path) -> Path | None:
    """The checkpoint to resume the run whose checkpoints are in ``checkpoints`` from, one that is
    there: its ``last.ckpt``, else its newest (a full disk may have stopped it before any last.ckpt)."""
    if (checkpoints / "last.ckpt").is_file():
        return checkpoints / "last.ckpt"
    found = sorted(checkpoints.glob("*.ckpt"), key=lambda p: p.stat().st_mtime) if checkpoints.is_dir() else []
    return found[-1] if found else None


def resume_hint(checkpoints: Path) -> str:
    """"resume with ckpt_path=..." naming :func:`resume_from`'s file, or that there is none."""
    resume = resume_from(checkpoints)
    return f"resume with ckpt_path={resume}" if resume else f"start again (no checkpoint in {checkpoints} yet)"


def claim(out: Path, ckpt_path: str | None, overwrite: bool, global_rank: int) -> None:
    """Make ``out`` this run's directory, on global rank 0 (the trainer's strategy says which
    process that is: the other ranks re-enter the directory rank 0 has claimed, by design).

    Raises:
        FileExistsError: a live run holds ``out``; or ``out`` holds an earlier run, ``ckpt_path``
            is not one of its checkpoints and ``overwrite`` is false.
    """
    if global_rank != 0:
        return
    lock(out)
    if not holds_other_run(out, ckpt_path, overwrite):
        return
    for name in RUN_DIRS:
        shutil.rmtree(out / name, ignore_errors=True)
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)

"""How the training writes its checkpoints: whole or not at all, and a failure names the file."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from zoo.train.run_dir import resume_hint

CHUNK = 1 << 24  # bytes per write: a full disk stops the copy within one


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` as ``path`` whole or not at all: into a temporary file beside it (the same file
    system, so that the rename cannot turn into a copy that a full disk cuts short), forced to the
    disk, then renamed over ``path``. On any failure the temporary file is removed and ``path`` is as
    it was."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # (not *.ckpt: never taken for a checkpoint)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[:CHUNK]):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)  # the rename itself, on the disk
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class NamedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer (train.py gives it to the Trainer) writing a local file with
    :func:`write_whole`, whose failure to write (a full disk, a mount gone) names that file and the
    checkpoint to resume from: Lightning's says only "No space left on device", and its own atomic
    write moves a temporary file from another file system, a copy that a full disk truncates.
    A remote path (``s3://...``) is Lightning's to write."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(path, buffer.getbuffer())
        except OSError as err:
            raise OSError(err.errno, f"could not write the checkpoint {path}: {err.strerror or err}; the "
                                     f"checkpoints already in {path.parent} are unchanged: make room, then "
                                     f"{resume_hint(path.parent)}") from err

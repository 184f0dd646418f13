"""How the training writes its checkpoints: whole or not at all, and a failure names the file."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from zoo.files import write_whole
from zoo.train.run_dir import resume_hint


class NamedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer (train.py gives it to the Trainer) writing a local file with
    :func:`~zoo.files.write_whole`, whose failure to write (a full disk, a mount gone) names that file and the
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

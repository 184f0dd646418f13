"""How the training writes its checkpoints: Lightning's writer, whose failures name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


class NamedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer (train.py gives it to the Trainer), whose failure to write a
    file (a full disk, a mount gone) names that file: Lightning's says only "No space left on
    device". A checkpoint is written whole or not at all (Lightning writes a temporary file and
    moves it into place), so the checkpoints already there stay as they were."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        try:
            super().save_checkpoint(checkpoint, path, storage_options)
        except OSError as err:
            raise OSError(err.errno, f"could not write the checkpoint {path}: {err.strerror or err}; the "
                                     f"checkpoints already in {Path(path).parent} are unchanged: make room, then "
                                     f"resume from the last of them") from err

"""Files written whole or not at all (checkpoints, caches): a full disk or a kill mid-write leaves
the file that was there before, never a file cut short."""

from __future__ import annotations

import os
from pathlib import Path

CHUNK = 1 << 24  # bytes per write: a full disk stops the copy within one


def write_whole(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` as ``path`` whole or not at all: into a temporary file beside it (the same file
    system, so that the rename cannot turn into a copy that a full disk cuts short), forced to the
    disk, then renamed over ``path``. On any failure the temporary file is removed and ``path`` is as
    it was."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # (a name no glob for *.ckpt or *.json takes)
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

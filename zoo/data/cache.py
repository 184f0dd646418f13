"""The caches under ``paths.cache_dir`` (decoded images, trained tokenizers): each file is named by
what it was built from and holds a checksum of its name and its bytes, checked whenever it is read.
A file that fails the check (cut short by a full disk, edited, copied from another cache) is rebuilt,
and a warning names it.
Each is written whole (:func:`zoo.files.write_whole`)."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from zoo.files import write_whole

T = TypeVar("T")
HEADER = b"zoo cache, sha256 of its name and the bytes after this line: "


def _checksum(path: Path, payload: bytes) -> bytes:
    return hashlib.sha256(path.name.encode() + b"\n" + payload).hexdigest().encode()


def read(path: Path) -> bytes | None:
    """The bytes cached at ``path``; None where there are none, or where they fail their checksum
    (said in one warning naming the file, which is then rebuilt)."""
    if not path.is_file():
        return None
    header, _, payload = path.read_bytes().partition(b"\n")
    if header == HEADER + _checksum(path, payload):
        return payload
    warnings.warn(f"the cache {path} is damaged (it does not match its checksum: cut short, edited or copied): "
                  f"rebuilding it", stacklevel=3)
    return None


def write(path: Path, payload: bytes) -> None:
    """Cache ``payload`` at ``path``, with its checksum, whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, HEADER + _checksum(path, payload) + b"\n" + payload)


def cached(path: Path, build: Callable[[], T], dump: Callable[[T], bytes], load: Callable[[bytes], T]) -> T:
    """The value cached at ``path`` (``load`` of its bytes), or ``build()`` cached there (as ``dump``
    of it) where there is none or it is damaged."""
    payload = read(path)
    if payload is not None:
        return load(payload)
    value = build()
    write(path, dump(value))
    return value


def cached_tensors(path: Path, build: Callable[[], dict]) -> dict:
    """A dict of tensors cached at ``path`` (:func:`cached`; ``torch.load`` reads it back as weights only)."""
    import io

    import torch  # (here: the tokenizers' cache needs no torch)

    def dump(tensors: dict) -> bytes:
        buffer = io.BytesIO()
        torch.save(tensors, buffer)
        return buffer.getvalue()

    return cached(path, build, dump, lambda payload: torch.load(io.BytesIO(payload), weights_only=True))

"""Paths that an untrusted file names (``modules.json``, a sharded ``weight_map``, a symlink in a
folder), kept inside the folder it came with. Below every reader: it imports nothing of the zoo."""

from __future__ import annotations

from pathlib import Path


def inside(folder: str | Path, sub: object, where: str) -> Path:
    """``folder / sub`` resolved, refused unless it stays inside ``folder`` (an untrusted file names
    ``sub``: ``modules.json``, a ``weight_map``, a symlink). A Hub snapshot's files are links into its
    repository's ``blobs/`` (the layout ``huggingface_hub`` writes): those stay inside too."""
    if not isinstance(sub, str):
        raise ValueError(f"{where}: path={sub!r} is not a string")
    folder = Path(folder).resolve()
    path = (folder / sub).resolve()
    allowed = [folder] + ([folder.parent.parent / "blobs"] if folder.parent.name == "snapshots" else [])
    if not any(path.is_relative_to(root) for root in allowed):
        raise ValueError(f"{where}: path={sub!r} leads outside {folder} (to {path})")
    return path

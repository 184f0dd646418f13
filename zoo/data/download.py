"""Finding a dataset file, or downloading it where a user's machine is online."""

from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_file(path: Path, size: int | None = None, sha: str | None = None) -> None:
    """Fail, naming the file, when it does not have the expected size or hash."""
    if size is not None and path.stat().st_size != size:
        raise RuntimeError(
            f"{path} has {path.stat().st_size} bytes, expected {size}: the file is truncated or not the "
            f"official one. Delete it to download it again."
        )
    if sha is not None and sha256(path) != sha:
        raise RuntimeError(f"{path} does not have the expected SHA-256 {sha}: the file is corrupt or not the official one.")


def ensure_file(path: Path, url: str, size: int | None = None, sha: str | None = None) -> Path:
    """Return ``path``, downloading it from ``url`` first when it is missing.

    An existing file is only read (dataset folders may be read-only); a download
    goes to a temporary name and is renamed only once it is complete and checked.
    """
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        print(f"downloading {url} -> {path}")
        try:
            urllib.request.urlretrieve(url, partial)
        except Exception as err:
            partial.unlink(missing_ok=True)
            raise RuntimeError(
                f"could not download {url} ({err}). Without a network, put the file at {path} "
                f"(or point ZOO_DATA_DIR / paths.data_dir at a folder that holds it)."
            ) from err
        check_file(partial, size, sha)
        partial.rename(path)
    check_file(path, size, sha)
    return path

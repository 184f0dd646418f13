"""Finding a dataset file, or downloading it where a user's machine is online."""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from zoo.terminal import progress


@dataclass(frozen=True)
class Patience:
    """How long a download waits before it gives up.

    Args:
        connect: seconds to open the connection.
        read: seconds any one read (the reply's first byte included) may wait for data;
            a server that accepts and then says nothing fails after this.
        retries: further tries after a failed one.
        backoff: seconds before the first retry, doubled before each further one.
    """

    connect: float = 15.0
    read: float = 60.0
    retries: int = 2
    backoff: float = 1.0


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


def _reads_within(base: type[http.client.HTTPConnection], seconds: float) -> type[http.client.HTTPConnection]:
    """``base`` whose socket, once connected (under the request's connect timeout), waits
    at most ``seconds`` for each read."""

    class Connection(base):
        def connect(self) -> None:
            super().connect()
            self.sock.settimeout(seconds)

    return Connection


class _Handler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's http and https handlers (it then adds neither of its own), with read timeouts."""

    def __init__(self, read_timeout: float):
        super().__init__()
        self.read_timeout = read_timeout

    def http_open(self, req):
        return self.do_open(_reads_within(http.client.HTTPConnection, self.read_timeout), req)

    def https_open(self, req):
        return self.do_open(_reads_within(http.client.HTTPSConnection, self.read_timeout), req)


def copy_url(url: str, dest: Path, patience: Patience) -> None:
    """One try: write the body of ``url`` to ``dest``; fail when the connection stalls
    past the timeouts or ends before the length the server announced."""
    opener = urllib.request.build_opener(_Handler(patience.read))
    with opener.open(url, timeout=patience.connect) as response, open(dest, "wb") as out:
        announced = response.length  # Content-Length, None when the server sends none
        received = 0
        chunks = iter(lambda: response.read(1 << 20), b"")  # 1 MiB each (read(n) reads n unless the body ends)
        for chunk in progress(chunks, f"downloading {dest.name}", unit="MiB",
                              total=None if announced is None else -(-announced >> 20)):
            out.write(chunk)
            received += len(chunk)
    # http.client returns a short body without complaint when the connection closes early
    if announced is not None and received != announced:
        raise ConnectionError(f"the connection closed after {received} of {announced} bytes")


def ensure_file(path: Path, url: str, size: int | None = None, sha: str | None = None,
                patience: Patience = Patience()) -> Path:
    """Return ``path``, downloading it from ``url`` first when it is missing.

    An existing file is only read (dataset folders may be read-only); a download
    goes to a temporary name in the same folder and is renamed only once it is
    complete and checked, so a failed or interrupted one never leaves a file at
    ``path``. A failed try is retried (``patience``); the last failure names the URL
    and the folder to fill by hand.
    """
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"downloading {url} -> {path}")
        tries = 1 + patience.retries
        for attempt in range(tries):
            # a name of its own, so that two downloads of one file never write into each other
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
            os.close(fd)
            partial = Path(name)
            try:
                copy_url(url, partial, patience)
                check_file(partial, size, sha)
                partial.rename(path)
                break
            except Exception as err:
                partial.unlink(missing_ok=True)
                if attempt + 1 == tries:
                    raise RuntimeError(
                        f"could not download {url} ({tries} tries, the last: {type(err).__name__}: {err}). "
                        f"Without a network, put the file at {path}, i.e. fill the folder {path.parent} by hand "
                        f"(or point ZOO_DATA_DIR / paths.data_dir at a folder that holds it)."
                    ) from err
                print(f"download of {url} failed ({err}); trying again")
                time.sleep(patience.backoff * 2**attempt)
    check_file(path, size, sha)
    return path

"""Whether the output is a terminal, and a progress bar for a long loop that shows only there (a
dataset's decoding, a download, sampling): below everything that reads files or decodes, as the
training bars of :mod:`zoo.train.console` follow the same rule."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def on_terminal() -> bool:
    """Whether the output is a terminal (bars are drawn only there)."""
    return sys.stdout.isatty()


def progress(items: Iterable[T], description: str, total: int | None = None, unit: str = "it",
             scale: bool = False) -> Iterator[T]:
    """``items`` with a tqdm bar (as the training bars) on a terminal, as they are elsewhere
    (``scale``: the counts are bytes, shown as kB, MB, ...)."""
    from tqdm.auto import tqdm

    return iter(tqdm(items, desc=description, total=total, unit=unit, unit_scale=scale, disable=not on_terminal(),
                     leave=False, dynamic_ncols=True))

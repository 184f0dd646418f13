"""Checks of what a user hands the data modules (config values, text files), each
failing with a message that names the key or the file."""

from __future__ import annotations

from pathlib import Path


def positive_int(value: object, key: str) -> int:
    """``value`` when it is a whole number >= 1, else an error naming ``key`` and the value
    (a Hydra override such as ``data.batch_size=abc`` arrives as a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key}={value!r}: expected a whole number >= 1")
    return value


def held_out_fractions(val_fraction: float, test_fraction: float) -> dict[str, float]:
    """``data.val_fraction`` / ``data.test_fraction`` (the shares of a source held out for validation
    and test) by split; refused outside (0, 1), or when together they leave nothing to train on."""
    for key, fraction in (("data.val_fraction", val_fraction), ("data.test_fraction", test_fraction)):
        if not 0 < fraction < 1:
            raise ValueError(f"{key}={fraction}: expected a fraction between 0 and 1 (exclusive)")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"data.val_fraction={val_fraction} + data.test_fraction={test_fraction} leave "
                         f"nothing to train on: their sum must be below 1")
    return {"val": val_fraction, "test": test_fraction}


def utf8_text(data: bytes, path: Path) -> str:
    """``data`` (the bytes of ``path``) as UTF-8 text, or an error naming the file and
    where its first byte that is not UTF-8 sits."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{path} is not UTF-8 text: byte {err.start} (line {line}) is "
                         f"{data[err.start:err.start + 1]!r} ({err.reason})") from err

"""``data=audio``: your own recordings and their transcripts, for Whisper (log-mel features, text
targets) and wav2vec 2.0 / HuBERT (raw audio, CTC characters), from a manifest: a ``.csv`` /
``.tsv`` / ``.jsonl`` / ``.json`` / ``.parquet`` file of one row per utterance (its audio file's path
and its transcript), read through Hugging Face ``datasets``; or from an ``audiofolder`` (``datasets``'
layout: a folder of audio files and a ``metadata.csv`` / ``metadata.jsonl`` / ``metadata.parquet``
naming them in a ``file_name`` column).

Any sample rate and channel count: every file is read by :func:`zoo.data.audio.load_audio` (mixed
down to mono, resampled to 16 kHz); the rest (features, tokenizers, batches) is
:class:`~zoo.data.speech.SpeechDataModule`'s, as for every speech corpus.

The paths a manifest names are read relative to the manifest's folder, and must stay inside it: a
path that climbs out through ``..`` is refused, and so is an absolute path unless the run says
``data.absolute_paths=true`` (a manifest is data handed in; it does not pick which files of the
machine a run reads). Every row is checked before training, the audio files by their headers only;
nothing is written next to the data (``datasets``' Arrow files live under ``paths.cache_dir``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import soundfile

from zoo.data.audio import BadAudioError
from zoo.data.checks import held_out_fractions
from zoo.data.speech import Example, SpeechDataModule, file_example, random_split
from zoo.data.text import BINARY_ROWS, ROW_FORMATS, load_rows, locate, require_columns

log = logging.getLogger(__name__)

METADATA = ("metadata.csv", "metadata.jsonl", "metadata.parquet")  # an audiofolder's, as datasets reads it
PATH_COLUMNS = {"manifest": "path", "audiofolder": "file_name"}  # the default column of audio paths
ON_BAD = ("error", "skip")
SHOWN = 5  # bad files named in the line that counts the skipped ones


def manifest_of(source: str, key: str) -> tuple[Path, str]:
    """The manifest file ``source`` (config key ``key``) names, and its kind: the file itself, or an
    audiofolder's metadata file. Anything else is a one-line refusal naming ``source``."""
    path = Path(source).expanduser()
    if path.is_dir():
        found = [path / name for name in METADATA if (path / name).is_file()]
        if not found:
            raise ValueError(f"{key}={source} is a folder without a metadata file: an audiofolder holds one of "
                             f"{', '.join(METADATA)} (a file_name and a text column), or point {key} at a manifest")
        return found[0], "audiofolder"
    if not path.is_file():
        raise ValueError(f"{key}={source}: no such manifest file or audiofolder")
    if path.suffix.lower() not in ROW_FORMATS:
        raise ValueError(f"{key}={source}: expected a manifest ({', '.join(ROW_FORMATS)}) or an audiofolder")
    return path, "manifest"


def holds_no_rows(manifest: Path) -> bool:
    """Whether a text manifest holds no rows: nothing but blank lines, and a header for a CSV / TSV
    (``datasets`` refuses such a file without saying why)."""
    if manifest.suffix.lower() in BINARY_ROWS:
        return False
    lines = [line for line in manifest.read_bytes().splitlines() if line.strip()]
    return len(lines) <= (ROW_FORMATS[manifest.suffix.lower()][0] == "csv")


def audio_path(value: object, folder: Path, absolute_paths: bool, where: str) -> Path:
    """The audio file a manifest's row names: ``value`` read from the manifest's ``folder``. A path
    that leaves the folder through ``..``, or an absolute one without ``absolute_paths``, is refused;
    so is one that is not a readable file. Symbolic links inside the folder are followed."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: its audio path is {value!r}, not a file name")
    path = Path(value)
    if path.is_absolute():
        if not absolute_paths:
            raise ValueError(f"{where}: {value} is an absolute path; a manifest's paths are read from its folder "
                             f"{folder}: write them relative to it, or set data.absolute_paths=true")
    else:
        path = Path(os.path.normpath(folder / path))
        if not path.is_relative_to(folder):
            raise ValueError(f"{where}: {value} leaves the manifest's folder {folder}: paths must stay inside it "
                             f"(write an absolute path, with data.absolute_paths=true, for a file elsewhere)")
    if not path.is_file() or not os.access(path, os.R_OK):
        what = "is not a file" if path.exists() and not path.is_file() else "is not readable" if path.exists() \
            else "does not exist"
        raise ValueError(f"{where}: audio file {value} ({path}) {what}")
    return path


def check_header(path: Path) -> None:
    """Refuse (:class:`BadAudioError` naming it) a file whose header ``soundfile`` cannot read as
    audio, or that holds no samples: the check of every file before training, without decoding it
    (:func:`load_audio` reads the samples, and refuses what is wrong with them, as training reads it)."""
    try:
        frames = soundfile.info(str(path)).frames
    except Exception as err:  # soundfile raises several types (LibsndfileError, RuntimeError, ...)
        raise BadAudioError(f"cannot read audio file {path}: {err}") from err
    if frames == 0:
        raise BadAudioError(f"audio file {path} is empty (0 samples)")


class AudioManifest(SpeechDataModule):
    """Your recordings, as :class:`~zoo.data.batches.AudioText` (Whisper) or
    :class:`~zoo.data.batches.WaveText` (wav2vec 2.0, HuBERT) batches, whichever the model reads.

    Args (besides :class:`SpeechDataModule`'s):
        source: a manifest file or an audiofolder (module docstring); relative: from the working
            directory, else from ``data_dir``.
        path_column / text_column: the columns of audio paths and of transcripts; ``path_column``
            None: ``path`` in a manifest, ``file_name`` in an audiofolder's metadata.
        absolute_paths: read a manifest's absolute paths (else refused).
        val / test: manifests of the validation / test split; None: ``val_fraction`` /
            ``test_fraction`` of ``source``'s rows held out (at least one each), drawn by ``seed``.
        on_bad: ``error``: a file that cannot be read as audio stops the run, naming it; ``skip``:
            it is left out, the skipped files counted in one logged line (and a file whose samples
            turn out bad when training reads it is skipped with a warning).
        lowercase: lower-case the transcripts (off: your text as written, its whitespace collapsed).
    """

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, source: str | None = None,
                 path_column: str | None = None, text_column: str = "text", absolute_paths: bool = False,
                 val: str | None = None, test: str | None = None, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, seed: int = 1337, on_bad: str = "error", lowercase: bool = False,
                 **kwargs):
        if on_bad not in ON_BAD:
            raise ValueError(f"data.on_bad={on_bad!r}: expected one of {', '.join(ON_BAD)}")
        super().__init__(data_dir, cache_dir, batch_size, skip_bad_files=on_bad == "skip", lowercase=lowercase,
                         **kwargs)
        if not source:
            raise ValueError("data.source is not set: data=audio reads data.source=MANIFEST (.csv / .tsv / .jsonl "
                             "rows with a path and a text column) or an audiofolder (audio files and a metadata.csv)")
        held_out_fractions(val_fraction, test_fraction)
        self.sources = {split: locate(str(s), self.data_dir) if s else None
                        for split, s in (("train", source), ("val", val), ("test", test))}
        self.path_column, self.text_column, self.absolute_paths = path_column, text_column, absolute_paths
        self.fractions, self.seed = {"val": val_fraction, "test": test_fraction}, seed

    def read(self, split: str) -> list[Example]:
        """The examples of ``split``'s manifest: each row's audio file and normalised transcript, the
        rows checked in order (the first bad one refused naming the manifest and its record; a file
        that cannot be read as audio left out and counted under ``on_bad=skip``)."""
        key = "data.source" if split == "train" else f"data.{split}"
        manifest, kind = manifest_of(self.sources[split], key)
        path_column = self.path_column or PATH_COLUMNS[kind]
        if holds_no_rows(manifest):
            raise ValueError(f"{key}={self.sources[split]}: the manifest {manifest} holds no rows")
        rows = load_rows(manifest, self.cache_dir / "audio",  # every column as written: "007" stays a transcript
                         {"converters": {path_column: str, self.text_column: str}, "keep_default_na": False}
                         if ROW_FORMATS[manifest.suffix.lower()][0] == "csv" else None)
        require_columns(rows, {"data.path_column": path_column, "data.text_column": self.text_column}, manifest)
        folder = Path(os.path.normpath(manifest.parent.absolute()))
        examples, bad = [], []
        for record, (value, text) in enumerate(zip(rows[path_column], rows[self.text_column]), start=1):
            where = f"{manifest} record {record}"
            if not isinstance(text, str):
                raise ValueError(f"{where}: its transcript ({self.text_column!r}) is {text!r}, not text")
            if not self.normalise(text):
                raise ValueError(f"{where}: its transcript ({self.text_column!r}) is empty: give every row its "
                                 f"text, or leave the row out")
            path = audio_path(value, folder, self.absolute_paths, where)
            try:
                check_header(path)
            except BadAudioError as err:
                if not self.skip_bad_files:
                    raise BadAudioError(f"{where}: {err} (data.on_bad=skip leaves such files out)") from None
                bad.append(value)
                continue
            examples.append(file_example(path, self.normalise(text)))
        if bad:
            names = ", ".join(bad[:SHOWN]) + (", ..." if len(bad) > SHOWN else "")
            log.warning("%s: skipped %d of %d audio files that cannot be read (data.on_bad=skip): %s",
                        manifest, len(bad), len(rows), names)
        if not examples:
            raise ValueError(f"{key}={self.sources[split]}: the manifest {manifest} holds no rows" if not bad else
                             f"{key}={self.sources[split]}: no audio file of {manifest} can be read")
        return examples

    def make_splits(self) -> dict[str, Sequence[Example]]:
        given = {split: self.read(split) for split in ("val", "test") if self.sources[split]}
        fractions = {split: 0 if split in given else self.fractions[split] for split in ("val", "test")}
        examples = self.read("train")
        splits = random_split(examples, fractions["val"], fractions["test"], self.seed) | given
        if not splits["train"]:
            raise ValueError(f"data.source={self.sources['train']} holds {len(examples)} usable rows, too few to "
                             f"hold out {[s for s in fractions if fractions[s]]} and train: give more rows, or "
                             f"data.val= and data.test= manifests")
        return splits


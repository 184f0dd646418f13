"""Multi30k task 1 (image descriptions, German <-> English), for translation.

Files in the official repository's layout (github.com/multi30k/dataset,
``data/task1/raw``): ``${data_dir}/multi30k/raw/{train,val,test_2016_flickr}.{de,en}.gz``,
downloaded when missing. A joint BPE vocabulary over both languages is trained with
Hugging Face ``tokenizers`` on the training split and cached under ``cache_dir``.
Batches hold sentences of similar length (length buckets) so that padding stays small.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import warnings
import zlib
from pathlib import Path

import torch
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import IGNORE, SequencePairs
from zoo.data.checks import utf8_text
from zoo.data.download import ensure_file
from zoo.data.tokenizers import TEXT_END, TEXT_PAD, TEXT_START, HFTokenizer, first_token, present_ids, train_bpe

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # pad, start, end, unknown (the BPE trained here)


def read_lines(path: Path) -> list[str]:
    """The lines of a gzipped UTF-8 text file; a truncated or corrupt archive, bytes that
    are not UTF-8 and an empty line are errors naming the file."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(f"{path} is not a complete gzip file ({err}): delete it to download it again "
                         f"({URL.format(name=path.name)})") from err
    # universal newlines, as text-mode reading has them
    lines = [line.rstrip("\n") for line in io.StringIO(utf8_text(data, path), newline=None)]
    empty = [i + 1 for i, line in enumerate(lines) if not line.strip()]
    if empty:
        raise ValueError(f"{path}: {len(empty)} empty line(s), first at line {empty[0]} of {len(lines)}")
    return lines


def read_parallel(source: Path, target: Path) -> tuple[list[str], list[str]]:
    """Aligned source/target lines; the two files must have the same number of lines."""
    src, tgt = read_lines(source), read_lines(target)
    if len(src) != len(tgt):
        raise ValueError(f"{source} has {len(src)} lines but {target} has {len(tgt)}: the files are not aligned")
    return src, tgt


class Pairs(Dataset):
    """Tokenized (source, target) pairs with their raw target text."""

    def __init__(self, source: list[list[int]], target: list[list[int]], references: list[str]):
        self.source, self.target, self.references = source, target, references

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> tuple[list[int], list[int], str]:
        return self.source[i], self.target[i], self.references[i]


def truncate(rows: list[list[int]], limit: int, what: str, setting: str) -> list[list[int]]:
    """``rows`` cut to ``limit`` ids, with a warning counting those cut (``what`` they are, the
    ``setting`` that sets the limit)."""
    long = sum(len(r) > limit for r in rows)
    if long:
        warnings.warn(f"{long} {what} longer than {limit} tokens were truncated ({setting})", stacklevel=3)
    return [r[:limit] for r in rows]


def encode_pairs(tokenizer, sources: list[str], targets: list[str], prefix: str, max_len: int, what: str,
                 setting: str) -> Pairs:
    """Source and target texts as :class:`Pairs`: the sources (after ``prefix``) cut to ``max_len``
    ids, the targets to ``max_len - 1`` (their start / end token makes ``max_len``), with a warning
    naming ``what`` was cut and the ``setting`` of the limit."""
    source = truncate(tokenizer.encode_batch([prefix + s for s in sources]), max_len, f"{what} source(s)", setting)
    target = truncate(tokenizer.encode_batch(targets), max_len - 1, f"{what} target(s)", setting)
    return Pairs(source, target, targets)


def pair_ids(tokenizer, source: str | None) -> tuple[int, int, int]:
    """The (pad, start, end) ids of ``tokenizer``, found by role (none is refused naming ``source``,
    where it came from); without a start token the decoder starts from the pad token, as T5's does."""
    pad, eos = (tokenizer.token_id(first_token(tokenizer, names, role, source))
                for names, role in ((TEXT_PAD, "padding"), (TEXT_END, "end-of-sequence")))
    return pad, next(iter(present_ids(tokenizer, TEXT_START).values()), pad), eos


class LengthBuckets(Dataset):
    """Item i is batch i: indices of ``batch_size`` pairs of similar length.

    Pairs are shuffled (seeded), cut into pools of ``pool`` batches, sorted by length
    inside each pool and cut into batches; the loader shuffles the batch order.
    """

    def __init__(self, pairs: Pairs, batch_size: int, seed: int, shuffle: bool, pool: int = 50):
        order = list(range(len(pairs)))
        if shuffle:
            random.Random(seed).shuffle(order)
        batches = []
        for start in range(0, len(order), batch_size * pool):
            chunk = sorted(order[start : start + batch_size * pool],
                           key=lambda i: (len(pairs.source[i]), len(pairs.target[i])))
            batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
        self.pairs, self.batches = pairs, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> list[tuple[list[int], list[int], str]]:
        return [self.pairs[j] for j in self.batches[i]]


def collate(items: list[tuple[list[int], list[int], str]], pad: int, bos: int, eos: int) -> SequencePairs:
    """Pad a batch of (source ids, target ids, target text) into :class:`SequencePairs`."""
    b = len(items)
    s, t = max(len(x[0]) for x in items), max(len(x[1]) for x in items) + 1
    source = torch.full((b, s), pad, dtype=torch.long)
    target_in = torch.full((b, t), pad, dtype=torch.long)
    target_out = torch.full((b, t), IGNORE, dtype=torch.long)
    for i, (src, tgt, _) in enumerate(items):
        source[i, : len(src)] = torch.tensor(src)
        target_in[i, : len(tgt) + 1] = torch.tensor([bos, *tgt])
        target_out[i, : len(tgt) + 1] = torch.tensor([*tgt, eos])
    return SequencePairs(source, source != pad, target_in, target_out, [x[2] for x in items])


class Collate:
    """Picklable collate function (for worker processes)."""

    def __init__(self, pad: int, bos: int, eos: int):
        self.pad, self.bos, self.eos = pad, bos, eos

    def __call__(self, items):
        return collate(items, self.pad, self.bos, self.eos)


class Multi30k(ZooDataModule):
    """Multi30k task 1 translation, ``src`` -> ``tgt`` (German -> English by default).

    Args:
        src, tgt: languages (``de``, ``en``).
        vocab_size: size of the joint BPE vocabulary.
        max_len: longest source and target (in tokens, the target with its start/end
            token); longer sentences are truncated, with a warning.
        prefix: text put before every source sentence (T5's task prefix, e.g.
            "translate German to English: ").
        test_split: the official test set used by ``test``.
        tokenizer_from: the checkpoint a run fine-tunes (its tokenizer instead of a new BPE).
    """

    yields = (SequencePairs,)
    batched = False  # each item of LengthBuckets is one rank's batch; under DDP the ranks take turns

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, src: str = "de", tgt: str = "en",
                 vocab_size: int = 8000, max_len: int = 256, prefix: str = "", test_split: str = "test_2016_flickr",
                 seed: int = 1337, tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if {src, tgt} != {"de", "en"}:
            raise ValueError(f"Multi30k task 1 has de and en; got src={src!r}, tgt={tgt!r}")
        self.src, self.tgt, self.vocab_size, self.max_len = src, tgt, vocab_size, max_len
        self.prefix, self.seed, self.order_seed = prefix, seed, seed
        self.files = {split: name for split, name in SPLITS.items()}
        self.files["test"] = test_split
        self.root = self.data_dir / "multi30k" / "raw"
        self.pairs: dict[str, Pairs] = {}

    def path(self, split: str, lang: str) -> Path:
        return self.root / f"{self.files[split]}.{lang}.gz"

    def prepare_data(self) -> None:
        for split in self.files:
            for lang in ("de", "en"):
                path = self.path(split, lang)
                ensure_file(path, URL.format(name=path.name))

    def _bpe(self) -> HFTokenizer:
        """A joint BPE trained on both languages of the training split, cached."""
        files = [self.path("train", lang) for lang in ("de", "en")]
        digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
        cache = self.cache_dir / "multi30k" / f"bpe{self.vocab_size}-{digest}.json"
        texts = [line for f in files for line in read_lines(f)]
        return train_bpe(texts, self.vocab_size, cache, SPECIALS)

    def setup(self, stage: str | None = None) -> None:
        if self.pairs:
            return
        for split in self.files:
            for lang in ("de", "en"):
                if not self.path(split, lang).exists():
                    raise FileNotFoundError(f"{self.path(split, lang)} is missing: run prepare_data() or put the "
                                            f"official file ({URL.format(name=self.path(split, lang).name)}) there")
        self.tokenizer = self.tokenizer_or(self._bpe)
        for split in self.files:
            src, tgt = read_parallel(self.path(split, self.src), self.path(split, self.tgt))
            self.pairs[split] = encode_pairs(self.tokenizer, src, tgt, self.prefix, self.max_len,
                                             f"Multi30k {split}", f"data.max_len={self.max_len}")
        pad, bos, eos = pair_ids(self.tokenizer, self.tokenizer_from)
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "pad_id": pad, "bos_id": bos, "eos_id": eos}

    def dataset(self, split: str) -> LengthBuckets:
        return LengthBuckets(self.pairs[split], self.rank_batch_size, self.seed, shuffle=split == "train")

    def collate_fn(self) -> Collate:
        return Collate(self.dims["pad_id"], self.dims["bos_id"], self.dims["eos_id"])

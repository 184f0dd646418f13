"""``data=text``: your own text: a file, a folder (recursively) or a glob of plain text (``.txt``,
``.md``, source code: each file one document), or the rows of ``.jsonl`` / ``.json`` / ``.csv`` /
``.tsv`` / ``.parquet`` files or of a ``datasets.save_to_disk`` folder (each row's ``data.column``
one document), read through Hugging Face ``datasets``.

Documents are kept apart: the token stream is ``<eod> doc <eod> doc <eod> ...`` (``<eod>``: the
tokenizer's end-of-document token), and with ``data.pack=false`` no window holds two documents.
Validation and test always read whole documents, window by window, each token predicted once, so
that their loss over a split is the split's (and bits per byte are defined: :class:`DocumentWindows`).

Nothing is written next to the data: ``datasets``' Arrow files and the trained tokenizers live
under ``paths.cache_dir``. ``data.streaming=true`` reads the source as a stream instead
(``hf:NAME[@config]`` on the Hub, or local files: :mod:`zoo.data.streaming`).
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, Callable

import torch
from lightning.pytorch.utilities import rank_zero_info
from tokenizers import Tokenizer
from torch import Tensor
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from zoo.data.base import ZooDataModule
from zoo.data.batches import IGNORE, PaddedTokens, TokenWindows
from zoo.data.checks import held_out_fractions, utf8_text
from zoo.data.streaming import StreamedWindows
from zoo.data.tokenizers import CharTokenizer, HFTokenizer, first_token, present_ids, train_bpe
from zoo.data.wikitext import END_OF_TEXT, PackedSequences, pack as cut_documents
from zoo.data.windows import StreamWindows, Unpadded
from zoo.terminal import on_terminal


# Files read as rows, by suffix: the ``datasets`` builder and its options.
ROW_FORMATS: dict[str, tuple[str, dict]] = {
    ".jsonl": ("json", {}), ".json": ("json", {}), ".csv": ("csv", {}), ".tsv": ("csv", {"delimiter": "\t"}),
    ".parquet": ("parquet", {}),
}
BINARY_ROWS = {".parquet"}  # (no UTF-8 check of the file's bytes: Arrow checks its strings)
TRAINED = ("char", "bpe", "wordpiece")  # data.tokenizer values that learn a vocabulary here
# The tokens a tokenizer trained here holds (first ids), by batch type: a language model's end of
# document; a masked LM's padding, mask and separator (BERT's names). END_OF_TEXT finds the end of
# document (its first entry, [SEP], is the masked LM's), PAD and MASK the others, in any tokenizer.
ROLE_TOKENS = {TokenWindows: ("<|endoftext|>",), PaddedTokens: ("[PAD]", "[MASK]", "[SEP]")}
PAD, MASK = ("[PAD]", "<pad>"), ("[MASK]", "<mask>")
UNKNOWN = ("[UNK]", "<unk>")  # never masked either, where the tokenizer has one
SPLITS = ("train", "val", "test")


# --- reading ----------------------------------------------------------------------------------

def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder ``datasets.Dataset.save_to_disk`` wrote."""
    return path.is_dir() and (path / "state.json").is_file() and (path / "dataset_info.json").is_file()


def locate(source: str, data_dir: Path) -> str:
    """``source`` as given where it names something from the working directory (or is absolute),
    else under ``data_dir`` (``paths.data_dir``) where it names something there."""
    path = Path(source).expanduser()
    if path.is_absolute() or path.exists() or glob.glob(str(path), recursive=True):
        return source
    under = data_dir / path
    return str(under) if under.exists() or glob.glob(str(under), recursive=True) else source


def source_files(source: str, key: str) -> list[Path]:
    """The files of ``source`` (the value of config key ``key``): a file, every file under a folder
    (hidden ones left out), or a glob's matches; sorted. None is a one-line refusal naming ``source``."""
    path = Path(source).expanduser()
    if any(c in source for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise ValueError(f"{key}={source} matches no file")
        return files
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ValueError(f"{key}={source}: no such file or folder")
    files = sorted(p for p in path.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    if not files:
        raise ValueError(f"{key}={source} is an empty folder: it holds no file to read")
    return files


def read_documents(source: str, key: str, column: str, cache_dir: Path) -> list[str]:
    """The documents of ``source`` in memory (:func:`iter_documents`)."""
    return list(iter_documents(source, key, column, cache_dir))


def iter_documents(source: str, key: str, column: str, cache_dir: Path) -> Iterator[str]:
    """The documents of ``source``, one at a time (a corpus is never held whole): each plain text
    file's text, or each row's ``column``. The files must be of one kind (plain text, or rows of one
    format); empty documents are left out, and a source that leaves none is refused."""
    path = Path(source).expanduser()
    if is_saved_dataset(path):
        from datasets import load_from_disk

        documents = column_texts(load_from_disk(str(path)), column, path)
    else:
        files = one_kind(source_files(source, key), source, key)
        documents = (doc for f in files for doc in file_documents(f, column, cache_dir))
    any_text = False
    for doc in documents:
        if doc:
            any_text = True
            yield doc
    if not any_text:
        raise ValueError(f"{key}={source} holds no text: every document in it is empty")


def one_kind(files: list[Path], source: str, key: str) -> list[Path]:
    """``files``, checked to be of one kind (plain text, or rows of one format), else refused naming them."""
    kinds = {ROW_FORMATS.get(f.suffix.lower(), ("text", {}))[0]: f for f in files}
    if len(kinds) > 1:
        examples = ", ".join(f"{f.name} ({kind})" for kind, f in kinds.items())
        raise ValueError(f"{key}={source} holds files of {len(kinds)} kinds ({examples}): point it at one "
                         f"kind, e.g. a glob such as {Path(source).expanduser() / '**' / '*.jsonl'}")
    return files


class Documents:
    """The documents of a source as an iterable that reads the source again at each pass (so that
    a tokenizer can learn from, and ``zoo prepare`` write, a corpus larger than memory): those at the
    places (0-based, in the whole source) of ``keep`` (None: all) and not of ``leave_out``."""

    def __init__(self, source: str, key: str, column: str, cache_dir: Path, keep: set[int] | None = None,
                 leave_out: set[int] | None = None):
        self.source, self.key, self.column, self.cache_dir = source, key, column, cache_dir
        self.keep, self.leave_out = keep, leave_out or set()

    def __iter__(self) -> Iterator[str]:
        for i, doc in enumerate(iter_documents(self.source, self.key, self.column, self.cache_dir)):
            if (self.keep is None or i in self.keep) and i not in self.leave_out:
                yield doc

    def count(self) -> int:
        """How many documents one pass yields (a pass of its own: read, not kept)."""
        return sum(1 for _ in self)

    def picked(self, keep: set[int] | None = None, leave_out: set[int] | None = None) -> "Documents":
        """These documents (places in the whole source) alone."""
        return Documents(self.source, self.key, self.column, self.cache_dir, keep, leave_out)


def file_documents(path: Path, column: str, cache_dir: Path) -> Iterable[str]:
    """The documents of one file: its text (plain text), or its rows' ``column``."""
    if path.suffix.lower() not in ROW_FORMATS:
        return [utf8_text(path.read_bytes(), path)]
    return column_texts(load_rows(path, cache_dir), column, path)


def load_rows(path: Path, cache_dir: Path, options: dict[str, Any] | None = None):
    """The rows of a rows file (a suffix of :data:`ROW_FORMATS`) through ``datasets``, its cache under
    ``cache_dir``, with the builder's ``options`` besides the format's own (a CSV's quoting): a text
    file is checked as UTF-8 first (refused with its line, not deep inside a reader), and what
    ``datasets`` cannot read is refused in one line naming the file."""
    import datasets

    suffix = path.suffix.lower()
    builder, own = ROW_FORMATS[suffix]
    if suffix not in BINARY_ROWS:
        utf8_text(path.read_bytes(), path)
    if not on_terminal():
        datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(builder, data_files=str(path), split="train",
                                     cache_dir=str(cache_dir / "datasets"), **own, **(options or {}))
    except Exception as err:  # datasets' errors are long and name the builder, not always the file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{path} could not be read as {suffix[1:]} rows: {reason}") from None


def require_columns(rows, columns: dict[str, str], where: Path) -> None:
    """Refuse rows that lack one of ``columns`` (config key -> column name), listing those there."""
    for key, column in columns.items():
        if column not in rows.column_names:
            raise ValueError(f"{where} has no column {column!r} ({key}={column}): its columns are "
                             f"{rows.column_names}")


def column_texts(rows, column: str, where: Path, batch: int = 1000) -> Iterator[str]:
    """``rows[column]``, read ``batch`` rows at a time (an Arrow table is memory-mapped, not held): a
    missing column is refused listing those there, a record that is not text naming its number
    (1-based, the line of a JSONL file)."""
    require_columns(rows, {"data.column": column}, where)
    for start in range(0, len(rows), batch):
        for i, text in enumerate(rows[start : start + batch][column], start):
            if not isinstance(text, str):
                raise ValueError(f"{where} record {i + 1}: its {column!r} is {text!r}, not text "
                                 f"(data.column names the column of text)")
            yield text


HUB = "hf:"
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}  # an hf: source's split for each of ours


def stream_rows(source: str, split: str, key: str, column: str, cache_dir: Path):
    """(``source``'s rows as a ``datasets.IterableDataset``, the column of text): an ``hf:NAME[@config]``
    source's ``split`` (:data:`HUB_SPLITS`), or the rows of local files (plain text: each file one row)."""
    import datasets

    if source.startswith(HUB):
        name, _, config = source[len(HUB):].partition("@")
        if not name:
            raise ValueError(f"{key}={source}: expected hf:NAME or hf:NAME@CONFIG (a Hugging Face Hub dataset)")
        try:
            return datasets.load_dataset(name, config or None, split=HUB_SPLITS[split], streaming=True), column
        except Exception as err:  # offline, a wrong name or config: datasets' errors are long
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"{key}={source} could not be streamed from the Hugging Face Hub: {reason}") from None
    if is_saved_dataset(Path(source).expanduser()):
        raise ValueError(f"{key}={source} is a save_to_disk folder, read from disk as it is: set data.streaming=false")
    files = one_kind(source_files(source, key), source, key)
    builder, options = ROW_FORMATS.get(files[0].suffix.lower(), ("text", {"sample_by": "document"}))
    rows = datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", streaming=True,
                                 cache_dir=str(cache_dir / "datasets"), **options)
    return rows, column if builder != "text" else "text"


def cache_name(name: str, salt: str, texts: Iterable[str]) -> str:
    """``name-HASH.json``, the file a tokenizer trained on ``texts`` is cached in: the hash holds
    everything the vocabulary depends on (``name``, ``salt``, the texts), so an edited file is a new one."""
    digest = hashlib.sha256(f"{name}{salt}".encode())
    for text in texts:
        digest.update(len(text).to_bytes(8, "little") + text.encode())
    return f"{name}-{digest.hexdigest()[:16]}.json"


# --- splits -----------------------------------------------------------------------------------

def held_out(n: int, fractions: dict[str, float], seed: int) -> dict[str, list[int]] | None:
    """The places (0-based, sorted) of the documents each held-out split of ``fractions`` takes of
    ``n``: that fraction (at least one), drawn by ``seed``; None where that would leave no training
    document (:func:`hold_out` then cuts by lines)."""
    counts = {split: max(1, round(n * fraction)) for split, fraction in fractions.items()}
    if n - sum(counts.values()) < 1:
        return None
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    out, start = {}, 0
    for split, count in counts.items():
        out[split] = sorted(order[start : start + count])
        start += count
    return out


def hold_out(documents: list, fractions: dict[str, float], seed: int, source: str,
             by_lines: bool = True) -> dict[str, list]:
    """``documents`` split into train and the held-out splits of ``fractions`` (e.g. ``{"val": 0.1}``):
    each held-out split takes that fraction of the documents (at least one), drawn by ``seed``
    (:func:`held_out`), the rest stay in file order. A source of too few documents for that is cut
    by its lines instead: each document's first lines train, its next ``fractions`` of lines go to
    val and test in turn; ``by_lines=False`` (records that cannot be cut, e.g. text pairs): it is refused."""
    n = len(documents)
    if (held := held_out(n, fractions, seed)) is not None:
        taken = {i for places in held.values() for i in places}
        return {"train": [doc for i, doc in enumerate(documents) if i not in taken],
                **{split: [documents[i] for i in places] for split, places in held.items()}}
    if not by_lines:
        raise ValueError(f"data.source={source} holds {n} record(s), too few to hold out {sorted(fractions)} and "
                         f"train on the rest: give more, or data.val= and data.test= sources")
    rank_zero_info(f"data.source={source} holds {n} document(s), too few to hold out {sorted(fractions)} by "
                   f"document: each document's last lines are held out instead")
    out = {split: [] for split in ("train", *fractions)}
    for doc in documents:
        lines = doc.splitlines(keepends=True)
        cut, end = len(lines), len(lines)
        for split, fraction in reversed(fractions.items()):
            cut = max(0, end - max(1, round(len(lines) * fraction)))
            out[split].append("".join(lines[cut:end]))
            end = cut
        out["train"].append("".join(lines[:end]))
    out = {split: [doc for doc in docs if doc] for split, docs in out.items()}
    if empty := [split for split, docs in out.items() if not docs]:
        raise ValueError(f"data.source={source} holds too little text to hold out {sorted(fractions)} ({empty} would "
                         f"be empty): give more text, or data.val= and data.test= sources")
    return out


def row_sources(source: str, val: str | None, test: str | None, fractions: dict[str, float],
                data_dir: Path) -> tuple[dict[str, str], dict[str, float]]:
    """The rows file of each split that has one (``source`` trains; :func:`locate`d under ``data_dir``),
    and the ``fractions`` (``{"val": 0.1, "test": 0.1}``) of those without one, to hold out of training."""
    sources = {"train": locate(str(source), data_dir)}
    sources |= {split: locate(str(s), data_dir) for split, s in (("val", val), ("test", test)) if s}
    return sources, {split: f for split, f in fractions.items() if split not in sources}


def read_splits(sources: dict[str, str], fractions: dict[str, float], seed: int,
                read: Callable[[str, str], list]) -> dict[str, list]:
    """Every split's rows: ``read(source, key)`` of its source (``key`` the config key naming it), or
    the ``fractions`` of the training rows held out (:func:`hold_out`, drawn by ``seed``)."""
    rows = {split: read(s, f"data.{'source' if split == 'train' else split}") for split, s in sources.items()}
    if fractions:
        if len(rows["train"]) < 3:
            raise ValueError(f"data.source={sources['train']} holds {len(rows['train'])} row(s), too few to "
                             f"hold out {sorted(fractions)}: give more rows, or data.val= and data.test=")
        held = hold_out(list(range(len(rows["train"]))), fractions, seed, sources["train"])
        rows |= {split: [rows["train"][i] for i in held[split]] for split in ("train", *fractions)}
    return rows


# --- tokenizers -------------------------------------------------------------------------------

def tokenizer_choice(tokenizer: str) -> str:
    """``data.tokenizer`` checked: one of :data:`TRAINED`, or a folder (that holds a tokenizer.json)."""
    if tokenizer not in TRAINED and not Path(tokenizer).expanduser().is_dir():
        raise ValueError(f"data.tokenizer={tokenizer}: expected one of {', '.join(TRAINED)}, or a folder holding "
                         f"a tokenizer.json")
    return tokenizer


def named_tokenizer(kind: str, texts: dict[str, Iterable[str]], vocab_size: int, roles: tuple[str, ...],
                    cache: Path) -> CharTokenizer | HFTokenizer:
    """The tokenizer ``data.tokenizer=kind`` names, ``roles`` (special tokens) first: ``char`` (an
    alphabet of every split's ``texts``: a character first seen in val would be unknown), a folder's,
    or ``bpe`` / ``wordpiece`` learnt from the training split alone (:func:`learnt_tokenizer`).
    ``texts`` are read a text at a time (a split may be a :class:`Documents`, read again at each pass)."""
    if kind == "char":
        alphabet: set[str] = set()
        for split in texts.values():
            for text in split:
                alphabet.update(text)
        return CharTokenizer.from_text("".join(alphabet), roles)
    if kind not in TRAINED:
        return HFTokenizer.from_pretrained_dir(Path(kind).expanduser())
    return learnt_tokenizer(kind, texts["train"], vocab_size, roles, cache)


def learnt_tokenizer(kind: str, texts: Iterable[str], vocab_size: int, roles: tuple[str, ...], cache: Path) -> HFTokenizer:
    """``bpe`` or ``wordpiece`` with ``vocab_size`` entries learnt from ``texts``, cached in folder
    ``cache`` in a file named by the SHA-256 of the texts and the settings: an edited file is a new
    tokenizer, never a stale one."""
    path = cache / cache_name(f"{kind}{vocab_size}", str(roles), texts)
    if kind == "bpe":
        return train_bpe(texts, vocab_size, path, [*roles, "<unk>"])
    if path.exists():
        return HFTokenizer(Tokenizer.from_file(str(path)))
    # WordPiece takes its unknown token second; case is kept (lower-casing would lose text)
    tokenizer = HFTokenizer.train_wordpiece(texts, vocab_size, [roles[0], "[UNK]", *roles[1:]], False)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")  # each process its own (DDP ranks race)
    partial.write_text(tokenizer.tokenizer.to_str())
    partial.replace(path)  # complete or absent
    return tokenizer


# --- windows ----------------------------------------------------------------------------------

def token_stream(tokenizer, documents: list[str], eod: int) -> tuple[Tensor, Tensor]:
    """The documents' ids as one stream ``<eod> doc <eod> doc ... <eod>`` (int32), and ``bounds``
    (n + 1,): the position of each document's leading ``<eod>`` and, last, of the final one."""
    pieces, bounds, at = [torch.tensor([eod], dtype=torch.int32)], [0], 0
    for start in range(0, len(documents), 1000):  # in chunks: one Python list of a corpus's ids is large
        chunk = documents[start : start + 1000]
        encoded = tokenizer.encode_batch(chunk) if hasattr(tokenizer, "encode_batch") else map(tokenizer.encode, chunk)
        for ids in encoded:
            pieces.append(torch.tensor([*ids, eod], dtype=torch.int32))
            at += len(ids) + 1
            bounds.append(at)
    return torch.cat(pieces), torch.tensor(bounds)


class DocumentWindows(Dataset):
    """Windows of a token stream that restart at every document: document d (between ``bounds[d]``
    and ``bounds[d+1]``) is read in windows of ``block_size`` inputs from its leading ``<eod>``, each
    predicting the next ``block_size`` tokens, the last window padded (inputs ``pad_id``, targets
    -100). Every token of a document, and its closing ``<eod>``, is predicted exactly once, with
    context from its own document only.

    ``predicted_tokens`` (every target of the split) and ``text_bytes`` (the UTF-8 bytes of the
    split's documents) define the split's bits per byte: the summed loss in nats over every
    predicted token / ln 2 / ``text_bytes`` (:class:`zoo.objectives.lm.NextTokenLM`'s test stage).
    """

    def __init__(self, stream: Tensor, bounds: Tensor, block_size: int, pad_id: int, text_bytes: int | None = None):
        self.stream, self.block_size, self.pad_id, self.text_bytes = stream, block_size, pad_id, text_bytes
        lengths = bounds[1:] - bounds[:-1]  # the tokens each document predicts (its ids and its closing <eod>)
        per_doc = -(-lengths // block_size)
        doc = torch.repeat_interleave(torch.arange(len(lengths)), per_doc)
        first = torch.cumsum(per_doc, 0) - per_doc  # each document's first window
        k = torch.arange(len(doc)) - first[doc]  # the window's place in its document
        self.starts = bounds[:-1][doc] + k * block_size
        self.counts = torch.clamp(lengths[doc] - k * block_size, max=block_size)
        self.documents = doc  # which document each window reads
        self.predicted_tokens = int(lengths.sum())

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> TokenWindows:
        s, n = int(self.starts[i]), int(self.counts[i])
        chunk = self.stream[s : s + n + 1].long()
        inputs = torch.full((self.block_size,), self.pad_id, dtype=torch.long)
        targets = torch.full((self.block_size,), IGNORE, dtype=torch.long)
        inputs[:n], targets[:n] = chunk[:-1], chunk[1:]
        return TokenWindows(inputs, targets)


# --- the data module --------------------------------------------------------------------------

class TextData(ZooDataModule):
    """Your text, as :class:`TokenWindows` (next-token LMs: GPT, Llama) or :class:`PaddedTokens`
    (masked LM: BERT; T5's span corruption), whichever the model reads.

    Training (``pack``): the split's token stream cut into windows of ``block_size`` (documents
    separated by ``<eod>``), read in the seeded global order (shuffled each epoch, exactly resumable);
    ``pack=false``: each document cut on its own (:class:`DocumentWindows`; for a masked LM, its
    sequences padded), so that no window mixes two documents. Validation and test are always cut by
    document (every token predicted once).

    Args:
        source: a file, a folder or a glob: plain text (each file a document) or rows (each row's
            ``column`` a document), or a ``save_to_disk`` folder (module docstring).
        column: the column of text of row sources.
        val / test: sources of the validation / test split; None: ``val_fraction`` / ``test_fraction``
            of ``source``'s documents held out, drawn by ``seed`` (:func:`hold_out`).
        tokenizer: ``char`` (one token per character of every split's text), ``bpe`` or ``wordpiece``
            (``vocab_size`` entries learnt from the training split, cached under ``cache_dir`` by the
            text's hash), or a folder holding a ``tokenizer.json`` (or BERT's ``vocab.txt``).
        tokenizer_from: fine-tuning: the tokenizer of the checkpoint the run starts from (replaces
            ``tokenizer``).
    """

    yields = (TokenWindows, PaddedTokens)
    drop_last = True  # every training batch is whole (one shape)

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int, source: str | None = None,
                 column: str = "text", val: str | None = None, test: str | None = None, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, tokenizer: str = "char", vocab_size: int = 8192, pack: bool = True,
                 seed: int = 1337, tokenizer_from: str | None = None, num_workers: int = 0, streaming: bool = False,
                 tokenizer_docs: int = 10000):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if not source:
            raise ValueError("data.source is not set: data=text reads your text from data.source=FILE, a folder or "
                             "a glob (plain text, or .jsonl / .csv / .tsv / .parquet rows with data.column=)")
        self.fractions = held_out_fractions(val_fraction, test_fraction)
        self.tokenizer_kind = tokenizer_choice(tokenizer)
        if streaming and tokenizer == "char" and not tokenizer_from:
            raise ValueError("data.tokenizer=char with data.streaming=true: a stream's alphabet is not known before its "
                             "end; use data.tokenizer=bpe or wordpiece (learnt from the first data.tokenizer_docs "
                             "documents) or a tokenizer folder")
        if not streaming and any(str(s or "").startswith(HUB) for s in (source, val, test)):
            raise ValueError(f"data.source={source}: an hf: dataset is read as a stream: set data.streaming=true")
        self.source = locate(str(source), self.data_dir)
        self.column, self.sources = column, {split: locate(str(s), self.data_dir) if s else None
                                             for split, s in (("val", val), ("test", test))}
        self.vocab_size, self.pack = vocab_size, pack
        self.block_size, self.seed = block_size, seed
        self.streaming, self.tokenizer_docs = streaming, tokenizer_docs
        self.splits: dict[str, Dataset] = {}
        self.streams: dict[str, tuple[Tensor, Tensor]] = {}  # each split's token stream and document bounds
        self.eod_id: int | None = None

    def read(self) -> dict[str, list[str]]:
        """Every split's documents in memory, each source read once (:meth:`documents`)."""
        return self.documents(lazy=False)

    def documents(self, lazy: bool = True) -> dict[str, Iterable[str]]:
        """Every split's documents: those of ``data.val`` / ``data.test``, or held out of ``data.source``
        (:func:`hold_out`). ``lazy``: each split an iterable that reads its source again at each pass
        (:class:`Documents`; a first pass counts the source's documents for the draw; a source of too
        few documents to hold out by document is cut by lines, in memory); else lists."""
        cache = self.cache_dir / "text"
        read = Documents if lazy else read_documents
        source = read(self.source, "data.source", self.column, cache)
        given = {split: read(s, f"data.{split}", self.column, cache) for split, s in self.sources.items() if s}
        missing = {split: self.fractions[split] for split in self.sources if split not in given}
        if not missing:
            return {"train": source, **given}
        held = held_out(source.count(), missing, self.seed) if lazy else None
        if held is None:
            split = hold_out(list(source), missing, self.seed, self.source)
            return {name: split.get(name) or given[name] for name in SPLITS}
        taken = {i for places in held.values() for i in places}
        return {"train": source.picked(leave_out=taken),
                **{name: given[name] if name in given else source.picked(keep=set(held[name])) for name in SPLITS[1:]}}

    def own_tokenizer(self, documents: dict[str, Iterable[str]]) -> CharTokenizer | HFTokenizer:
        """The tokenizer ``data.tokenizer`` names (:func:`named_tokenizer`), with the roles the batch type needs."""
        return named_tokenizer(self.tokenizer_kind, documents, self.vocab_size, ROLE_TOKENS[self.batch_type],
                               self.cache_dir / "text")

    def role(self, candidates: tuple[str, ...] | list[str], role: str) -> int:
        """The id of the first of ``candidates`` the tokenizer has; none is refused naming where it came from."""
        source = self.tokenizer_from or f"data.tokenizer={self.tokenizer_kind}"
        return self.tokenizer.token_id(first_token(self.tokenizer, candidates, role, source))

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        if self.streaming:
            return self.setup_stream()
        documents = self.read()
        self.tokenizer = self.tokenizer_or(lambda: self.own_tokenizer(documents))
        eod = self.role(END_OF_TEXT, "end-of-document")
        self.dims = {"vocab_size": self.tokenizer.vocab_size}
        masked = self.batch_type is PaddedTokens
        if masked:
            pad, mask = self.role(PAD, "padding"), self.role(MASK, "mask")
            specials = {pad, mask, eod, *present_ids(self.tokenizer, UNKNOWN).values()}
            self.dims |= {"pad_id": pad, "mask_id": mask, "sep_id": eod, "special_ids": sorted(specials)}
        self.eod_id = eod
        self.streams = {split: token_stream(self.tokenizer, docs, eod) for split, docs in documents.items()}
        for split, docs in documents.items():
            stream, bounds = self.streams[split]
            if split == "train" and self.pack:
                windows = StreamWindows(stream, self.block_size) if len(stream) > self.block_size else None
                self.splits[split] = Unpadded(windows) if masked and windows else windows
            elif masked:
                ids = [stream[a + 1 : b + 1].tolist() for a, b in zip(bounds[:-1], bounds[1:])]  # each doc + <eod>
                self.splits[split] = PackedSequences(*cut_documents(ids, self.block_size, self.dims["pad_id"]))
            else:
                self.splits[split] = DocumentWindows(stream, bounds, self.block_size, eod,
                                                     sum(len(d.encode()) for d in docs))
        train = self.splits["train"]
        if train is None or len(train) < self.batch_size:
            raise ValueError(f"data.source={self.source}: its training split makes {len(train or [])} windows of "
                             f"{self.block_size} tokens, fewer than one batch of data.batch_size={self.batch_size}: "
                             f"give more text, or a smaller batch or context")

    def setup_stream(self) -> None:
        """``data.streaming=true``: each split a :class:`zoo.data.streaming.StreamedWindows` (its module
        docstring: the held-out draw, the tokenizer, the shares of ranks and workers)."""
        if self.batch_type is not TokenWindows or not self.pack:
            raise ValueError(f"data.streaming=true packs a stream into windows for next-token language models: "
                             f"{'a masked LM' if self.batch_type is not TokenWindows else 'data.pack=false'} is not "
                             f"supported; set data.streaming=false")
        cache = self.cache_dir / "text"
        source, column = stream_rows(self.source, "train", "data.source", self.column, cache)
        missing = {split: self.fractions[split] for split, s in self.sources.items() if not s}
        rows = {"train": (source, column, self.source, missing)}
        for split, s in self.sources.items():
            rows[split] = ((*stream_rows(s, split, f"data.{split}", self.column, cache), s, {}) if s
                           else (source, column, self.source, missing))

        def windows(split: str, tokenizer=None, eod: int = 0) -> StreamedWindows:
            data, column, where, fractions = rows[split]
            return StreamedWindows(data, column, where, split, fractions, self.seed, tokenizer, eod, self.block_size)

        first = list(islice(windows("train").documents(), self.tokenizer_docs))
        self.tokenizer = self.tokenizer_or(lambda: self.own_tokenizer({"train": first}))
        self.eod_id = self.role(END_OF_TEXT, "end-of-document")
        self.dims = {"vocab_size": self.tokenizer.vocab_size}
        self.splits = {split: windows(split, self.tokenizer, self.eod_id) for split in SPLITS}

    def split_loader(self, split: str) -> StatefulDataLoader:
        """A streamed split is read in the stream's order, each rank its share (:meth:`StreamedWindows.for_rank`)."""
        if not self.streaming:
            return super().split_loader(split)
        world, rank = (self.trainer.world_size, self.trainer.global_rank) if self.trainer is not None else (1, 0)
        return StatefulDataLoader(self.splits[split].for_rank(rank, world), batch_size=self.rank_batch_size,
                                  num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def dataset(self, split: str) -> Dataset:
        return self.splits[split]

"""WikiText-2 / WikiText-103 (Merity et al. 2016), tokenized or raw, in WordPiece ids: padded
sequences (masked LM, span corruption) or windows of the concatenated token stream (a
language model, as word-level WikiText LM is done).

Files are read from ``${data_dir}`` in the official archive layouts::

    wikitext-2/wiki.{train,valid,test}.tokens       wikitext-2-raw/wiki.{train,valid,test}.raw
    wikitext-103/wiki.{train,valid,test}.tokens     wikitext-103-raw/wiki.{train,valid,test}.raw

and the official archive is downloaded and unpacked there when a file is missing.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import PaddedTokens, TokenWindows
from zoo.data.download import ensure_file
from zoo.data.tokenizers import HFTokenizer, cached_tokenizer, present_ids
from zoo.data.windows import StreamWindows

URL = "https://wikitext.smerity.com/{archive}.zip"
ARCHIVES = {"wikitext-2": "wikitext-2-v1", "wikitext-2-raw": "wikitext-2-raw-v1",
            "wikitext-103": "wikitext-103-v1", "wikitext-103-raw": "wikitext-103-raw-v1"}
SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # BERT's names; ids 0-4 when trained here
DIMS = {"[PAD]": "pad_id", "[MASK]": "mask_id", "[CLS]": "cls_id", "[SEP]": "sep_id"}  # what dims names them
# What ends each article in a language model's token stream: BERT's, GPT-2's, Llama 1/2's, Llama 3's.
END_OF_TEXT = ["[SEP]", "<|endoftext|>", "</s>", "<|end_of_text|>"]


# An article starts at its title line, " = Title = "; sections are " = = Section = = ".
TITLE = re.compile(r"^ = [^=].* = $")


def split_path(data_dir: Path, name: str, split: str) -> Path:
    """The official file of ``split`` (train / val / test) of variant ``name``."""
    return data_dir / name / f"wiki.{SPLIT_FILES[split]}.{'raw' if name.endswith('-raw') else 'tokens'}"


def read_articles(path: Path) -> list[str]:
    """The articles of a WikiText file, each one string (its lines joined). The tokenized
    variant's ``<unk>`` becomes ``[UNK]``, which the tokenizer keeps as one special token.

    Every official file is UTF-8 and ends with a newline; a file that is not is reported
    (by path) as truncated or corrupt."""
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        raise RuntimeError(f"{path} does not end with a newline: the file is truncated. Delete it to download it again.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RuntimeError(f"{path} is not valid UTF-8 ({err}): the file is corrupt. Delete it to download it again.") from err
    articles: list[list[str]] = []
    for line in text.splitlines():
        if TITLE.match(line) or not articles:
            articles.append([])
        if line.strip():
            articles[-1].append(line.strip())
    return ["\n".join(lines).replace("<unk>", "[UNK]") for lines in articles if lines]


def pack(articles: list[list[int]], length: int, pad_id: int, cls_id: int | None = None,
         sep_id: int | None = None) -> tuple[Tensor, Tensor]:
    """Cut each article's ids into sequences of ``length`` (``[CLS] ... [SEP]`` around each
    when ``cls_id``/``sep_id`` are given); a sequence never spans two articles, so an
    article's last one is padded. Returns (tokens (N, length) int32, lengths (N,) int32)."""
    wrap = [cls_id] if cls_id is not None else [], [sep_id] if sep_id is not None else []
    body = length - len(wrap[0]) - len(wrap[1])
    if body < 1:
        raise ValueError(f"sequence length {length} leaves no room for tokens between [CLS] and [SEP]")
    rows, lengths = [], []
    for ids in articles:
        for i in range(0, len(ids), body):
            seq = wrap[0] + ids[i : i + body] + wrap[1]
            lengths.append(len(seq))
            rows.append(seq + [pad_id] * (length - len(seq)))
    return torch.tensor(rows, dtype=torch.int32).view(-1, length), torch.tensor(lengths, dtype=torch.int32)


class PackedSequences(Dataset):
    """Item i: ``PaddedTokens(tokens (L,) int64, padding (L,) bool, True = real token)``."""

    def __init__(self, tokens: Tensor, lengths: Tensor):
        self.tokens, self.lengths = tokens, lengths
        self.positions = torch.arange(tokens.shape[1])

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> PaddedTokens:
        return PaddedTokens(self.tokens[i].long(), self.positions < self.lengths[i])


class WikiText(ZooDataModule):
    """WikiText as :class:`PaddedTokens` batches (B, seq_len): each article cut into sequences,
    or as :class:`TokenWindows` (B, seq_len): the split's articles concatenated into one
    stream (``[SEP]`` after each, or a causal LM tokenizer's end of text), cut in order into windows
    (shuffled for training).

    The tokenizer is a WordPiece trained on the train split (``vocab_size`` entries), cached
    under ``${cache_dir}/wikitext`` and reused; or, with ``tokenizer_from``, the tokenizer of the
    checkpoint a run fine-tunes (a Hugging Face directory or a zoo .ckpt). ``dims`` tells the model the vocabulary
    size and the special ids (``pad_id``, ``mask_id``, ``special_ids`` = all of them).

    Args:
        name: wikitext-2, wikitext-2-raw, wikitext-103 or wikitext-103-raw.
        seq_len: tokens per sequence, [CLS] and [SEP] included (per window).
        wrap: put [CLS] ... [SEP] around every sequence (BERT's input format; not in windows).
        lowercase: lower-case before WordPiece (an uncased BERT).
    """

    yields = (PaddedTokens, TokenWindows)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, name: str = "wikitext-2",
                 seq_len: int = 128, vocab_size: int = 8192, wrap: bool = True, lowercase: bool = True,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if name not in ARCHIVES:
            raise ValueError(f"data.name={name!r}: expected one of {sorted(ARCHIVES)}")
        self.name, self.seq_len, self.vocab_size, self.wrap = name, seq_len, vocab_size, wrap
        self.lowercase = lowercase
        self.splits: dict[str, PackedSequences | StreamWindows] = {}

    def prepare_data(self) -> None:
        paths = [split_path(self.data_dir, self.name, s) for s in SPLIT_FILES]
        if all(p.exists() for p in paths):
            return
        archive = ARCHIVES[self.name]
        url, zip_path = URL.format(archive=archive), self.data_dir / f"{archive}.zip"
        try:
            ensure_file(zip_path, url)
        except RuntimeError as err:
            raise RuntimeError(
                f"{self.name} is missing ({', '.join(str(p) for p in paths if not p.exists())}) and could not be "
                f"downloaded from {url}: {err}\nWithout a network, put the official files in {paths[0].parent}."
            ) from err
        with zipfile.ZipFile(zip_path) as z:
            z.extractall(self.data_dir)
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise RuntimeError(f"{zip_path} (from {url}) did not contain {missing}")

    def _articles(self, split: str) -> list[str]:
        path = split_path(self.data_dir, self.name, split)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run prepare_data() or put the official file there")
        articles = read_articles(path)
        if not articles:
            raise RuntimeError(f"{path} holds no text: the file is truncated or not a WikiText file")
        return articles

    def _wordpiece(self, train_articles: list[str]) -> HFTokenizer:
        """A WordPiece trained on the train split, cached."""
        train = split_path(self.data_dir, self.name, "train")
        # The cache key names what the vocabulary depends on: the variant, its train file (its size,
        # modification time and first MiB: WikiText-103's is 500 MB), the settings.
        stat = train.stat()
        fingerprint = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}{self.lowercase}{SPECIAL_TOKENS}".encode()
                                     + train.read_bytes()[: 1 << 20]).hexdigest()[:12]
        path = self.cache_dir / "wikitext" / f"{self.name}-wordpiece{self.vocab_size}-{fingerprint}.json"
        return cached_tokenizer(path, lambda: HFTokenizer.train_wordpiece(train_articles, self.vocab_size,
                                                                          SPECIAL_TOKENS, self.lowercase))

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        articles = {split: self._articles(split) for split in SPLIT_FILES}
        self.tokenizer = tok = self.tokenizer_or(lambda: self._wordpiece(articles["train"]))
        ids = present_ids(tok, SPECIAL_TOKENS)
        windows = self.batch_type is TokenWindows
        if windows:  # a causal LM's own tokenizer (GPT-2's, Llama's) has none of BERT's specials but its end of text
            # data=wikitext ends each article of the token stream with the first of them the tokenizer has
            end = tok.token_id(self.role_token(END_OF_TEXT, "end-of-text"))
        elif missing := [name for name in SPECIAL_TOKENS if name not in ids]:
            raise ValueError(f"the tokenizer of {self.tokenizer_from} lacks {missing}: data=wikitext's padded "
                             f"sequences (BERT's format) need {SPECIAL_TOKENS}")
        cls_id, sep_id = (ids["[CLS]"], ids["[SEP]"]) if self.wrap and not windows else (None, None)
        for split, texts in articles.items():
            # In chunks of articles: WikiText-103's ids as one Python list would take gigabytes.
            encoded = (tok.encode_batch(texts[i : i + 1000]) for i in range(0, len(texts), 1000))
            if windows:
                stream = torch.cat([torch.tensor([t for a in chunk for t in (*a, end)], dtype=torch.int32)
                                    for chunk in encoded])
                self.splits[split] = StreamWindows(stream, self.seq_len)
            else:
                chunks = [pack(chunk, self.seq_len, ids["[PAD]"], cls_id, sep_id) for chunk in encoded]
                self.splits[split] = PackedSequences(*(torch.cat(parts) for parts in zip(*chunks)))
        self.dims = {"vocab_size": tok.vocab_size, **{DIMS[name]: i for name, i in ids.items() if name in DIMS},
                     "special_ids": sorted(ids.values())}
        if windows:
            self.dims["sep_id"] = end  # what ends each article in the stream

    def dataset(self, split: str) -> PackedSequences | StreamWindows:
        return self.splits[split]

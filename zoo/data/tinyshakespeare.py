"""Character-level tiny Shakespeare, split 90/10 into train/val as nanoGPT does."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import PaddedTokens, TokenWindows
from zoo.data.checks import utf8_text
from zoo.data.download import ensure_file
from zoo.data.tokenizers import CharTokenizer
from zoo.data.windows import RandomWindows, Unpadded

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SIZE = 1_115_394
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
MLM_SPECIALS = ("[PAD]", "[MASK]")  # BERT's names (ids 0, 1) for PaddedTokens batches


class TinyShakespeare(ZooDataModule):
    """``${data_dir}/tinyshakespeare/input.txt``, downloaded when missing.

    Training batches are random windows (``train_batches`` global batches, enough for
    the whole run); validation is a fixed set of ``val_batches`` windows of the val
    split. The dataset has no test split: ``test`` reports the val split.

    Batches: :class:`TokenWindows` (a language model), or the same windows as
    :class:`PaddedTokens` (a masked LM, span corruption); for those the character vocabulary
    starts with ``[PAD]`` and ``[MASK]``, which ``dims`` names (``pad_id``, ``mask_id``,
    ``special_ids``).

    Args:
        block_size: tokens per window (the model's context).
        check: verify the official file's size and hash (off for hand-made files).
        tokenizer_from: fine-tuning: tokenize with the tokenizer of the checkpoint the run
            starts from (a Hugging Face folder's ``tokenizer.json``, or a zoo .ckpt's), not
            one token per character.
    """

    yields = (TokenWindows, PaddedTokens)
    shuffle = False  # the windows are drawn at random already

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, block_size: int,
                 train_batches: int, val_batches: int, seed: int = 1337, check: bool = True,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        self.block_size, self.seed, self.check = block_size, seed, check
        self.train_batches, self.val_batches = train_batches, val_batches
        self.path = self.data_dir / "tinyshakespeare" / "input.txt"
        self.splits: dict[str, torch.Tensor] = {}

    def prepare_data(self) -> None:
        ensure_file(self.path, URL, SIZE if self.check else None, SHA256 if self.check else None)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path} is missing: run prepare_data() or put the file there")
        text = utf8_text(self.path.read_bytes(), self.path)
        # Only a masked LM needs specials: a language model's vocabulary stays one id per character.
        specials = MLM_SPECIALS if self.batch_type is PaddedTokens else ()
        self.tokenizer = self.tokenizer_or(lambda: CharTokenizer.from_text(text, specials))
        ids = torch.tensor(self.tokenizer.encode(text), dtype=torch.uint8 if self.tokenizer.vocab_size <= 256 else torch.int32)
        n = int(0.9 * len(ids))
        if min(n, len(ids) - n) <= self.block_size + 1:  # RandomWindows' need, said here with the file's name
            raise ValueError(f"{self.path} holds {len(ids)} characters, too few: its 90/10 train/val split gives "
                             f"{n} and {len(ids) - n}, and a window of data.block_size={self.block_size} needs more "
                             f"than {self.block_size + 1} in each")
        self.splits = {"train": ids[:n], "val": ids[n:]}
        self.dims = {"vocab_size": self.tokenizer.vocab_size}
        if self.batch_type is PaddedTokens:
            ids = [self.tokenizer.token_id(t) for t in MLM_SPECIALS]
            self.dims |= {"pad_id": ids[0], "mask_id": ids[1], "special_ids": ids}

    def dataset(self, split: str) -> Dataset:
        """Random windows: ``train_batches`` global batches of the train split, or ``val_batches``
        of the val split (for val and test alike)."""
        if split == "train":
            windows = RandomWindows(self.splits["train"], self.block_size, self.train_batches * self.batch_size,
                                    self.seed)
        else:
            windows = self.val_windows(self.block_size)
        return windows if self.batch_type is TokenWindows else Unpadded(windows)

    def val_windows(self, length: int) -> RandomWindows:
        """The validation's ``val_batches`` x ``batch_size`` windows of the val split, each ``length``
        tokens (at ``block_size``: the validation's own; longer: a length-extrapolation evaluation)."""
        return RandomWindows(self.splits["val"], length, self.val_batches * self.batch_size, self.seed + 1)

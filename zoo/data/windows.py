"""Language-model batches: windows of a token stream, random (deterministic by index) or in order."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.batches import PaddedTokens, TokenWindows

_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64: a cheap, well-spread integer hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class RandomWindows(Dataset):
    """Item i is ``TokenWindows(tokens[o : o+L], tokens[o+1 : o+L+1])`` at a pseudo-random offset o that
    depends only on (seed, i), as nanoGPT's ``get_batch`` samples them.

    Because an item is a pure function of its index, a run resumed at batch k sees
    exactly the batches an uninterrupted run would, and a global batch split over
    several ranks is the same set of windows as on one process.
    """

    def __init__(self, tokens: Tensor, block_size: int, num_samples: int, seed: int):
        if len(tokens) <= block_size + 1:
            raise ValueError(f"{len(tokens)} tokens are too few for windows of {block_size} + 1")
        self.tokens, self.block_size, self.num_samples, self.seed = tokens, block_size, num_samples, seed

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> TokenWindows:
        o = _mix(self.seed * 1_000_003 + i) % (len(self.tokens) - self.block_size - 1)
        chunk = self.tokens[o : o + self.block_size + 1].long()
        return TokenWindows(chunk[:-1], chunk[1:])


class StreamWindows(Dataset):
    """The token stream cut in order into windows of ``block_size``: item i is
    ``TokenWindows(tokens[iL : iL+L], tokens[iL+1 : iL+L+1])``; every token but the first is
    predicted once (word-level WikiText LM's evaluation; shuffled, its training)."""

    def __init__(self, tokens: Tensor, block_size: int):
        if len(tokens) <= block_size:
            raise ValueError(f"{len(tokens)} tokens are too few for one window of {block_size} + 1")
        self.tokens, self.block_size = tokens, block_size

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, i: int) -> TokenWindows:
        if not 0 <= i < len(self):  # past the stream's end a slice would be short, not an error
            raise IndexError(f"window {i} of {len(self)}")
        o = i * self.block_size
        chunk = self.tokens[o : o + self.block_size + 1].long()
        return TokenWindows(chunk[:-1], chunk[1:])


class Unpadded(Dataset):
    """The inputs of a window dataset as :class:`PaddedTokens` with no padding (masked LM,
    span corruption on a token stream): item i is ``PaddedTokens(inputs, all True)``."""

    def __init__(self, windows: Dataset):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> PaddedTokens:
        inputs = self.windows[i].inputs
        return PaddedTokens(inputs, torch.ones_like(inputs, dtype=torch.bool))

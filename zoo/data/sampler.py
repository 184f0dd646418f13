"""The training order as one global stream of items, so that a resumed run continues where it stopped."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class GlobalOrder(Sampler):
    """One rank's share of a global stream of training items.

    The stream is the dataset's epochs back to back (epoch e is a permutation seeded by
    ``seed + e`` when shuffled, else 0..n-1; ``drop_last`` drops its last partial global
    step), cut into global steps of ``step_size`` items. Rank r of ``world_size`` takes the
    r-th of ``world_size`` equal slices of each step (a last partial step is padded with
    its own items so that every rank gets as many). ``position``, the number of stream items
    all ranks together have consumed, is what checkpoints keep (StatefulDataLoader saves
    this sampler's ``state_dict`` with the last batch it yielded), so a resumed run continues
    at the same global item whether it trains longer or runs on another number of processes.

    ``batched``: yield a list of indices per step (a batch sampler); otherwise each item
    already is one rank's batch (``step_size`` = ``world_size``) and single indices are yielded.
    """

    def __init__(self, size: int, step_size: int, world_size: int, rank: int, shuffle: bool, seed: int,
                 drop_last: bool, batched: bool = True):
        self.epoch_size = size // step_size * step_size if drop_last else size
        if self.epoch_size == 0:
            raise ValueError(f"the training split holds {size} items, fewer than one global step of {step_size}")
        self.size, self.step_size, self.world_size, self.rank = size, step_size, world_size, rank
        self.shuffle, self.seed, self.batched = shuffle, seed, batched
        self.position = 0

    def __len__(self) -> int:
        """Global steps per epoch (the same on every rank and for every number of ranks)."""
        return -(-self.epoch_size // self.step_size)

    def _order(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s items, a tensor (8 bytes an item; a Python list of a large corpus's windows
        would take ~5 times that, benchmarks/data.py)."""
        if not self.shuffle:
            return torch.arange(self.size)
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch))

    def __iter__(self) -> Iterator[list[int] | int]:
        """The rest of the epoch that ``position`` lies in."""
        epoch, offset = divmod(self.position, self.epoch_size)
        order = self._order(epoch)
        for start in range(offset, self.epoch_size, self.step_size):
            items = order[start : min(start + self.step_size, self.epoch_size)].tolist()
            self.position = epoch * self.epoch_size + start + len(items)
            share = -(-len(items) // self.world_size)
            items = (items * self.world_size)[: share * self.world_size]
            mine = items[self.rank * share : (self.rank + 1) * share]
            yield mine if self.batched else mine[0]

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "world_size": self.world_size, "step_size": self.step_size}

    def load_state_dict(self, state: dict[str, int] | None) -> None:
        if not state:  # a checkpoint from before the data position was global
            warnings.warn("the checkpoint holds no global data position: the training data starts again at its "
                          "first batch", stacklevel=2)
            return
        if not self.batched and state["world_size"] != self.world_size:
            raise ValueError(
                f"the checkpoint's data position was saved under {state['world_size']} processes and each item is "
                f"one process's batch, so it cannot continue exactly under {self.world_size}: resume with "
                f"{state['world_size']} processes (trainer.devices x trainer.num_nodes)")
        self.position = state["position"]

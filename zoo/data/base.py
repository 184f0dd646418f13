"""What every data module shares: paths, the global batch size, resumable loaders."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader


class ZooDataModule(L.LightningDataModule):
    """Base data module.

    ``batch_size`` is the *global* batch (what a recipe means); each rank loads
    ``batch_size / world_size`` and a batch that does not divide fails clearly.
    Subclasses set ``provides`` (the kind of input they yield), ``dims`` (facts the
    model config needs, e.g. the vocabulary size) and ``tokenizer`` where they have one.
    """

    provides: str = ""

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, num_workers: int = 0):
        super().__init__()
        self.data_dir, self.cache_dir = Path(data_dir), Path(cache_dir)
        self.batch_size, self.num_workers = batch_size, num_workers
        self.dims: dict = {}
        self.tokenizer = None

    @property
    def rank_batch_size(self) -> int:
        world = self.trainer.world_size if self.trainer is not None else 1
        if self.batch_size % world:
            raise ValueError(
                f"data.batch_size={self.batch_size} (the global batch) does not divide over {world} processes"
            )
        return self.batch_size // world

    def loader(self, dataset: Dataset, shuffle: bool = False, **kwargs) -> StatefulDataLoader:
        """A DataLoader whose position is saved in checkpoints, so a resumed run continues
        with the next batch rather than the start of the epoch."""
        return StatefulDataLoader(
            dataset, batch_size=self.rank_batch_size, shuffle=shuffle, num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0, **kwargs,
        )

"""What every data module shares: paths, the global batch size, resumable loaders."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from zoo.data.checks import positive_int
from zoo.data.sampler import GlobalOrder


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
        self.batch_size = positive_int(batch_size, "data.batch_size")  # one check for every data module
        self.num_workers = num_workers
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

    def loader(self, dataset: Dataset, shuffle: bool = False, seed: int | None = None, batched: bool = True,
               train: bool = False, **kwargs) -> StatefulDataLoader:
        """A DataLoader whose position is saved in checkpoints, so a resumed run continues
        with the next batch rather than the start of the epoch.

        Under DDP each rank takes its share of every global batch (the trainer configs set
        ``use_distributed_sampler: false``: Lightning's own sampler would shuffle the
        training data), so a global batch holds the same items as on one process.
        ``train``: the training loader, whose order is one global stream of items
        (zoo.data.sampler.GlobalOrder): a resumed run continues at the same global item
        even when it trains for more steps or on another number of processes.
        ``batched=False``: each item of ``dataset`` already is one rank's batch (e.g.
        length buckets), so the loader adds no batching of its own.
        ``seed``: of the shuffled order; None = the run's ``seed=`` (train.py seeds torch with
        it first, on every process alike), so that another seed also shuffles differently.
        """
        if seed is None:
            seed = torch.initial_seed() % 2**63
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        rank_batch = self.rank_batch_size if batched else None
        if train:
            order = GlobalOrder(len(dataset), rank_batch * world if batched else world, world, rank, shuffle, seed,
                                kwargs.pop("drop_last", False), batched)
            picking = {"batch_sampler": order} if batched else {"sampler": order, "batch_size": None}
        elif world > 1:
            picking = {"batch_size": rank_batch,
                       "sampler": DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed)}
        else:
            sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed)) if shuffle else None
            picking = {"batch_size": rank_batch, "sampler": sampler}
        return StatefulDataLoader(dataset, num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                                  **picking, **kwargs)

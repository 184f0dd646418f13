"""What every data module shares: paths, the global batch size, the checkpoint's tokenizer,
the train / val / test loaders (resumable)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, TypeVar

import lightning as L
import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from zoo.data.checks import positive_int
from zoo.data.pretrained import tokenizer_of
from zoo.data.sampler import GlobalOrder
from zoo.data.tokenizers import first_token

Tok = TypeVar("Tok")


class ZooDataModule(L.LightningDataModule):
    """Base data module.

    ``batch_size`` is the *global* batch (what a recipe means); each rank loads
    ``batch_size / world_size`` and a batch that does not divide fails clearly.
    Subclasses set ``yields`` (the batch types of :mod:`zoo.data.batches` they can yield,
    the default first), ``dims`` (facts the model config needs, e.g. the vocabulary size)
    and ``tokenizer`` where they have one. A module that yields several types (a text corpus:
    token windows for a language model, padded sequences for a masked LM) yields
    ``batch_type``, which train.py sets (:meth:`serve`) to the one the objective accepts.

    The loaders are built here, the same way for every module (:meth:`split_loader`); a module
    says only what differs: its items (:meth:`dataset`), how they make a batch
    (:meth:`collate_fn`) and the training order's knobs (``shuffle``, ``drop_last``,
    ``batched``, ``order_seed``). ``tokenizer_from``: fine-tuning: the checkpoint the run
    starts from, whose tokenizer replaces the data's own (:meth:`tokenizer_or`).
    """

    yields: ClassVar[tuple[type, ...]] = ()
    shuffle: ClassVar[bool] = True  # the training split is read in a shuffled order (else as the dataset lists it)
    drop_last: ClassVar[bool] = False  # the training split's last partial global batch is left out
    batched: ClassVar[bool] = True  # False: each item of the dataset already is one rank's batch

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, num_workers: int = 0,
                 tokenizer_from: str | None = None):
        super().__init__()
        self.data_dir, self.cache_dir = Path(data_dir), Path(cache_dir)
        self.batch_size = positive_int(batch_size, "data.batch_size")  # one check for every data module
        self.num_workers, self.tokenizer_from = num_workers, tokenizer_from
        self.dims: dict = {}
        self.tokenizer = None
        self.order_seed: int | None = None  # the shuffle's seed (a module's data.seed), None: the run's seed=
        self.batch_type: type | None = self.yields[0] if self.yields else None  # serve() picks another

    # --- what a data module provides --------------------------------------------------------
    def dataset(self, split: str) -> Dataset:
        """The items of ``split`` (train / val / test), after ``setup``."""
        raise NotImplementedError

    def collate_fn(self) -> Callable | None:
        """What makes a batch of a list of items, in every split (None: the DataLoader's default)."""
        return None

    # --- shared -----------------------------------------------------------------------------
    def tokenizer_or(self, own: Callable[[], Tok]) -> Tok:
        """The tokenizer of ``tokenizer_from`` where a run fine-tunes, so that the ids mean what
        the weights learnt; else ``own()``, the data's own vocabulary."""
        return tokenizer_of(self.tokenizer_from) if self.tokenizer_from else own()

    def role_token(self, names: Sequence[str], role: str) -> str:
        """The first of ``names`` that the tokenizer has (checkpoints name their specials their own
        way); none is an error naming the role and ``tokenizer_from``."""
        return first_token(self.tokenizer, names, role, self.tokenizer_from)

    def split_loader(self, split: str) -> StatefulDataLoader:
        """The loader of ``split``: :meth:`loader` over :meth:`dataset`, the training split in its
        resumable global order with this module's knobs."""
        train = split == "train"
        return self.loader(self.dataset(split), shuffle=train and self.shuffle, seed=self.order_seed,
                           batched=self.batched, train=train, drop_last=train and self.drop_last,
                           collate_fn=self.collate_fn())

    def train_dataloader(self) -> StatefulDataLoader:
        return self.split_loader("train")

    def val_dataloader(self) -> StatefulDataLoader:
        return self.split_loader("val")

    def test_dataloader(self) -> StatefulDataLoader:
        return self.split_loader("test")

    def serve(self, batch_type: type) -> None:
        """Yield ``batch_type`` batches (one of :attr:`yields`); call before ``setup``."""
        if batch_type not in self.yields:
            raise ValueError(f"{type(self).__name__} yields {[t.__name__ for t in self.yields]}, "
                             f"not {batch_type.__name__}")
        self.batch_type = batch_type

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

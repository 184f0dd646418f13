"""The train / val / test loaders are built once, in the data base class (zoo.data.base): every
module's training split is the one global stream (zoo.data.sampler.GlobalOrder), so a global batch
holds the same items on any number of processes and a resume continues at the same item.

(That a refactor of the loaders changes no batch: ``tools/first_batches.py``.)"""

from types import SimpleNamespace

import pytest
import torch

from zoo.data.moving_shapes import MovingShapes
from zoo.data.shapes_detection import ShapesDetection


def _first_batch(make, world: int, rank: int):
    module = make()
    module.trainer = SimpleNamespace(world_size=world, global_rank=rank)  # what the loaders read of a trainer
    return next(iter(module.train_dataloader()))[0]


MODULES = {  # generated data: nothing to read from disk
    "moving_shapes": lambda: MovingShapes("unused", "unused", batch_size=4, frames=2, image_size=16, train_size=12),
    "shapes_detection": lambda: ShapesDetection("unused", "unused", batch_size=4, image_size=32, train_size=12),
}


@pytest.mark.parametrize("name", MODULES)
def test_a_global_training_batch_holds_the_same_items_on_two_processes(name):
    one = _first_batch(MODULES[name], 1, 0)
    two = torch.cat([_first_batch(MODULES[name], 2, rank) for rank in range(2)])
    assert torch.equal(two, one)  # rank r reads the r-th half of the global batch


@pytest.mark.parametrize("name", MODULES)
def test_a_resumed_training_loader_continues_at_the_next_batch_of_the_next_epoch(name):
    straight = MODULES[name]().train_dataloader()
    whole = [batch[0] for _ in range(2) for batch in straight]  # two epochs of 3 batches
    first = MODULES[name]().train_dataloader()
    list(first)  # the first epoch
    next(iter(first))  # the first batch of the second
    resumed = MODULES[name]().train_dataloader()
    resumed.load_state_dict(first.state_dict())
    rest = [batch[0] for batch in resumed]
    assert len(rest) == 2 and all(torch.equal(a, b) for a, b in zip(rest, whole[4:]))
    assert not torch.equal(whole[3], whole[0])  # the second epoch is another order

"""The mask contract (``zoo.nn.masks.Mask``): every mask declares whether it says its cells,
the base class alone builds the dense mask and the padding, and the backends ask the
declaration, not the attributes a mask happens to have."""

from __future__ import annotations

import pytest
import torch

from zoo.nn import flex
from zoo.nn.block import BlockConfig
from zoo.nn.masks import (CausalMask, GridWindowMask, LocalMask, Mask, NoMask, PerLayer, PrefixLMMask, padding_mask,
                          per_layer, positions)
from zoo.nn.sparse import BigBirdMask, FixedMask, StridedMask
from zoo.nn.stack import Stack

CPU = torch.device("cpu")
LENGTH = 16  # a 4 x 4 patch grid for GridWindowMask; longer than BigBirdMask(2, 1)'s full attention (14)
MASKS = [NoMask(), CausalMask(), PrefixLMMask(), LocalMask(4), LocalMask(4, causal=False), GridWindowMask(2),
         StridedMask(3), FixedMask(4, 1), BigBirdMask(2, 1)]


def subclasses(cls: type) -> list[type]:
    """The zoo's subclasses of ``cls`` (not the ones tests define)."""
    found = [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]
    return [c for c in found if c.__module__.startswith("zoo.")]


def test_only_the_base_class_builds_the_dense_mask_and_the_padding():
    masks = {type(m) for m in MASKS} | {PerLayer}
    assert masks <= set(subclasses(Mask))
    for cls in subclasses(Mask):
        assert "__call__" not in vars(cls), f"{cls.__name__} builds its own mask and padding"


@pytest.mark.parametrize("mask", [m for m in MASKS if m.has_cells], ids=repr)
def test_a_mask_with_cells_is_its_cells_over_the_positions_less_the_padding(mask):
    padding = torch.ones(2, LENGTH, dtype=torch.bool)
    padding[1, -5:] = False
    dense, is_causal = mask(LENGTH, LENGTH, CPU, padding)
    want = mask.cells(*positions(LENGTH, LENGTH), LENGTH) & padding_mask(padding)
    assert not is_causal and torch.equal(torch.broadcast_to(dense, want.shape), want)
    assert mask(LENGTH, LENGTH, CPU)[1] == isinstance(mask, CausalMask)  # no padding: the fused causal kernel


def test_a_mask_declares_its_cells_or_builds_its_own_dense_mask():
    with pytest.raises(TypeError, match="declares has_cells but defines no cells"):
        type("Nothing", (Mask,), {})
    with pytest.raises(TypeError, match="must define its dense"):
        type("Batchy", (Mask,), {"has_cells": False})


@pytest.mark.parametrize("backend", ["blocks", "flex"])
def test_the_backends_ask_the_declaration(backend):
    if backend == "flex" and not flex.available():
        pytest.skip("this torch has no FlexAttention")
    block = BlockConfig(d_model=8, n_heads=2, d_ff=16)
    no_cells = type("NoCells", (CausalMask,), {"has_cells": False})()  # it has a cells method, but says it has none
    for mask in (PrefixLMMask(), BigBirdMask(2, 1), no_cells):
        with pytest.raises(ValueError, match="does not say its cells"):
            Stack(block, 2, mask, attention_backend=backend)
    Stack(block, 2, PerLayer([NoMask(), LocalMask(4)]), attention_backend=backend)


def test_a_layer_mask_that_is_not_a_mask_is_refused():
    with pytest.raises(TypeError, match="is not one of zoo.nn.masks"):
        per_layer(PerLayer([CausalMask(), lambda *args: (None, False)]), 2)

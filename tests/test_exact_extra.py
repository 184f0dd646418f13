"""Small pins that make `make mutants` (tools/mutant_list.py) catch what the family tests cannot see."""

import pytest
import torch

from zoo.nn.sparse import bigbird_counts


@pytest.mark.parametrize("seed", [0, 5])
def test_bigbird_seed_is_the_generators_seed(seed):
    """A seed names one draw: the middle rows, in order, each take the first ``n_random`` of a
    permutation (from one ``torch.Generator`` seeded with ``seed``) of the middle blocks their
    global + sliding pattern does not see. Hugging Face draws per head, in training only, so it
    cannot pin this; the draw is rebuilt here from the eval-mode pattern, not from the code."""
    length, block, n_random = 40, 2, 3
    sliding = bigbird_counts(length, block, 0)[::block, ::block]  # global + sliding only
    n_blocks = sliding.shape[0]
    generator = torch.Generator().manual_seed(seed)
    want = sliding.clone()
    for row in range(1, n_blocks - 1):
        candidates = torch.tensor([b for b in range(1, n_blocks - 1) if sliding[row, b] == 0])
        want[row, candidates[torch.randperm(len(candidates), generator=generator)[:n_random]]] += 1
    assert torch.equal(bigbird_counts(length, block, n_random, seed=seed)[::block, ::block], want)

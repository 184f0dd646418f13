"""The block attention backend (zoo/nn/blocked.py) computes what dense SDPA under the same mask
computes (outputs and gradients, with padding and grouped-query heads), skips the key blocks the
mask hides, and refuses masks that cannot say their cells."""

from __future__ import annotations

import pytest
import torch

from exactness import assert_matches, randomise
from zoo.nn.attention import attention
from zoo.nn.blocked import Band, blocked_attention, plan
from zoo.nn.masks import CausalMask, GridWindowMask, LocalMask, NoMask, PrefixLMMask
from zoo.nn.sparse import BigBirdMask, FixedMask, StridedMask

CPU = torch.device("cpu")
MASKS = [NoMask(), CausalMask(), LocalMask(9), LocalMask(12, causal=False), StridedMask(10), FixedMask(16, 2),
         GridWindowMask(5)]


def attend(q, k, v, mask):
    return attention(q, k, v, mask=mask)[0]


@pytest.mark.parametrize("mask", MASKS, ids=repr)
@pytest.mark.parametrize("padded", [False, True])
def test_blocked_equals_dense_forward_and_backward(mask, padded):  # LocalMask: the band path
    torch.manual_seed(0)
    length = 100
    q = torch.randn(2, 4, length, 8, requires_grad=True)
    k = torch.randn(2, 2, length, 8, requires_grad=True)  # grouped-query: 2 kv heads
    v = torch.randn(2, 2, length, 8, requires_grad=True)
    padding = torch.ones(2, length, dtype=torch.bool)
    if padded:
        padding[1, 90:] = False
    dense_mask, is_causal = mask(length, length, CPU, padding if padded else None)
    dense = attention(q, k, v, mask=dense_mask, is_causal=is_causal)[0]
    blocks = plan(mask, length, length, CPU, size=16)
    blocked = blocked_attention(q, k, v, blocks, padding if padded else None, attend)
    real = padding[:, None, :, None].expand_as(dense)
    assert_matches(blocked, dense, where=real, what=f"blocked attention under {mask!r}")
    grads = torch.autograd.grad((dense * real).sum(), (q, k, v))
    blocked_grads = torch.autograd.grad((blocked * real).sum(), (q, k, v))
    for name, got, want in zip("qkv", blocked_grads, grads):
        assert_matches(got, want, what=f"d{name} under {mask!r}")


def test_a_window_reads_only_the_key_blocks_it_sees():
    band = plan(LocalMask(16), 256, 256, CPU, size=32)  # a band: every block reads its own and the one before
    assert isinstance(band, Band) and (band.before, band.after) == (1, 0) and band.cells.shape == (8, 32, 64)
    wide = plan(LocalMask(16, causal=False), 256, 256, CPU, size=8)
    assert (wide.before, wide.after) == (1, 1)
    blocks = plan(LocalMask(16), 64, 256, CPU, size=32)  # the last 64 queries over a cache of 256 keys
    assert all(isinstance(b.keys, slice) for b in blocks)
    assert [(b.keys.start, b.keys.stop) for b in blocks] == [(177, 224), (209, 256)]  # from the first key seen
    strided = plan(StridedMask(64), 256, 256, CPU, size=32)
    # rows 224..255 see the window 160..255 and every 64th key back: 160..191, 96..127, 32..63,
    # so key blocks 1, 3, 5, 6, 7 of 32 (gathered: not contiguous)
    last = strided[-1]
    assert isinstance(last.keys, torch.Tensor) and sorted(set((last.keys // 32).tolist())) == [1, 3, 5, 6, 7]


@pytest.mark.parametrize("mask", [PrefixLMMask(), BigBirdMask(4, 1)], ids=repr)
def test_masks_that_cannot_say_their_cells_are_refused(mask):
    with pytest.raises(ValueError, match="needs a mask that says its cells"):
        plan(mask, 64, 64, CPU)


def lm(mask, backend: str):
    from zoo.models.model import Model
    from zoo.nn.block import BlockConfig
    from zoo.nn.embedders import TokenEmbedder
    from zoo.nn.heads import LMHead

    torch.manual_seed(0)
    block = BlockConfig(d_model=16, n_heads=4, d_ff=32, n_kv_heads=2)
    return randomise(Model(TokenEmbedder(30, 16, max_len=300, positions="none"), mask, block, 2, LMHead(16, 30),
                           context=300, rotary=True, attention_backend=backend))


@pytest.mark.parametrize("mask", [LocalMask(40), StridedMask(32)], ids=repr)
def test_a_model_under_the_block_backend_trains_and_decodes_as_under_sdpa(mask):
    tokens = torch.randint(0, 30, (2, 260))
    dense, blocked = lm(mask, "sdpa"), lm(mask, "blocks")
    out_dense, out_blocked = dense(tokens), blocked(tokens)
    assert_matches(out_blocked, out_dense, what="logits, blocks vs sdpa")
    out_dense.logsumexp(-1).mean().backward()
    out_blocked.logsumexp(-1).mean().backward()
    for (name, a), b in zip(dense.named_parameters(), blocked.parameters()):
        assert_matches(b.grad, a.grad, what=f"gradient of {name}")
    with torch.no_grad():  # decoding: the prompt through the blocks, each new token the dense way
        cache = blocked.eval().new_cache()
        steps = [blocked(tokens[:, :200], cache=cache)] + [blocked(tokens[:, t:t + 1], cache=cache)
                                                             for t in range(200, 210)]
        assert_matches(torch.cat(steps, 1), dense.eval()(tokens[:, :210]), what="cached decoding, blocks")


def test_bad_backends_are_refused_at_construction():
    with pytest.raises(ValueError, match=r"attention_backend='dense': expected one of \['sdpa', 'blocks', 'flex'\]"):
        lm(CausalMask(), "dense")
    with pytest.raises(ValueError, match=r"attention_backend=blocks: the mask PrefixLMMask\(\) does not say its cells"):
        lm(PrefixLMMask(), "blocks")

"""The key/value cache (zoo/nn/cache.py): what it holds after each append, whatever its storage."""

from __future__ import annotations

import torch

from zoo.nn.cache import LayerCache


def steps(n: int, width: int = 3, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n appends of 1 to `width` positions each: k, v (B=2, H_kv=2, L, Dh=4)."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, width + 1, (n,), generator=g).tolist()
    return [(torch.randn(2, 2, s, 4, generator=g), torch.randn(2, 2, s, 4, generator=g)) for s in sizes]


@torch.no_grad()
def test_a_cache_kept_whole_returns_every_position_and_grows_its_buffers_by_doubling():
    cache, news, buffers = LayerCache(), steps(40), set()
    for i, (k, v) in enumerate(news):
        held_k, held_v = cache.append(k, v)
        torch.testing.assert_close(held_k, torch.cat([k for k, _ in news[: i + 1]], dim=2), rtol=0, atol=0)
        torch.testing.assert_close(held_v, torch.cat([v for _, v in news[: i + 1]], dim=2), rtol=0, atol=0)
        assert cache.k is held_k and cache.length == held_k.shape[2]
        buffers.add(cache._buffers[0].data_ptr())
    # ~80 positions in 40 appends: a handful of allocations (doubling), not one per append
    assert len(buffers) <= 8, len(buffers)


@torch.no_grad()
def test_reordered_rows_keep_their_positions_and_the_next_appends_follow():
    cache, news = LayerCache(), steps(6)
    for k, v in news[:3]:
        cache.append(k, v)
    index = torch.tensor([1, 1])
    cache.reorder(index)
    for k, v in news[3:]:
        cache.append(k, v)
    expected = torch.cat([torch.cat([k for k, _ in news[:3]], dim=2)[index], *(k for k, _ in news[3:])], dim=2)
    torch.testing.assert_close(cache.k, expected, rtol=0, atol=0)


def test_with_gradients_every_step_stays_differentiable():
    # a buffer written in place would fail here: the first step's keys are saved for its backward
    w = torch.ones(1, requires_grad=True)
    cache, total = LayerCache(), 0
    for k, v in steps(5):
        held_k, held_v = cache.append(k * w, v * w)
        total = total + (held_k * held_v).sum()
    total.backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()


@torch.no_grad()
def test_a_rolling_buffer_holds_the_latest_keep_positions():
    cache, news = LayerCache(keep=5), steps(10)
    for i, (k, v) in enumerate(news):
        cache.append(k, v)
        assert torch.equal(cache.k, torch.cat([k for k, _ in news[: i + 1]], dim=2)[:, :, -5:])
    assert cache.length == sum(k.shape[2] for k, _ in news)

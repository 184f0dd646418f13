"""Shared by the sliding-window families' tests: greedy decoding with the rolling cache."""

from __future__ import annotations

import torch

from zoo.models.sampling import generate


def greedy_decoding_kept_keys(net, vocab_size: int, window: int) -> list[int]:
    """Greedy-decode 4x ``window`` tokens with and without the KV cache and assert they are the
    same tokens; then feed that sequence one token at a time through a fresh cache and return how
    many keys each layer's cache kept at the end."""
    prompt = torch.randint(0, vocab_size, (2, 5))
    cached = generate(net, prompt, 4 * window, temperature=0, use_cache=True)
    full = generate(net, prompt, 4 * window, temperature=0, use_cache=False)
    assert torch.equal(cached, full), "greedy decoding with the rolling cache differs from full recomputation"
    cache = net.new_cache()
    with torch.no_grad():
        for t in range(cached.shape[1]):
            net(cached[:, t : t + 1], cache=cache)
    assert cache.length == cached.shape[1]
    return [layer.k.shape[2] for layer in cache.layers]

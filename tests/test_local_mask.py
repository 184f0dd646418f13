"""LocalMask: the one meaning of "window w", its boundary cells, the cached (q_len < k_len)
path, the rolling KV cache it asks for, and its bad input."""

from __future__ import annotations

import pytest
import torch

from exactness import assert_matches, randomise
from zoo.models.model import Model
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import LocalMask, PerLayer, CausalMask

CPU = torch.device("cpu")


def cells(mask: LocalMask, q_len: int, k_len: int) -> torch.Tensor:
    out, is_causal = mask(q_len, k_len, CPU)
    assert not is_causal
    return out


def test_causal_window_sees_w_keys_itself_included():
    seen = cells(LocalMask(3), 8, 8)
    for i in range(8):
        for j in range(8):
            assert seen[i, j] == (i - 3 < j <= i), (i, j)
    assert seen.sum(1).tolist() == [1, 2, 3, 3, 3, 3, 3, 3]
    assert seen[5, 3] and not seen[5, 2] and not seen[5, 6]  # the two edges of the window


def test_bidirectional_window_sees_half_each_side():
    seen = cells(LocalMask(4, causal=False), 9, 9)
    for i in range(9):
        for j in range(9):
            assert seen[i, j] == (abs(i - j) <= 2), (i, j)
    assert seen[4].tolist() == [False, False, True, True, True, True, True, False, False]  # ModernBERT: w + 1


def test_the_last_queries_of_a_longer_key_sequence_are_the_rows_of_the_full_mask():
    mask = LocalMask(4)
    full = cells(mask, 10, 10)
    for q_len in (1, 3, 10):
        assert torch.equal(cells(mask, q_len, 10), full[-q_len:])


def test_padding_is_hidden_too():
    padding = torch.tensor([[True, True, True, False]])
    out, _ = LocalMask(2)(4, 4, CPU, padding)
    assert out.shape == (1, 1, 4, 4) and not out[..., 3].any() and out[0, 0, 2, 1]


@pytest.mark.parametrize("window", [0, -3, 2.5])
def test_a_window_below_one_is_refused_naming_the_value(window):
    with pytest.raises(ValueError, match=f"window={window}"):
        LocalMask(window)


def lm(mask, context: int = 64) -> Model:
    torch.manual_seed(0)
    block = BlockConfig(d_model=16, n_heads=4, d_ff=32, n_kv_heads=2)
    embedder = TokenEmbedder(30, 16, max_len=context, positions="none")
    return randomise(Model(embedder, mask, block, 3, LMHead(16, 30), context=context, rotary=True).eval())


def test_a_window_wider_than_the_context_is_refused_naming_both():
    with pytest.raises(ValueError, match="window=65 is larger than the model's context=64"):
        lm(LocalMask(65))
    with pytest.raises(ValueError, match="window=65"):
        lm(PerLayer([CausalMask(), LocalMask(65)]))


@pytest.mark.parametrize("mask", [LocalMask(5), PerLayer([LocalMask(5), CausalMask()])])
def test_cached_decoding_keeps_only_the_window_and_matches_the_full_forward(mask):
    net = lm(mask)
    tokens = torch.randint(0, 30, (2, 24))
    with torch.no_grad():
        full = net(tokens)
        cache = net.new_cache()
        steps = [net(tokens[:, :7], cache=cache)]
        for t in range(7, 24):
            steps.append(net(tokens[:, t : t + 1], cache=cache))
            local = [layer for layer, m in zip(cache.layers, net.stack.layer_masks) if m == LocalMask(5)]
            assert all(layer.k.shape[2] == 4 for layer in local)  # the w - 1 keys a later query sees
    assert cache.length == 24
    assert_matches(torch.cat(steps, dim=1), full, what="rolling-cache decoding")

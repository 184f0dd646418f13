"""The attention context: built once per distinct mask, per-layer mask patterns, and the
per-layer stacks against hand-built per-layer loops (full forward and KV-cache decoding)."""

from __future__ import annotations

import pytest
import torch

from exactness import assert_matches, randomise
from zoo.convert.common import build_net
from zoo.models.encoder_decoder import EncoderDecoder
from zoo.models.model import Model
from zoo.nn.stack import Stack
from zoo.nn.block import Block, BlockConfig
from zoo.nn.context import AttentionContext
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import CausalMask, NoMask, PerLayer, PrefixLMMask, causal_mask, per_layer, prefix_lm_mask
from zoo.nn.relative_bias import RelativePositionBias

BLOCK = BlockConfig(d_model=16, n_heads=4, d_ff=32, n_kv_heads=2)
VOCAB, LENGTH = 30, 9


class CountingMask(CausalMask):
    """A causal mask that counts how often it is built; two of these are two distinct masks."""

    __eq__, __hash__ = object.__eq__, object.__hash__  # identity equality

    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, q_len, k_len, device, key_padding=None, prefix_len=None):
        self.calls.append((q_len, k_len))
        return super().__call__(q_len, k_len, device, key_padding, prefix_len)


def lm(mask, n_layers: int = 4) -> Model:
    torch.manual_seed(0)
    embedder = TokenEmbedder(VOCAB, BLOCK.d_model, max_len=32, positions="none")
    net = Model(embedder, mask, BLOCK, n_layers, LMHead(BLOCK.d_model, VOCAB), context=32, rotary=True)
    return randomise(net).eval()


def test_a_pattern_tiles_over_the_layers_and_is_cut_at_the_last():
    a, b, c = CausalMask(), NoMask(), PrefixLMMask()
    assert per_layer(a, 3) == [a, a, a]
    assert per_layer(PerLayer([a, b, c]), 7) == [a, b, c, a, b, c, a]  # e.g. ModernBERT: 22 layers, global every 3rd
    with pytest.raises(ValueError, match="pattern of 4 masks for a stack of 3 layers"):
        per_layer(PerLayer([a, b, c, a]), 3)
    with pytest.raises(ValueError, match="PerLayer needs at least one mask"):
        PerLayer([])


def test_one_context_per_distinct_mask_not_per_layer():
    first, second = CountingMask(), CountingMask()
    stack = Stack(BLOCK, 5, PerLayer([first, second]))
    contexts = stack.contexts(6, torch.device("cpu"))
    assert first.calls == [(6, 6)] and second.calls == [(6, 6)]  # 5 layers, 2 masks: 2 builds
    assert contexts[0] is contexts[2] is contexts[4] and contexts[1] is contexts[3]
    assert contexts[0] is not contexts[1]
    # masks with equal settings are one mask (Hydra instantiates a list entry per layer)
    same = Stack(BLOCK, 3, PerLayer([CausalMask(), NoMask(), CausalMask()])).contexts(6, torch.device("cpu"))
    assert same[0] is same[2] and same[0] is not same[1]


def test_a_stack_of_one_mask_builds_it_once_and_folds_the_bias_once():
    mask = CountingMask()
    bias = RelativePositionBias(BLOCK.n_heads, bidirectional=False)
    contexts = Stack(BLOCK, 4, mask).contexts(5, torch.device("cpu"), bias=bias)
    assert len(mask.calls) == 1 and all(c is contexts[0] for c in contexts)
    folded = contexts[0].attn_mask
    assert folded.dtype == torch.float32 and not contexts[0].is_causal  # SDPA: one additive mask
    table = bias(5, 5, 0)
    assert torch.equal(folded, table.masked_fill(~causal_mask(5, 5), float("-inf")))


def batch():
    torch.manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, LENGTH))
    padding = torch.ones(2, LENGTH, dtype=torch.bool)
    padding[1, 7:] = False
    return tokens, padding, torch.tensor([4, 3])


def by_hand(net: Model, tokens, masks: list[torch.Tensor]) -> torch.Tensor:
    """The reference: each layer run with its explicit boolean mask (B|1, 1, L, L)."""
    x = net.embedder(tokens)
    rope = net.rope(tokens.shape[1])
    for block, mask in zip(net.stack.blocks, masks):
        x = block(x, AttentionContext(attn_mask=mask, rope=rope))
    return net.head(net.stack.norm(x))


def test_alternating_masks_equal_a_per_layer_loop_with_explicit_masks():
    tokens, padding, prefix = batch()
    net = lm(PerLayer([CausalMask(), PrefixLMMask()]))
    keys = padding[:, None, None, :]
    causal, prefix_lm = causal_mask(LENGTH, LENGTH) & keys, prefix_lm_mask(prefix, LENGTH) & keys
    out = net(tokens, key_padding=padding, prefix_len=prefix)
    expected = by_hand(net, tokens, [causal, prefix_lm, causal, prefix_lm])
    assert_matches(out, expected, what="alternating causal / prefix-LM layers")
    # the pattern is what the layers use: all-causal layers give other outputs
    assert not torch.allclose(out, by_hand(net, tokens, [causal] * 4), atol=1e-3)
    # and with no mask in a layer (NoMask), that layer sees the future too
    net = lm(PerLayer([CausalMask(), NoMask()]))
    everyone = keys.expand(2, 1, LENGTH, LENGTH)
    assert_matches(net(tokens, key_padding=padding), by_hand(net, tokens, [causal, everyone] * 2),
                   what="alternating causal / unmasked layers")


def test_cached_decoding_with_per_layer_masks_equals_the_full_forward():
    """Prefix-LM layers see the prompt bidirectionally on the first step, then every new
    token sees the cache; causal layers are causal throughout: the logits of one full
    forward (per-layer loop with explicit masks) are what step-by-step decoding gives."""
    tokens, _, _ = batch()
    prefix = torch.tensor([4, 4])
    net = lm(PerLayer([PrefixLMMask(), CausalMask(), CausalMask()]), n_layers=3)
    causal, prefix_lm = causal_mask(LENGTH, LENGTH), prefix_lm_mask(prefix, LENGTH)
    full = by_hand(net, tokens, [prefix_lm, causal, causal])
    cache = net.new_cache()
    steps = [net(tokens[:, :4], prefix_len=prefix, cache=cache)]
    steps += [net(tokens[:, i : i + 1], prefix_len=prefix, cache=cache) for i in range(4, LENGTH)]
    assert_matches(torch.cat(steps, dim=1), full, what="cached decoding with per-layer masks")


def test_encoder_pattern_with_a_relative_bias_equals_explicit_additive_masks():
    torch.manual_seed(0)
    cfg = BlockConfig(d_model=16, n_heads=4, d_ff=32, attn_scale=1.0, norm="rmsnorm", bias_q=False, bias_k=False,
                      bias_v=False, bias_out=False, bias_ffn=False)
    net = EncoderDecoder(TokenEmbedder(VOCAB, 16, 32, positions="none"), TokenEmbedder(VOCAB, 16, 32, positions="none"),
                         cfg, 4, 1, LMHead(16, VOCAB), context=32, encoder_mask=PerLayer([NoMask(), CausalMask()]),
                         encoder_bias=RelativePositionBias(4, bidirectional=True)).eval()
    randomise(net)
    tokens, padding, _ = batch()
    bias = net.encoder.bias(LENGTH, LENGTH, 0)
    keys = padding[:, None, None, :]
    everyone, causal = bias.masked_fill(~keys, float("-inf")), bias.masked_fill(~(causal_mask(LENGTH, LENGTH) & keys),
                                                                                float("-inf"))
    x = net.encoder.embedder(tokens)
    for block, mask in zip(net.encoder.blocks, [everyone, causal, everyone, causal]):
        x = block(x, AttentionContext(attn_mask=mask))
    assert_matches(net.encode(tokens, padding), net.encoder.stack.norm(x), what="encoder pattern with relative bias")


def test_rotary_and_relative_bias_are_one_mechanism_in_both_containers():
    """Model takes a relative bias and EncoderDecoder rotary positions, as the other does:
    cached decoding (positions from ``start``) equals the full forward."""
    tokens, _, _ = batch()
    torch.manual_seed(0)
    net = Model(TokenEmbedder(VOCAB, 16, 32, positions="none"), CausalMask(), BLOCK, 2, LMHead(16, VOCAB), context=32,
                bias=RelativePositionBias(BLOCK.n_heads, bidirectional=False)).eval()
    randomise(net)
    cache = net.new_cache()
    steps = [net(tokens[:, :3], cache=cache)] + [net(tokens[:, i : i + 1], cache=cache) for i in range(3, LENGTH)]
    assert_matches(torch.cat(steps, dim=1), net(tokens), what="Model with a relative bias, cached")
    net = EncoderDecoder(TokenEmbedder(VOCAB, 16, 32, positions="none"), TokenEmbedder(VOCAB, 16, 32, positions="none"),
                         BLOCK, 1, 2, LMHead(16, VOCAB), context=32, rotary=True).eval()
    randomise(net)
    memory = net.encode(tokens)
    cache = net.new_cache()
    steps = [net.decode(tokens[:, i : i + 1], memory, cache=cache) for i in range(LENGTH)]
    assert_matches(torch.cat(steps, dim=1), net.decode(tokens, memory), what="EncoderDecoder with rotary, cached")
    shuffled = tokens[:, torch.randperm(LENGTH)]  # rotary positions: the encoder is no longer order-blind
    assert not torch.allclose(net.encode(shuffled).mean(1), memory.mean(1), atol=1e-4)


def test_a_block_with_cross_attention_needs_a_memory():
    block = Block(BLOCK, cross_attention=True)
    with pytest.raises(ValueError, match="cross-attention but its context has no memory"):
        block(torch.randn(1, 3, 16), AttentionContext())


def test_a_per_layer_pattern_comes_from_the_model_config():
    masks = "[{_target_:zoo.nn.masks.CausalMask},{_target_:zoo.nn.masks.PrefixLMMask}]"
    pattern = ["model.net.mask._target_=zoo.nn.masks.PerLayer", f"+model.net.mask.masks={masks}"]
    net = build_net("gpt", [*pattern, "model.net.n_layers=3"], {"vocab_size": VOCAB})
    # types, not only ==: a config object left un-instantiated would compare equal to the mask
    assert [type(m) for m in net.stack.layer_masks] == [CausalMask, PrefixLMMask, CausalMask]
    assert net(torch.randint(0, VOCAB, (1, 8))).shape == (1, 8, VOCAB)  # and the masks run
    with pytest.raises(Exception, match="pattern of 2 masks for a stack of 1 layers"):
        build_net("gpt", [*pattern, "model.net.n_layers=1"], {"vocab_size": VOCAB})

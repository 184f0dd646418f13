"""Analytic training FLOPs agree with torch.utils.flop_counter."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from zoo.convert.common import build_net
from zoo.models.encoder_decoder import EncoderDecoder
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead


def _counted(net, *inputs) -> int:
    # The explicit attention path computes attention with plain matmuls, which the counter
    # sees on every device (it has no formula for the fused CPU kernel).
    for m in net.modules():
        if hasattr(m, "keep_weights"):
            m.keep_weights = True
    with FlopCounterMode(display=False) as counter:
        net(*inputs).sum().backward()
    return counter.get_total_flops()


def test_gpt_flops_match_the_counter():
    net = build_net("gpt", ["model.net.n_layers=2", "model.net.context=64", "model.net.block.d_model=64",
                            "model.net.block.n_heads=4"], {"vocab_size": 100})
    x = torch.randint(0, 100, (3, 64))
    assert net.training_flops(3, 64) == pytest.approx(_counted(net, x), rel=0.05)


def test_encoder_decoder_flops_match_the_counter():
    block = BlockConfig(d_model=64, n_heads=4, d_ff=128)
    net = EncoderDecoder(TokenEmbedder(50, 64, 32), TokenEmbedder(50, 64, 32), block, 2, 3, LMHead(64, 50), 32)
    source, target = torch.randint(0, 50, (2, 20)), torch.randint(0, 50, (2, 12))
    assert net.training_flops(2, 20, 12) == pytest.approx(_counted(net, source, target), rel=0.05)

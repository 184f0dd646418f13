"""Towers: containers name them, a tower read at an inner layer keeps only the layers it reads,
old state-dict layouts still load, the audio embedder reports its own output padding, and a
layer that lacks a norm is built without it from per-layer data."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from exactness import assert_matches, randomise
from zoo.cli.describe import build
from zoo.convert.common import build_net, load_mapped
from zoo.models.encoder_decoder import FORMER_KEYS, EncoderDecoder
from zoo.models.model import Model
from zoo.nn.block import Block, BlockConfig
from zoo.nn.embedders import AudioEmbedder, PatchEmbedder, TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import NoMask
from zoo.nn.relative_bias import RelativePositionBias
from zoo.nn.stack import Stack
from zoo.nn.vision_towers import VisionTower

LLAVA_DIMS = {"vocab_size": 40, "image_token_id": 3, "prompt": "<image>", "metric": "exact_match"}
TINY_LLAVA = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=4",
              "model.net.block.d_ff=64", "model.net.embedder.vision.model.block.d_model=32",
              "model.net.embedder.vision.model.n_layers=3", "model.net.embedder.vision.model.embedder.patch_size=16"]


@pytest.mark.parametrize("model, names", [("gpt", ["decoder"]), ("bert", ["encoder"]), ("vit", ["encoder"]),
                                          ("t5", ["encoder", "decoder"]), ("whisper", ["encoder", "decoder"]),
                                          ("llava", ["decoder", "vision"]), ("llava_timm", ["decoder"])])
def test_containers_name_their_towers(model, names):
    _, net = build(model)
    assert list(net.towers) == names
    assert all(net.towers[name].name == name for name in names)


def _llava(seed: int = 0):
    torch.manual_seed(seed)
    return randomise(build_net("llava", TINY_LLAVA, LLAVA_DIMS), seed=seed)


def test_llava_vision_tower_keeps_only_the_layers_it_reads():
    net = _llava()
    vision = net.towers["vision"]
    assert len(vision.blocks) == 2 and vision.stack.norm is None  # feature_layer=-2 of 3 layers
    assert not [k for k in net.state_dict() if k.startswith(("embedder.vision.model.stack.blocks.2.",
                                                            "embedder.vision.model.stack.norm."))]
    # every parameter gets a gradient: plain DDP (no find_unused_parameters) works
    tokens = torch.tensor([[9] + [3] * net.embedder.n_image_tokens + [5, 6, 7]] * 2)
    net(tokens, images=torch.randn(2, 3, 32, 32)).sum().backward()
    assert [n for n, p in net.named_parameters() if p.grad is None] == []


def test_an_inner_layer_is_the_hidden_state_of_the_full_tower():
    block = BlockConfig(d_model=32, n_heads=2, d_ff=64)
    torch.manual_seed(0)
    full = Model(PatchEmbedder(32, 16, 32), NoMask(), block, 3, torch.nn.Identity(), context=1)
    seen = {}
    full.blocks[1].register_forward_hook(lambda m, a, out: seen.setdefault("h", out))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        full(images)
        cut = VisionTower(full, 32, feature_layer=-2, keep_cls=True)
        assert_matches(cut(images), seen["h"], what="layer 2 of 3")
        full.stack.drop_unread()
        assert len(full.blocks) == 2
        assert_matches(cut(images), seen["h"], what="layer 2 of 3, layer 3 dropped")


def test_checkpoints_holding_the_unread_layer_still_load():
    net, other = _llava(0), _llava(1)
    state = net.state_dict()
    old = dict(state)  # as written when the vision tower kept its last layer and final norm
    for key, value in list(state.items()):
        if key.startswith("embedder.vision.model.stack.blocks.1."):
            old[key.replace("blocks.1.", "blocks.2.")] = value.clone()
    old["embedder.vision.model.stack.norm.weight"] = torch.ones(32)
    old["embedder.vision.model.stack.norm.bias"] = torch.zeros(32)
    other.load_state_dict(old)  # strict: the unread layer's weights are skipped, nothing else
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in state.items())
    load_mapped(_llava(2), old)  # the converters' loader skips them too


def test_a_tower_that_reads_every_layer_refuses_extra_layers():
    net = build_net("gpt", ["model.net.n_layers=1", "model.net.context=16", "model.net.block.d_model=32",
                            "model.net.block.n_heads=2"], {"vocab_size": 50})
    state = net.state_dict()
    state |= {k.replace("blocks.0.", "blocks.1."): v for k, v in state.items() if k.startswith("stack.blocks.0.")}
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*stack\.blocks\.1\."):
        net.load_state_dict(state)


def _encoder_decoder(seed: int) -> EncoderDecoder:
    torch.manual_seed(seed)
    block = BlockConfig(d_model=32, n_heads=2, d_ff=64)
    return EncoderDecoder(TokenEmbedder(50, 32, 16), TokenEmbedder(50, 32, 16), block, 2, 1, LMHead(32, 50), 16,
                          encoder_bias=RelativePositionBias(2, bidirectional=True),
                          decoder_bias=RelativePositionBias(2, bidirectional=False))


def test_encoder_decoder_state_dicts_of_the_former_layout_load():
    net, other = _encoder_decoder(0), _encoder_decoder(1)
    state = net.state_dict()
    former = {}
    for key, value in state.items():
        old = next((o for o, n in FORMER_KEYS if key.startswith(n)), None)
        former[key if old is None else old + key.removeprefix(dict(FORMER_KEYS)[old])] = value
    assert {"encoder_embedder.tokens.weight", "encoder.blocks.0.attn.q.weight", "decoder.blocks.0.cross_attn.q.weight",
            "encoder_bias.embedding.weight", "decoder.norm.weight"} <= set(former)
    other.load_state_dict(former)
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in state.items())


@pytest.mark.parametrize("frames", [[7, 3, 6], [8, 8], [1, 5]])
def test_audio_embedder_reports_the_padding_of_its_output(frames):
    embedder = AudioEmbedder(n_mels=4, d_model=8, max_len=16)
    width = max(frames)
    padding = AudioEmbedder.output_padding(torch.arange(width)[None, :] < torch.tensor(frames)[:, None])
    assert padding.shape == (len(frames), embedder(torch.zeros(1, 4, width)).shape[1])
    for row, n in zip(padding, frames):  # the real vectors are those the conv makes from the real frames
        assert row.sum() == embedder(torch.zeros(1, 4, n)).shape[1] and row[: int(row.sum())].all()
    assert embedder.max_frames == 32 and embedder(torch.zeros(1, 4, embedder.max_frames)).shape[1] == 16


def test_a_layer_without_its_attention_norm_is_built_so_from_per_layer_data():
    block = BlockConfig(d_model=8, n_heads=2, d_ff=16)
    assert isinstance(Block(block, attn_norm=False).attn_norm, torch.nn.Identity)  # built so, not swapped after
    stack = Stack(block, 3, first_attn_norm=False)
    assert stack.attn_norms == [False, True, True]
    assert [isinstance(b.attn_norm, torch.nn.Identity) for b in stack.blocks] == [True, False, False]
    assert not any(k.startswith("blocks.0.attn_norm") for k in stack.state_dict())
    with pytest.raises(ValueError, match=r"without its attention norm \(first_attn_norm=false\) needs pre-LN"):
        Stack(replace(block, prenorm=False), 2, first_attn_norm=False)

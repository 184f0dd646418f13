"""The seed's claims as tests: the families differ only in the mask, the embedder, the head, the
Block preset, the positions and the container (docs/design.md), and the paper's base Transformer
has the paper's shapes and the parameter count its formula gives."""

import dataclasses
import re

import pytest

from zoo.cli.describe import describe
from zoo.convert.common import CONF_DIR, compose_config
from zoo.models.axes import AXES, axis_of, differences, group
from zoo.models.presets import DIMS, build, model_names
from zoo.nn.block import Block, BlockConfig

REFERENCE = "gpt"  # a family with no parent preset is compared with the zoo's first family
# Where each choice is made from: a family picks one of these, it adds no class of its own elsewhere.
CHOICES = {
    "mask": ("zoo.nn.masks.", "zoo.nn.sparse."),
    "embedder": ("zoo.nn.embedders.", "zoo.nn.multimodal.", "zoo.nn.detection.", "zoo.nn.audio_conv."),
    "head": ("zoo.nn.heads.", "zoo.nn.detection.", "zoo.nn.attention_pool.", "torch.nn.Identity", "torch.nn.Linear"),
}
CONTAINERS = {"zoo.models.model.Model", "zoo.models.encoder_decoder.EncoderDecoder", "zoo.models.staged.Staged",
              "zoo.models.two_tower.TwoTower"}
FIXED_MASKS = ("EncoderDecoder", "Staged")  # containers whose masks they build themselves


def parent(model: str) -> str:
    """The preset a model file is written over (its ``defaults`` name another model file), else REFERENCE."""
    text = (CONF_DIR / "model" / f"{model}.yaml").read_text()
    defaults = re.search(r"^defaults:\n((?:\s+-.*\n)+)", text, re.M)
    entries = [line.split("-", 1)[1].split("#")[0].strip() for line in defaults.group(1).splitlines()] if defaults else []
    named = [e for e in entries if e in model_names()]
    return named[0] if named else REFERENCE


def net_config(model: str):
    return compose_config([f"model={model}"]).model.net


@pytest.mark.parametrize("model", model_names())
def test_a_family_differs_from_its_base_only_along_the_axes(model):
    base = parent(model)
    diff = differences(net_config(base), net_config(model))  # axis_of refuses a key outside the axes
    assert set(diff) <= set(AXES)
    if model != base:
        assert diff, f"model={model} is its base {base} again"
    blocks = group(net_config(model))["block"]
    fields = {f.name for f in dataclasses.fields(BlockConfig)} | {"_target_"}
    # (a two-tower model's vision tower has its own Block: vision.block.*)
    assert {key.removeprefix("vision.").split(".")[1] for key in blocks} <= fields, \
        "a Block preset sets only BlockConfig's knobs"
    assert blocks["block._target_"] == "zoo.nn.block.BlockConfig"


@pytest.mark.parametrize("model", model_names())
def test_each_choice_is_one_of_the_zoos_masks_embedders_and_heads(model):
    grouped = group(net_config(model))
    assert grouped["container"]["_target_"] in CONTAINERS
    for axis, modules in CHOICES.items():
        targets = [v for k, v in grouped[axis].items() if k.count(".") == 1 and k.endswith("._target_")]
        if axis == "mask" and grouped["container"]["_target_"].endswith(FIXED_MASKS):
            assert not targets  # fixed by the container: the encoder's padding, the decoder's causal mask; each
            continue            # stage's shifted windows over its own grid (Staged: its window, an int)
        assert targets, f"model={model} chooses no {axis}"
        assert all(t.startswith(modules) for t in targets), (axis, targets)


def test_axes_group_every_key_and_refuse_an_unknown_one():
    assert [axis_of(k) for k in ("mask.window", "embedder.vision.model.n_layers", "embedder.positions",
                                 "decoder_embedder.positions", "head.scale", "block.norm", "rotary_base",
                                 "encoder_bias.num_buckets", "n_layers", "text_pool", "vision.block.d_model",
                                 "vision.embedder.positions", "vision.n_layers")] == [
        "mask", "embedder", "positions", "positions", "head", "block", "positions", "positions", "container", "head",
        "block", "positions", "container"]
    with pytest.raises(ValueError, match="model.net.adapter.rank belongs to none of the axes"):
        axis_of("adapter.rank")


@pytest.mark.parametrize("preset, base", [("gpt2_small", "gpt"), ("transformer_base", "transformer"),
                                          ("gpt_neo", "gpt")])
def test_describe_shows_what_the_axes_say(preset, base):
    """The family table (``python -m zoo describe``) changes in a column only where the config
    changed along that axis: a size preset keeps its base's mask, embedder, head, Block preset."""
    diff = differences(net_config(base), net_config(preset))
    ours, theirs = describe(preset), describe(base)
    columns = {"mask": "mask", "embedder": "embedder", "head": "head", "positions": "positions"}
    for axis, column in columns.items():
        if axis not in diff:
            assert ours[column] == theirs[column], (axis, ours[column], theirs[column])
    if "mask" in diff:
        assert ours["mask"] != theirs["mask"]


def test_the_paper_base_transformer():
    """d_model 512, 8 heads of 64, FFN 2048, 6 + 6 layers, post-LN; its parameters are the
    formula's: one shared (tied) embedding, and per layer attention, FFN and LayerNorms."""
    cfg, net = build("transformer_base")
    d, heads, d_ff, vocab = 512, 8, 2048, DIMS["vocab_size"]
    assert (cfg.net.block.d_model, cfg.net.block.n_heads, cfg.net.block.d_ff) == (d, heads, d_ff)
    encoder, decoder = net.towers["encoder"], net.towers["decoder"]
    assert len(encoder.stack.blocks) == len(decoder.stack.blocks) == 6
    block: Block = decoder.stack.blocks[0]
    assert block.attn.n_heads == heads and block.attn.d_head == 64 and not block.prenorm
    assert block.cross_attn is not None and encoder.stack.blocks[0].cross_attn is None

    attention = 4 * (d * d + d)  # q, k, v, out: weight and bias each
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm  # + cross-attention and its norm
    embedding = vocab * d  # shared by source, target and the output projection; sinusoidal positions
    expected = embedding + 6 * encoder_layer + 6 * decoder_layer
    assert sum(p.numel() for p in net.parameters()) == expected
    # with the paper's shared 37,000-token vocabulary: 63.1M (the paper's table rounds its count to 65M)
    assert round((expected - embedding + 37_000 * d) / 1e6, 1) == 63.1

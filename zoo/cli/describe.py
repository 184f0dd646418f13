"""The family table, generated from the configs: every `model=` as a choice of
embedder, mask and head over the same Block.

    python -m zoo describe              # the Markdown table in the README
    python -m zoo describe model=beit   # one preset: its row, and every Block knob it sets
    python -m zoo describe masks=DIR    # and PNGs of each family's attention masks
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from zoo.models.presets import DIMS, build, model_names
from zoo.nn.block import BlockConfig
from zoo.nn.knobs import KNOBS, PARTS, knob_words
from zoo.nn.tower import outer_towers
from zoo.train.compat import model_data_table
from zoo.viz.mask_pictures import write_mask_pictures


def _name(obj) -> str:
    return type(obj).__name__


def _mask(mask) -> str:
    """A mask and its settings, e.g. ``LocalMask(32, True)``."""
    settings = ", ".join(str(v) for v in vars(mask).values())
    return f"{_name(mask)}({settings})" if settings else _name(mask)


def _masks(tower) -> str:
    """A tower's mask, or its distinct per-layer masks in order of first use."""
    names = [_mask(m) for m in dict.fromkeys(tower.layer_masks)]
    return names[0] if len(names) == 1 else " / ".join(names) + " (per layer)"


def _pattern(tower) -> str:
    """The per-layer pattern: the shortest run of masks that repeats over the layers, and how often."""
    masks = tower.layer_masks
    period = next(p for p in range(1, len(masks) + 1) if all(m == masks[i % p] for i, m in enumerate(masks)))
    if period == 1:
        return f"{len(masks)} x same"
    repeats, rest = divmod(len(masks), period)
    return f"[{', '.join(_name(m) for m in masks[:period])}] x {repeats}" + (f" + {rest}" if rest else "")


# The Block column: every knob a preset turns, in its own words (zoo.nn.knobs); the Block's size is
# the parameter count's column.
KIND_PARTS = tuple(part for part in PARTS if part != "shape")


def block_config(cfg: DictConfig) -> BlockConfig:
    """The preset's Block config, resolved (``cfg``: the model config, its dims given)."""
    return BlockConfig(**{k: v for k, v in OmegaConf.to_container(cfg.net.block, resolve=True).items()
                          if k != "_target_"})


def _positions(net: torch.nn.Module) -> str:
    kinds = []
    for m in net.modules():
        kind = {"LearnedPositions": "learned", "SinusoidalPositions": "sinusoidal",
                "RotaryEmbedding": "rotary", "RelativePositionBias": "relative bias",
                "WindowRelativeBias": "2-D relative bias",
                "ALiBi": "alibi"}.get(_name(m))
        if kind and kind not in kinds:
            kinds.append(kind)
    return " + ".join(kinds) or "none"


def describe(model: str) -> dict[str, str]:
    """One row of the family table, from the network's towers: FLOPs at the full length of each
    outer tower (an encoder-decoder's source and target), per position of the last (of two towers
    side by side: per pair)."""
    cfg, net = build(model)
    towers = net.towers
    total = sum(p.numel() for p in net.parameters())
    # (an encoder and a decoder may share one token embedding: count it once)
    embedding = sum(p.numel() for p in {id(p): p for t in towers.values() for p in t.embedder.parameters()}.values())
    if len(towers) == 1:
        mask, pattern = _masks(*towers.values()), _pattern(*towers.values())
    else:
        mask = "; ".join(f"{name}: {_masks(t)}{' + cross' if t.cross_attention else ''}" for name, t in towers.items())
        pattern = "; ".join(f"{name}: {_pattern(t)}" for name, t in towers.items())
    outer = outer_towers(net).values()
    # each outer tower at its full length: its embedder's, or the tower's own context (a two-tower
    # model's vision tower: its positions), else the container's
    lengths = [getattr(t.embedder, "max_len", None) or getattr(t, "context", net.context) for t in outer]
    # per position of one tower, per target token of an encoder-decoder, per (text, image) pair of two towers
    per = "position" if len(lengths) == 1 else "target token" if any(t.cross_attention for t in towers.values()) \
        else "pair"
    flops = net.training_flops(1, *lengths) / (1 if per == "pair" else lengths[-1])
    heads = [t.head for t in outer if hasattr(t, "head")] or [net.head]  # an encoder-decoder's is the container's
    return {
        "model": model,
        "embedder": " / ".join(_name(t.embedder) for t in towers.values()),
        "mask": mask,
        "layers": pattern,
        "head": " / ".join(_name(h) for h in heads),
        "block": ", ".join(knob_words(block_config(cfg), KIND_PARTS)),
        "positions": _positions(net),
        "params (embedders / rest)": f"{embedding / 1e6:.2f}M / {(total - embedding) / 1e6:.2f}M",
        "train FLOPs": f"{flops / 1e6:.1f}M per {per}",
    }


def table() -> str:
    rows = [describe(m) for m in model_names()]
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r[h] for h in header) + " |" for r in rows]
    return "\n".join(lines)


def card(model: str) -> str:
    """One preset as text: its row of the family table, then every Block knob it sets away from the
    default (its size too), each with its value and its part of the Block (:mod:`zoo.nn.knobs`)."""
    row = describe(model)
    block = block_config(build(model)[0])
    defaults = {f.name: f.default for f in fields(BlockConfig)}
    turned = [(name, getattr(block, name), knob) for name, knob in KNOBS.items()
              if getattr(block, name) != defaults[name]]
    width = max(map(len, row))
    lines = [f"{key:<{width}}  {value}" for key, value in row.items()]
    lines.append("\nBlock knobs set away from their defaults (zoo.nn.knobs; docs/design.md's knob table):")
    lines += [f"  {name:<14} {value!s:<10} {knob.part}: {knob.words(value)}" for name, value, knob in turned]
    return "\n".join(lines)


def chosen_model() -> str:
    """The preset a running ``describe model=NAME`` names (its Hydra choice)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.choices["model"]


def main(cfg: DictConfig) -> None:
    """``zoo describe [model=NAME] [masks=DIR]`` (conf/describe.yaml): print the table, or one preset's
    card (``model``); with ``masks``, write the pictures."""
    if "model" in cfg:
        print(card(chosen_model()))
        return
    print(f"Vocabulary {DIMS['vocab_size']}, {DIMS['num_classes']} classes, {DIMS['image_size']}px images and "
          f"{DIMS['num_frames']}-frame clips stand in for the data; FLOPs are forward + backward at the full context\n"
          "(encoder-decoders: at the full source and target lengths, per target token; two towers side by side:\n"
          "per (text, image) pair).\n")
    print(table())
    print(f"\n{model_data_table()}")
    if cfg.masks:
        for path in write_mask_pictures(Path(cfg.masks)):
            print(f"wrote {path}")

"""The family table, generated from the configs: every `model=` as a choice of
embedder, mask and head over the same Block.

    python -m zoo.cli.describe              # the Markdown table in the README
    python -m zoo.cli.describe --masks DIR  # PNGs of each family's attention masks
"""

from __future__ import annotations

import argparse
from pathlib import Path

import hydra
import torch
from omegaconf import open_dict

from zoo.convert.common import CONF_DIR, compose_config
from zoo.train.compat import model_data_table

# What the data would tell each model at start-up; the table uses these stand-ins.
DIMS = {"vocab_size": 32000, "num_classes": 10, "image_size": 32, "channels": 3, "num_frames": 8, "pad_id": 0, "bos_id": 1,
        "eos_id": 2, "mask_id": 3, "image_token_id": 4, "special_ids": [0, 1, 2, 3, 4], "metric": "exact_match",
        "prompt": ""}


def model_names() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))


def build(model: str) -> tuple[dict, torch.nn.Module]:
    """(the model's config, its network built on the meta device: shapes only, no memory)."""
    cfg = compose_config([f"model={model}"])
    with open_dict(cfg):
        cfg.dims = DIMS
    with torch.device("meta"):
        net = hydra.utils.instantiate(cfg.model.net)
    return cfg.model, net


def _name(obj) -> str:
    return type(obj).__name__


def _masks(stack) -> str:
    """A stack's mask, or its distinct per-layer masks in order of first use."""
    names = [_name(m) for m in dict.fromkeys(stack.layer_masks)]
    return names[0] if len(names) == 1 else " / ".join(names) + " (per layer)"


def _block_preset(cfg) -> str:
    b = cfg.net.block
    act = ("gated " if b.gated else "") + b.activation
    return f"{'pre' if b.prenorm else 'post'}-{'LN' if b.norm == 'layernorm' else 'RMSNorm'}, {act}"


def _positions(net: torch.nn.Module) -> str:
    kinds = []
    for m in net.modules():
        kind = {"LearnedPositions": "learned", "SinusoidalPositions": "sinusoidal",
                "RotaryEmbedding": "rotary", "RelativePositionBias": "relative bias"}.get(_name(m))
        if kind and kind not in kinds:
            kinds.append(kind)
    return " + ".join(kinds) or "none"


def describe(model: str) -> dict[str, str]:
    """One row of the family table."""
    cfg, net = build(model)
    total = sum(p.numel() for p in net.parameters())
    embedders = [m for name, m in net.named_children() if name.endswith("embedder")]
    # (an encoder and a decoder may share one token embedding: count it once)
    embedding = sum(p.numel() for p in {id(p): p for e in embedders for p in e.parameters()}.values())
    if hasattr(net, "encoder"):  # encoder-decoder
        mask = f"enc: {_masks(net.encoder)}; dec: {_masks(net.decoder)} + cross"
        length = net.context
        source = getattr(net.encoder_embedder, "max_len", length)  # e.g. Whisper's 1500 audio frames
        flops = net.training_flops(1, source, length) / length
        unit = "target token"
    else:
        mask = _masks(net.stack)
        length = getattr(embedders[0], "max_len", None) or net.context
        flops = net.training_flops(1, length) / length
        unit = "position"
    return {
        "model": model,
        "embedder": " / ".join(_name(e) for e in embedders),
        "mask": mask,
        "head": _name(net.head),
        "block": _block_preset(cfg),
        "positions": _positions(net),
        "params (embedders / rest)": f"{embedding / 1e6:.2f}M / {(total - embedding) / 1e6:.2f}M",
        "train FLOPs": f"{flops / 1e6:.1f}M per {unit}",
    }


def table() -> str:
    rows = [describe(m) for m in model_names()]
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r[h] for h in header) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--masks", type=Path, help="write each family's mask pictures into this folder")
    args = parser.parse_args()
    print(f"Vocabulary {DIMS['vocab_size']}, {DIMS['num_classes']} classes, {DIMS['image_size']}px images and "
          f"{DIMS['num_frames']}-frame clips stand in for the data; FLOPs are forward + backward at the full context\n"
          "(encoder-decoders: at the full source and target lengths, per target token).\n")
    print(table())
    print(f"\n{model_data_table()}")
    if args.masks:
        from zoo.viz.mask_pictures import write_mask_pictures

        for path in write_mask_pictures(args.masks):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()

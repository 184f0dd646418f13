"""The dimensions a container hands its embedder and head.

Only the container knows the width its parts run at: a tower's is its Block's ``d_model``, a Swin
net's head reads the last stage's, twice or four times the first. So a family config gives its
embedder and head as Hydra partials (``_partial_: true``, as timm passes ``norm_layer``) without
those numbers, and the container calls them with its own: a number is stated once, in the Block.

    embedder:                       # built as TokenEmbedder(..., d_model=block.d_model,
      _target_: zoo.nn.embedders.TokenEmbedder      #             dropout=block.dropout)
      _partial_: true
      vocab_size: ${dims.vocab_size}
      max_len: ${..context}

A part that sets one of these itself keeps its own (GPT-Neo's embedding dropout is not its
Block's). A built module is taken as it is: Python callers, and checkpoints written before the
dimensions flowed down, whose configs state them in each part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from torch import nn

from zoo.nn.block import BlockConfig

Part = nn.Module | Callable[..., nn.Module]
PART_DIMS = ("d_model", "dropout")  # what a container may hand a part (an embedder: both; a head: d_model)


def part_kind(key: str) -> str | None:
    """What the net config key ``key`` (a path under the net, e.g. ``vision.embedder``) names:
    ``embedder`` (``embedder``, ``encoder_embedder``, ...), ``head``, or None (not a part)."""
    name = key.rsplit(".", 1)[-1]
    return "embedder" if name.endswith("embedder") else "head" if name == "head" else None


def build_part(part: Part, **dims: Any) -> nn.Module:
    """``part`` as a module: a built one as it is, a partial called with each of ``dims`` it
    does not set itself."""
    if isinstance(part, nn.Module):
        return part
    if not isinstance(part, partial):
        raise TypeError(f"{part!r}: an embedder or head is a module, or a partial of one (_partial_: true)")
    return part(**{name: value for name, value in dims.items() if name not in part.keywords})


def embedder_dims(block: BlockConfig) -> dict[str, Any]:
    """What a tower hands its embedder: the Block's width and its residual dropout."""
    return {"d_model": block.d_model, "dropout": block.dropout}


def build_embedder(embedder: Part, block: BlockConfig) -> nn.Module:
    """The embedder at the tower's width and dropout."""
    return build_part(embedder, **embedder_dims(block))


def build_head(head: Part, d_model: int) -> nn.Module:
    """The head reading vectors of width ``d_model``."""
    return build_part(head, d_model=d_model)


def with_dims(net: Mapping[str, Any]) -> dict[str, Any]:
    """A stored net config (plain data) with what a one-width container hands its partial parts
    written into them, as the built net has them, in it and in the towers inside it (CLIP's
    ``vision``): what an exporter reads (``embedder.dropout``) without building the net. A key a
    part sets itself is kept; Swin's head (its width is the last stage's) is left as it is."""
    block = net.get("block") or {}
    out = {}
    for key, value in net.items():
        if isinstance(value, Mapping) and "block" in value:
            value = with_dims(value)
        elif isinstance(value, Mapping) and value.get("_partial_") and "d_model" in block:
            if part_kind(key) == "embedder":
                value = {"d_model": block["d_model"], "dropout": block.get("dropout", 0.0)} | dict(value)
            elif part_kind(key) == "head" and "depths" not in net:
                value = {"d_model": block["d_model"]} | dict(value)
        out[key] = value
    return out

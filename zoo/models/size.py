"""The size of a network config's parameters, counted before anything is allocated, and the
refusal of one that does not fit: ``n_layers: 1000000`` or ``vocab_size: 10**12`` in a folder's
``config.json``, a checkpoint's stored config or an override would otherwise build until memory
runs out.

The net is built on the meta device (shapes, no storage). A stack of more than
:data:`BUILT_LAYERS` layers is built with 2 and 3 layers and extrapolated (every layer of a stack
has the same parameters), so that a million layers cost two small builds. The limit is the
machine's memory, or ``ZOO_MAX_PARAM_BYTES`` (bytes, e.g. ``2e9``) where it is set."""

from __future__ import annotations

import os
from typing import Any

import hydra
import torch

LIMIT_ENV = "ZOO_MAX_PARAM_BYTES"
LAYER_KEYS = ("n_layers", "n_encoder_layers", "n_decoder_layers")  # every layer count a zoo net config has
BUILT_LAYERS = 8  # stacks up to this many layers are built as they are


def _layer_counts(node: Any, path: str = "") -> dict[str, int]:
    """``{dotted key: value}`` of every layer count in a net config (a vision tower's too)."""
    found = {}
    for key, value in node.items() if isinstance(node, dict) else ():
        if isinstance(value, dict):
            found |= _layer_counts(value, f"{path}{key}.")
        elif key in LAYER_KEYS and isinstance(value, int):
            found[f"{path}{key}"] = value
    return found


def _with(node: Any, values: dict[str, int], path: str = "") -> Any:
    """A copy of the config ``node`` with ``values`` (dotted keys) in place."""
    if not isinstance(node, dict):
        return node
    return {k: values.get(f"{path}{k}", _with(v, values, f"{path}{k}.")) for k, v in node.items()}


def _shapes(net_cfg: dict[str, Any]) -> dict[str, tuple[torch.Size, int]]:
    """``{name: (shape, bytes)}`` of every parameter and buffer of the net, built on the meta device."""
    with torch.device("meta"):
        net = hydra.utils.instantiate(net_cfg)
    tensors = dict(net.named_parameters()) | dict(net.named_buffers())
    return {name: (t.shape, t.numel() * t.element_size()) for name, t in tensors.items()}


def _ints(node: Any, path: str = "") -> dict[str, int]:
    """Every whole number in a net config, by dotted key (the sizes a refusal can name)."""
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _ints(value, f"{path}{key}.").items()}
    return {path.rstrip("."): node} if isinstance(node, int) and not isinstance(node, bool) else {}


def limit() -> tuple[int, str]:
    """(the most bytes of parameters a net may hold, where that number comes from)."""
    if os.environ.get(LIMIT_ENV):
        try:
            return int(float(os.environ[LIMIT_ENV])), LIMIT_ENV
        except ValueError:
            raise ValueError(f"{LIMIT_ENV}={os.environ[LIMIT_ENV]!r} is not a number of bytes") from None
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's memory"


def check(net_cfg: dict[str, Any], where: str) -> None:
    """Refuse ``net_cfg`` (a resolved net config, as checkpoints store it) whose parameters and
    buffers would take more bytes than :func:`limit`, naming the key that makes it so big.
    A config that does not build on the meta device is left to the real build to refuse."""
    layers = {k: v for k, v in _layer_counts(net_cfg).items() if v > BUILT_LAYERS}
    try:
        base = _shapes(_with(net_cfg, {k: 2 for k in layers}))
        per_layer = {k: sum(b for _, b in _shapes(_with(net_cfg, {j: 3 if j == k else 2 for j in layers})).values())
                     - sum(b for _, b in base.values()) for k in layers}
    except Exception:  # noqa: BLE001 (the real build names what is wrong with the config)
        return
    total = sum(b for _, b in base.values()) + sum((layers[k] - 2) * per_layer[k] for k in layers)
    most, source = limit()
    if total <= most:
        return
    name, (shape, size) = max(base.items(), key=lambda item: item[1][1])
    deepest = max(layers, key=lambda k: layers[k] * per_layer[k], default=None)
    if deepest is not None and layers[deepest] * per_layer[deepest] > size:
        culprit = f"{deepest}={layers[deepest]} ({per_layer[deepest]:,} bytes a layer)"
    else:
        keys = [f"{k}={v}" for k, v in _ints(net_cfg).items() if shape and v == max(shape)]
        culprit = f"{name} of shape {tuple(shape)}" + (f", from {', '.join(keys)}" if keys else "")
    raise ValueError(f"{where}: the network would hold {total / 1e9:,.1f} GB of parameters, more than "
                     f"{most / 1e9:,.1f} GB ({source}); the largest part: {culprit}. Give it a size that fits, or "
                     f"set {LIMIT_ENV}=<bytes> to allow more")

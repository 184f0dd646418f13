"""What a model config chooses, grouped into the axes families differ along (docs/design.md):
the mask, the embedder, the head, the Block preset, the positions, and the container (how many
layers, how long a context, which of the two containers). Every key of a ``model.net`` config
belongs to exactly one axis, its container argument's (:mod:`zoo.models.arguments`, where each
argument says its axis); a key that belongs to none is refused, so a family that varies in
some other way is seen at once. :func:`differences` is what two configs differ in, by axis; over a
whole training config (``python -m zoo diff``, a study's one-axis check) every key outside
``model.net`` is one more group, ``training`` (:func:`config_axis`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from zoo.models.arguments import ARGUMENTS, NET

AXES = ("mask", "embedder", "head", "block", "positions", "container")
# The groups of a whole training config: the axes, and what trains the network (data, optimiser,
# trainer, budget, seed, the objective's other arguments).
GROUPS = (*AXES, "training")
# The first part of a key under ``model.net`` -> its axis: each container argument's own
# (zoo.models.arguments), and Hydra's ``_target_``, which picks the container.
_AXIS_OF_TOP = {"_target_": "container"} | {name: a.axis for name, a in ARGUMENTS.items() if a.axis != NET}


def axis_of(key: str) -> str:
    """The axis of a dotted key under ``model.net`` (``block.d_model`` -> ``block``); positions added
    by an embedder (``embedder.positions``, ``encoder_embedder.positions``) are ``positions``. A
    two-tower model's second tower (``vision.*``) is a net of its own: its keys are on its axes
    (``vision.block.d_model`` -> ``block``)."""
    top, _, rest = key.partition(".")
    if top in ARGUMENTS and ARGUMENTS[top].axis == NET and rest:
        return axis_of(rest)
    if top not in _AXIS_OF_TOP:
        raise ValueError(f"model.net.{key} belongs to none of the axes {AXES}: name its axis in "
                         "zoo/models/arguments.py")
    axis = _AXIS_OF_TOP[top]
    return "positions" if axis == "embedder" and rest.split(".")[0] == "positions" else axis


def config_axis(key: str) -> str:
    """The group of a dotted key of a whole training config: under ``model.net`` its axis
    (:func:`axis_of`), any other key ``training``."""
    return axis_of(key.removeprefix("model.net.")) if key.startswith("model.net.") else "training"


def flat(net_cfg: DictConfig | dict, prefix: str = "") -> dict[str, Any]:
    """A net config's leaves by dotted key, unresolved (``${..block.d_model}`` stays as written);
    a list (a ``PerLayer`` pattern) is one leaf."""
    tree = OmegaConf.to_container(net_cfg, resolve=False) if isinstance(net_cfg, DictConfig) else net_cfg
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def group(net_cfg: DictConfig | dict) -> dict[str, dict[str, Any]]:
    """A net config's leaves, by axis: {axis: {key: value}} (every axis present, maybe empty)."""
    grouped: dict[str, dict[str, Any]] = {axis: {} for axis in AXES}
    for key, value in flat(net_cfg).items():
        grouped[axis_of(key)][key] = value
    return grouped


def differences(a: DictConfig | dict, b: DictConfig | dict,
                axis: Callable[[str], str] = axis_of) -> dict[str, list[str]]:
    """The keys whose values differ between two net configs (or that one of them lacks), by axis;
    axes with no difference are left out. ``axis=config_axis`` for two whole training configs."""
    fa, fb = flat(a), flat(b)
    missing = object()
    changed = sorted(k for k in fa.keys() | fb.keys() if fa.get(k, missing) != fb.get(k, missing))
    out: dict[str, list[str]] = {}
    for key in changed:
        out.setdefault(axis(key), []).append(key)
    return out

"""Rebuilding a zoo checkpoint's objective (what every command that runs a checkpoint does), and
the check before a run resumes from one. Both read the file through :func:`zoo.checkpoint.read`
(untrusted data: checked against :mod:`zoo.registry` before anything is built from it)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from zoo.checkpoint import read
from zoo.models.size import check as check_size
from zoo.registry import OBJECTIVES, name_of, objective_class, objective_name

if TYPE_CHECKING:
    from zoo.objectives.base import Objective

# ckpt_path values Lightning resolves itself to a checkpoint this run's callbacks wrote.
LIGHTNING_CKPT_NAMES = ("last", "best", "hpc")


def _class_name(objective: str) -> str:
    return OBJECTIVES[objective].rsplit(".", 1)[-1]


def load(path: str | Path, map_location: str | torch.device = "cpu", accepts: Collection[str] | None = None,
         command: str = "this command") -> Objective:
    """Rebuild the Lightning objective stored in ``path``, on ``map_location``, in eval mode.

    ``accepts``: the objectives (short names) ``command`` can use; another is refused, naming both.
    """
    ckpt = read(path, map_location=map_location)
    name = objective_name(ckpt["zoo_objective"])
    if accepts is not None and name not in accepts:
        raise ValueError(f"{path} is a {name} checkpoint ({_class_name(name)}): {command} needs "
                         f"{' or '.join(accepts)}")
    net = ckpt["hyper_parameters"].get("net")
    if isinstance(net, dict):
        check_size(net, f"checkpoint {path} (its stored model.net)")  # before anything is allocated
    objective = objective_class(name)(**ckpt["hyper_parameters"])
    objective.load_state_dict(ckpt["state_dict"])
    return objective.to(map_location).eval()


def family(net: dict) -> str:
    """A network config in short: its class and those of its parts, e.g.
    ``Model(embedder=TokenEmbedder, head=LMHead, mask=CausalMask)`` (the Block's config left out:
    every family has one)."""
    def short(target: object) -> str:
        return str(target).rsplit(".", 1)[-1]

    parts = [f"{key}={short(value['_target_'])}" for key, value in sorted(net.items())
             if isinstance(value, dict) and "_target_" in value and key != "block"]
    return f"{short(net.get('_target_'))}({', '.join(parts)})"


def check_resumable(path: str | Path | None, model: Objective) -> None:
    """Before a run resumes from ``path`` (``ckpt_path``): the file names nothing outside the
    registry, holds the configured objective and network family, and every weight of ``model``
    is there in its shape; otherwise say what the checkpoint holds and what the config builds."""
    if path is None or str(path) in LIGHTNING_CKPT_NAMES:
        return
    ckpt = read(path)
    held, wanted = objective_name(ckpt["zoo_objective"]), name_of(type(model))
    held_net, wanted_net = family(ckpt["hyper_parameters"].get("net") or {}), family(model.hparams.net)
    if (held, held_net) != (wanted, wanted_net):
        raise ValueError(f"ckpt_path={path} holds a {held} checkpoint ({_class_name(held)}, {held_net}), but "
                         f"this run trains {wanted} ({_class_name(wanted)}, {wanted_net}): resume with the "
                         f"model= of the run that wrote it")
    # checkpoints written before forward_net left the module tree hold the net twice: count each weight once
    stored, own = ({k: v for k, v in state.items() if not k.startswith("forward_net.")}
                   for state in (ckpt["state_dict"], model.state_dict()))
    missing, unexpected = sorted(own.keys() - stored.keys()), sorted(stored.keys() - own.keys())
    reshaped = [f"{k}: {tuple(stored[k].shape)} in the checkpoint, {tuple(own[k].shape)} configured"
                for k in sorted(own.keys() & stored.keys())
                if getattr(stored[k], "shape", None) is not None and stored[k].shape != own[k].shape]
    problems = [f"{len(names)} {what} (e.g. {', '.join(names[:3])})" for names, what in (
        (missing, "weights it lacks"), (unexpected, "weights the model has not"), (reshaped, "of another shape"))
        if names]
    if problems:
        raise ValueError(f"ckpt_path={path} holds a {held} {held_net} of other sizes than configured: "
                         f"{'; '.join(problems)}. Resume with the overrides of the run that wrote it")

"""Reading zoo checkpoints (the .ckpt files train.py writes): the whole objective for
inference, just the network's weights or the tokenizer to start another run from, or the
check before a run resumes from one.

A checkpoint is untrusted data: every reader goes through :func:`read`, which unpickles
tensors and plain containers only (``weights_only=True``) and refuses a file that names
anything outside :mod:`zoo.registry` (its objective, a ``_target_`` or a ``converter``)
before anything is built from it.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from zoo.models.size import check as check_size
from zoo.registry import (ALLOWED_CONVERTERS, ALLOWED_TARGETS, FORMER_TARGETS, OBJECTIVES, name_of, objective_class,
                          objective_name)

if TYPE_CHECKING:
    from zoo.objectives.base import Objective

# ckpt_path values Lightning resolves itself to a checkpoint this run's callbacks wrote.
LIGHTNING_CKPT_NAMES = ("last", "best", "hpc")
ZIP_MAGIC, PICKLE_MAGIC = b"PK\x03\x04", b"\x80"  # how torch.save's files begin (zip; legacy pickle)


def _check_config(node: Any, where: str, path: Path) -> None:
    """Refuse a ``_target_`` outside the allow-list, or an interpolation (``${...}``: a resolver
    such as ``oc.decode`` could build a ``_target_`` after this check), anywhere in ``node``.
    A former name (:data:`zoo.registry.FORMER_TARGETS`) is rewritten, in place, to today's."""
    if isinstance(node, dict):
        target = node.get("_target_")
        if isinstance(target, str) and target in FORMER_TARGETS:
            target = node["_target_"] = FORMER_TARGETS[target]
        if "_target_" in node and not (isinstance(target, str) and target in ALLOWED_TARGETS):
            raise ValueError(f"checkpoint {path}: {where}._target_={target!r} is not a class a zoo checkpoint "
                             f"may build; allowed: {sorted(ALLOWED_TARGETS)}")
        for key, value in node.items():
            _check_config(value, f"{where}.{key}", path)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _check_config(value, f"{where}[{i}]", path)
    elif isinstance(node, str) and "${" in node:
        raise ValueError(f"checkpoint {path}: {where}={node!r} is an interpolation; a zoo checkpoint stores "
                         f"resolved configs only")


def check_names(ckpt: dict, path: Path) -> None:
    """Refuse a checkpoint that names anything the zoo does not register: its objective (a short
    name of :data:`zoo.registry.OBJECTIVES`), every ``_target_`` in its stored configs and its
    ``converter``. Checks what the file holds of these (a bare ``state_dict`` names nothing)."""
    if "zoo_objective" in ckpt:
        try:
            objective_name(ckpt["zoo_objective"])
        except ValueError as err:
            raise ValueError(f"checkpoint {path}: {err}") from None
    hparams = ckpt.get("hyper_parameters", {})
    if not isinstance(hparams, dict):
        raise ValueError(f"checkpoint {path}: hyper_parameters is a {type(hparams).__name__}, not a dict")
    converter = hparams.get("converter")
    if converter is not None and not (isinstance(converter, str) and converter in ALLOWED_CONVERTERS):
        raise ValueError(f"checkpoint {path}: hyper_parameters.converter={converter!r} is not a function a zoo "
                         f"checkpoint may call; allowed: {sorted(ALLOWED_CONVERTERS)}")
    # The tokenizer's state is vocabulary (any text), never given to Hydra or OmegaConf.
    _check_config({k: v for k, v in hparams.items() if k != "tokenizer"}, "hyper_parameters", path)


def read(path: str | Path, needs: tuple[str, ...] = ("zoo_objective", "hyper_parameters", "state_dict"),
         map_location: str | torch.device = "cpu") -> dict:
    """The checkpoint's dict, read with ``weights_only=True`` (tensors and plain containers
    only, never arbitrary pickled code) and refused if it names anything outside
    :mod:`zoo.registry` (:func:`check_names`); a missing or unreadable file, or one without
    the entries it ``needs``, names itself."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    _refuse_other_files(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise RuntimeError(f"checkpoint {path} could not be read (truncated or damaged?): {err}") from err
    if not isinstance(ckpt, dict):
        raise RuntimeError(f"{path} is not a zoo checkpoint (it holds a {type(ckpt).__name__}, not a dict)")
    missing = [key for key in needs if key not in ckpt]
    if missing:
        raise RuntimeError(f"{path} is not a zoo checkpoint (no {missing} entry)")
    check_names(ckpt, path)
    _check_tokenizer(ckpt, path)
    return ckpt


def _refuse_other_files(path: Path) -> None:
    """Refuse a file ``torch.save`` did not write (an empty file, a text file) as what it is:
    its files are zip archives, or pickles in the legacy format."""
    with path.open("rb") as file:
        head = file.read(4)
    if not head:
        raise RuntimeError(f"not a checkpoint: {path} (an empty file)")
    if not head.startswith((ZIP_MAGIC, PICKLE_MAGIC)):
        raise RuntimeError(f"not a checkpoint: {path} (a file of {path.stat().st_size} bytes torch.save did not "
                           f"write: it starts with {head!r})")


def _check_tokenizer(ckpt: dict, path: Path) -> None:
    """A stored tokenizer state must rebuild (every command that reads the checkpoint decodes with it)."""
    from zoo.data.tokenizers import tokenizer_from_state

    state = ckpt.get("hyper_parameters", {}).get("tokenizer")
    if state is None:
        return
    try:
        if not isinstance(state, dict):
            raise ValueError(f"a {type(state).__name__}, not a dict")
        tokenizer_from_state(state)
    except Exception as err:  # a missing entry, a vocabulary tokenizers cannot parse: the part is what matters
        raise ValueError(f"checkpoint {path}: hyper_parameters.tokenizer is not a tokenizer the zoo can rebuild "
                         f"({type(err).__name__}: {err})") from None


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
    # forward_net is the same network again (or its compiled wrapper): count each weight once
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


def net_state(path: str | Path) -> dict[str, Tensor]:
    """The network's weights in a zoo checkpoint (``net.*``, prefix removed)."""
    state = read(path, needs=("state_dict",))["state_dict"]
    return {k.removeprefix("net."): v for k, v in state.items() if k.startswith("net.")}


def tokenizer_of(path: str | Path):
    """The tokenizer a run starting from ``path`` must use: a zoo checkpoint's own, or a
    Hugging Face checkpoint directory's (``tokenizer.json`` or ``vocab.txt``), local or
    ``hf:<repo>``."""
    from zoo.convert.hub import resolve
    from zoo.data.tokenizers import HFTokenizer, tokenizer_from_state

    path = resolve(path)
    if Path(path).is_dir():
        return HFTokenizer.from_pretrained_dir(path)
    state = read(path, needs=("hyper_parameters",))["hyper_parameters"].get("tokenizer")
    if state is None:
        raise ValueError(f"checkpoint {path} holds no tokenizer")
    return tokenizer_from_state(state)

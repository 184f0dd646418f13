"""The one reader of zoo checkpoints (the .ckpt files train.py writes), below everything that
reads one: the whole dict (:func:`read`), or just the network's weights to start another run from
(:func:`net_state`) or its tokenizer (:func:`stored_tokenizer`). Rebuilding the objective is
:func:`zoo.objectives.loading.load`'s, finding the tokenizer of any source a run starts from
(a Hugging Face folder too) :func:`zoo.data.pretrained.tokenizer_of`'s; both read through here.

A checkpoint is untrusted data: :func:`read` unpickles tensors and plain containers only
(``weights_only=True``) and refuses a file that names anything outside :mod:`zoo.registry` (its
objective, a ``_target_`` or a ``converter``), or holds a tokenizer state that does not rebuild,
before anything is built from it. Imports nothing of the zoo but the registry and the tokenizers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.data.tokenizers import CharTokenizer, HFTokenizer, WordTokenizer, tokenizer_from_state
from zoo.registry import ALLOWED_CONVERTERS, ALLOWED_TARGETS, FORMER_TARGETS, objective_name

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


def net_state(path: str | Path) -> dict[str, Tensor]:
    """The network's weights in a zoo checkpoint (``net.*``, prefix removed)."""
    state = read(path, needs=("state_dict",))["state_dict"]
    return {k.removeprefix("net."): v for k, v in state.items() if k.startswith("net.")}


def stored_tokenizer(path: str | Path) -> CharTokenizer | HFTokenizer | WordTokenizer:
    """The tokenizer a zoo checkpoint holds (its state rebuilt); one that holds none is refused."""
    state = read(path, needs=("hyper_parameters",))["hyper_parameters"].get("tokenizer")
    if state is None:
        raise ValueError(f"checkpoint {path} holds no tokenizer")
    return tokenizer_from_state(state)

"""Reading zoo checkpoints (the .ckpt files train.py writes): the whole objective for
inference, or just the network's weights or the tokenizer to start another run from."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import hydra
import torch
from torch import Tensor

if TYPE_CHECKING:
    from zoo.objectives.base import Objective


def read(path: str | Path, needs: tuple[str, ...] = ("zoo_objective", "hyper_parameters", "state_dict"),
         map_location: str | torch.device = "cpu") -> dict:
    """The checkpoint's dict, read with ``weights_only=True`` (tensors and plain containers
    only, never arbitrary pickled code); a missing or unreadable file, or one without the
    entries it ``needs``, names itself."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise RuntimeError(f"checkpoint {path} could not be read: {err}") from err
    missing = [key for key in needs if key not in ckpt]
    if missing:
        raise RuntimeError(f"{path} is not a zoo checkpoint (no {missing} entry)")
    return ckpt


def load(path: str | Path, map_location: str | torch.device = "cpu") -> Objective:
    """Rebuild the Lightning objective stored in ``path``, in eval mode."""
    ckpt = read(path, map_location=map_location)
    cls = hydra.utils.get_class(ckpt["zoo_objective"])
    objective = cls(**ckpt["hyper_parameters"])
    objective.load_state_dict(ckpt["state_dict"])
    return objective.eval()


def net_state(path: str | Path) -> dict[str, Tensor]:
    """The network's weights in a zoo checkpoint (``net.*``, prefix removed)."""
    state = read(path, needs=("state_dict",))["state_dict"]
    return {k.removeprefix("net."): v for k, v in state.items() if k.startswith("net.")}


def tokenizer_of(path: str | Path):
    """The tokenizer a run starting from ``path`` must use: a zoo checkpoint's own, or a
    Hugging Face checkpoint directory's (``tokenizer.json`` or ``vocab.txt``)."""
    from zoo.data.tokenizers import HFTokenizer, tokenizer_from_state

    if Path(path).is_dir():
        return HFTokenizer.from_pretrained_dir(path)
    state = read(path, needs=("hyper_parameters",))["hyper_parameters"].get("tokenizer")
    if state is None:
        raise ValueError(f"checkpoint {path} holds no tokenizer")
    return tokenizer_from_state(state)

"""Loading a zoo checkpoint (the objective, its network and tokenizer) for inference."""

from __future__ import annotations

from pathlib import Path

import hydra
import torch

from zoo.objectives.base import Objective


def load(path: str | Path, map_location: str | torch.device = "cpu") -> Objective:
    """Rebuild the Lightning objective stored in ``path`` (a .ckpt written by train.py).

    The file is read with ``weights_only=True``: tensors and plain containers only,
    never arbitrary pickled code.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise RuntimeError(f"checkpoint {path} could not be read: {err}") from err
    if "zoo_objective" not in ckpt or "hyper_parameters" not in ckpt:
        raise RuntimeError(f"{path} is not a zoo checkpoint (no 'zoo_objective' / 'hyper_parameters' entry)")
    cls = hydra.utils.get_class(ckpt["zoo_objective"])
    objective = cls(**ckpt["hyper_parameters"])
    objective.load_state_dict(ckpt["state_dict"])
    return objective.eval()

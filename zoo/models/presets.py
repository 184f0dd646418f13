"""The model presets (conf/model/*.yaml) by name, and a preset's network built without data:
the shared ground of the family table (zoo.cli.describe) and the mask pictures (zoo.viz)."""

from __future__ import annotations

import hydra
import torch
from omegaconf import DictConfig, open_dict

from zoo.config import CONF_DIR, compose_config

# What the data would tell each model at start-up; the presets are built with these stand-ins.
DIMS = {"vocab_size": 32000, "num_classes": 10, "image_size": 32, "channels": 3, "num_frames": 8, "pad_id": 0, "bos_id": 1,
        "eos_id": 2, "mask_id": 3, "image_token_id": 4, "special_ids": [0, 1, 2, 3, 4], "metric": "exact_match",
        "prompt": "", "class_prompts": []}


def model_names() -> list[str]:
    """Every ``model=`` choice: the names of conf/model/*.yaml, sorted."""
    return sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))


def build(model: str) -> tuple[DictConfig, torch.nn.Module]:
    """(the model's config, its network built on the meta device: shapes only, no memory)."""
    cfg = compose_config([f"model={model}"])
    with open_dict(cfg):
        cfg.dims = DIMS
    with torch.device("meta"):
        net = hydra.utils.instantiate(cfg.model.net)
    return cfg.model, net

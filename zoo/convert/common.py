"""Shared by the converters: build a zoo network from its Hydra config, and load a
renamed state dict with every name and shape checked."""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from omegaconf import open_dict
from torch import Tensor, nn

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_config(overrides: list[str]):
    """The composed training config (conf/train.yaml) with ``overrides``."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def build_net(model: str, overrides: list[str], dims: dict) -> nn.Module:
    """The network of ``model=<model>`` with ``overrides``; ``dims`` stands in for the data."""
    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
    return hydra.utils.instantiate(cfg.model.net)


def load_mapped(net: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state`` into ``net``: every parameter must be given, with its exact shape."""
    own = net.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise KeyError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    for name, value in state.items():
        if own[name].shape != value.shape:
            raise ValueError(f"{name}: checkpoint has shape {tuple(value.shape)}, model has {tuple(own[name].shape)}")
    net.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})

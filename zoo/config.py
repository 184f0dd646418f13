"""Where the configs live and how a config is composed outside a command line; imports only
Hydra and OmegaConf, so that a command's start-up checks (zoo.cli.precheck) run before torch loads."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose_config(overrides: list[str], config_name: str = "train", return_hydra_config: bool = False) -> DictConfig:
    """The composed conf/<config_name>.yaml (by default the training config) with ``overrides``;
    inside a running zoo command (a Hydra app whose search path is conf/ already) too."""
    if GlobalHydra.instance().is_initialized():
        return compose(config_name=config_name, overrides=overrides, return_hydra_config=return_hydra_config)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides, return_hydra_config=return_hydra_config)


# The folders of conf/paths/default.yaml that the environment may set.
FOLDERS = {"data_dir": "ZOO_DATA_DIR", "cache_dir": "ZOO_CACHE_DIR"}


def check_folders(paths: DictConfig) -> None:
    """Refuse a ``paths.data_dir`` or ``paths.cache_dir`` that is a file (an environment variable
    pointing at a dataset's file rather than the folder of datasets): each dataset would fail with
    a bare "Not a directory" under it. Names the key, and the variable when it set the value."""
    for key, variable in FOLDERS.items():
        folder = Path(paths[key])
        if folder.exists() and not folder.is_dir():
            source = f" (from ${variable})" if os.environ.get(variable) == paths[key] else ""
            raise NotADirectoryError(f"paths.{key}={folder}{source} is a file, not a folder: point {variable} "
                                     f"(or paths.{key}=) at a folder")

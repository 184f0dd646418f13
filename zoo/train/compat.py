"""Which model trains on which data, from the declared batch types alone (nothing is built).

A data module declares the batch types it can yield (``ZooDataModule.yields``, the default
first), an objective those it reads (``Objective.accepted(model_cfg)``); a pair trains on
the first type the data yields that the objective reads, and is refused when there is
none. train.py checks its pair with :func:`batch_type`; ``python -m zoo describe`` prints
:func:`model_data_table` for every preset in conf/model and every data config in conf/data
(the README holds the same table between ``<!-- model-data-table -->`` markers).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from omegaconf import DictConfig

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from zoo.config import CONF_DIR

def shared_types(model_cfg: Any, data_cfg: Any) -> list[type]:
    """The batch types ``data_cfg``'s module yields that ``model_cfg``'s objective reads, in the
    data's order (the configs' ``_target_`` classes are imported; nothing is instantiated)."""
    accepted = hydra.utils.get_class(model_cfg._target_).accepted(model_cfg)
    return [t for t in hydra.utils.get_class(data_cfg._target_).yields if t in accepted]


def batch_type(model_cfg: Any, data_cfg: Any, model: str = "?", data: str = "?") -> type:
    """The batch type the pair trains on: the first shared one. A pair with none is refused in
    one line naming both choices (``model``, ``data``) and both sides' types."""
    common = shared_types(model_cfg, data_cfg)
    if not common:
        objective, datamodule = (hydra.utils.get_class(c._target_) for c in (model_cfg, data_cfg))
        raise ValueError(
            f"model={model} ({objective.__name__}) reads {_names(objective.accepted(model_cfg))} batches, but "
            f"data={data} ({datamodule.__name__}) yields {_names(datamodule.yields)}: pick a matching pair "
            f"(`python -m zoo describe` lists the pairs that train)")
    return common[0]


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types) or "no"


def choices(group: str) -> list[str]:
    """The config names of a group (conf/<group>/*.yaml), sorted."""
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


def configs(group: str) -> dict[str, DictConfig]:
    """Every config of ``group`` (conf/<group>/*.yaml) by name, each composed on its own (its
    defaults applied, nothing resolved)."""
    running = GlobalHydra.instance().is_initialized()  # inside a zoo command (describe): conf/ is searched already
    with nullcontext() if running else initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return {name: compose(f"{group}/{name}")[group] for name in choices(group)}  # one initialisation for all


def model_data_table(models: dict[str, DictConfig] | None = None, datas: dict[str, DictConfig] | None = None) -> str:
    """The Markdown table of which data configs each model preset trains on, as train.py's
    start-up check decides (every other pair is refused): one row per group of presets that
    train on the same data. ``models`` / ``datas``: the composed configs (default:
    :func:`configs` of conf/model and conf/data)."""
    models, datas = models or configs("model"), datas or configs("data")
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, model in models.items():
        groups.setdefault(tuple(d for d, data in datas.items() if shared_types(model, data)), []).append(name)
    lines = ["| model presets | train on (every other data config is refused at start-up) |", "|---|---|"]
    lines += [f"| {', '.join(names)} | {', '.join(trains) or 'nothing'} |" for trains, names in groups.items()]
    return "\n".join(lines)

"""Shared by the converters: read a Hugging Face checkpoint folder (``config.json`` + weights,
sharded or not), build a zoo network from its Hydra config or from a training run's net config
reshaped to the checkpoint, and load a renamed state dict with every name and shape checked.

Each family's converter gives only its ``config.json`` -> shape mapping (the values, keyed by
their path under ``model.net``) and its weight renaming; everything else is here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import hydra
import torch
from omegaconf import OmegaConf, open_dict
from torch import Tensor, nn

from zoo.config import CONF_DIR, compose_config  # noqa: F401 (CONF_DIR: the converters' import path)
from zoo.nn.tower import without_unread


# (index file, single file) of the two weight formats ``save_pretrained`` writes, safetensors first.
WEIGHT_FILES = (("model.safetensors.index.json", "model.safetensors"), ("pytorch_model.bin.index.json", "pytorch_model.bin"))


def build_net(model: str, overrides: list[str], dims: dict) -> nn.Module:
    """The network of ``model=<model>`` with ``overrides``; ``dims`` stands in for the data."""
    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
    return hydra.utils.instantiate(cfg.model.net)


def hydra_value(value: Any) -> str:
    """``value`` (a scalar, or lists and dicts of them, e.g. a ``PerLayer`` pattern of masks) in
    Hydra's override grammar: ``[{_target_:zoo.nn.masks.LocalMask,window:4}]``."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    return str(value)


def shape_overrides(shape: dict[str, Any], prefix: str = "model.net") -> list[str]:
    """A converter's shape (values keyed by their path under the net) as Hydra overrides."""
    return [f"{prefix}.{key}={hydra_value(value)}" for key, value in shape.items()]


def _weights_file(file: Path) -> dict[str, Tensor]:
    """One safetensors or ``pytorch_model.bin`` file (read with ``weights_only``: it names no code)."""
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(file))
    return torch.load(file, map_location="cpu", weights_only=True)


def read_weights(path: Path) -> dict[str, Tensor]:
    """The state dict of a checkpoint folder: ``model.safetensors`` (or its shards listed in
    ``model.safetensors.index.json``), else ``pytorch_model.bin`` (or its shards)."""
    for index, single in WEIGHT_FILES:
        if (path / index).is_file():
            shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
            missing = [s for s in shards if not (path / s).is_file()]
            if missing:
                raise FileNotFoundError(f"{path / index} lists shards that are missing: {missing}")
            state: dict[str, Tensor] = {}
            for shard in shards:
                state |= _weights_file(path / shard)
            return state
        if (path / single).is_file():
            return _weights_file(path / single)
    raise FileNotFoundError(f"{path} has none of model.safetensors, model.safetensors.index.json, "
                            f"pytorch_model.bin, pytorch_model.bin.index.json")


def read_config(path: str | Path, model_types, reader: str = "this converter") -> dict[str, Any]:
    """``config.json`` of the Hugging Face checkpoint folder ``path``, whose ``model_type`` must be
    one of ``model_types`` (those ``reader`` reads, named in the error)."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} is missing: {path} is not a Hugging Face checkpoint directory")
    config = json.loads(config_file.read_text())
    kind = config.get("model_type")
    if kind not in model_types:
        raise ValueError(f"{config_file} describes model_type={kind!r} (architectures {config.get('architectures')}): "
                         f"{reader} reads {sorted(model_types)}")
    return config


def read_checkpoint_dir(path: str | Path, model_types: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json as a dict, the state dict) of a Hugging Face checkpoint folder whose
    ``model_type`` is one of ``model_types`` (those the calling converter reads)."""
    return read_config(path, model_types), read_weights(Path(path))


def refuse(config: dict[str, Any], source: str, **expected: Any) -> None:
    """Refuse a config whose keys differ from the only values the zoo net expresses exactly
    (absent keys take the expected value); names every unsupported key and its value."""
    unsupported = {k: config[k] for k, v in expected.items() if k in config and config[k] != v}
    if unsupported:
        raise ValueError(f"{source}: {unsupported} cannot be expressed by the zoo net "
                         f"(supported: {({k: expected[k] for k in unsupported})})")


def load_mapped(net: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state`` into ``net``: every parameter must be given, with its exact shape. Weights of
    layers ``net`` does not build (a LLaVA vision tower's layers after its feature layer) are skipped."""
    state = without_unread(net, state)
    own = net.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise KeyError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    for name, value in state.items():
        if own[name].shape != value.shape:
            raise ValueError(f"{name}: checkpoint has shape {tuple(value.shape)}, model has {tuple(own[name].shape)}")
    net.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})


def layer_pattern(kinds: list[str]) -> list[str]:
    """The shortest prefix of ``kinds`` that, repeated and cut, gives every layer (as ``zoo.nn.masks.PerLayer`` tiles)."""
    for period in range(1, len(kinds) + 1):
        if all(kind == kinds[i % period] for i, kind in enumerate(kinds)):
            return kinds[:period]
    raise AssertionError("unreachable: the whole list is a pattern of itself")


def check_vocab(net_cfg: dict[str, Any], key: str, checkpoint_vocab: int, path: str, added: int = 0,
                padded: bool = False) -> None:
    """The data's vocabulary (``key`` in the run's net config, holding the data's size plus the
    ``added`` ids the model puts on top, e.g. T5's sentinels) must be the checkpoint's; with
    ``padded`` (a checkpoint whose rows are padded above its tokenizer's ids and which holds its
    own specials, e.g. a Hugging Face t5-small: 32,100 tokens, 32,128 rows) the data's size
    alone, without ``added``, must be at most the checkpoint's."""
    data_vocab = OmegaConf.select(OmegaConf.create(net_cfg), key) - added
    if (data_vocab > checkpoint_vocab) if padded else (data_vocab + added != checkpoint_vocab):
        plus = f" (+{added} the model adds)" if added and not padded else ""
        limit = " (at most that)" if padded else ""
        raise ValueError(f"the data's tokenizer has {data_vocab} tokens{plus} but {path}/config.json has "
                         f"vocab_size={checkpoint_vocab}{limit}: tokenize with the checkpoint's tokenizer (a "
                         f"tokenizer.json or vocab.txt beside the weights, matching their vocabulary)")


def init_net(net_cfg: dict[str, Any], shape: dict[str, Any], state: dict[str, Tensor],
             load: Callable[[nn.Module, dict[str, Tensor]], None] = load_mapped) -> tuple[dict[str, Any], nn.Module]:
    """What a converter's ``model.init_from`` hook returns: (``net_cfg`` with ``shape`` applied,
    the net built from it holding ``state``). Builds with ``instantiate`` (not :func:`build_net`):
    it runs inside a Hydra app. ``shape`` lists every dependent key, so that it applies to a
    resolved config (where ``${..block.d_model}`` is already a number)."""
    cfg = OmegaConf.create(net_cfg)
    for key, value in shape.items():
        OmegaConf.update(cfg, key, value)
    net = hydra.utils.instantiate(cfg)
    with torch.no_grad():
        load(net, state)
    return OmegaConf.to_container(cfg), net

"""Shared by the converters: read a Hugging Face checkpoint folder (``config.json`` + weights,
sharded or not), build a zoo network from its Hydra config or from a training run's net config
reshaped to the checkpoint, and load a renamed state dict with every name and shape checked.
A folder is untrusted data: its files stay inside it, its sizes are whole numbers, its weights
finite floats, and every tensor it holds is one the net loads (:func:`load_mapped`).

Each family's converter gives only its ``config.json`` -> shape mapping (the values, keyed by
their path under ``model.net``) and its weight renaming; everything else is here."""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import hydra
import torch
from omegaconf import OmegaConf, open_dict
from torch import Tensor, nn

from zoo.config import CONF_DIR, compose_config  # noqa: F401 (CONF_DIR: the converters' import path)
from zoo.convert.paths import inside
from zoo.models import size
from zoo.nn.parts import PART_DIMS, part_kind
from zoo.nn.tower import without_unread


# (index file, single file) of the two weight formats ``save_pretrained`` writes, safetensors first.
WEIGHT_FILES = (("model.safetensors.index.json", "model.safetensors"), ("pytorch_model.bin.index.json", "pytorch_model.bin"))
# config.json keys that hold sizes (whole numbers >= 0): n_embd, num_hidden_layers, d_ff, max_position_embeddings, ...
SIZE_PREFIXES, SIZE_SUFFIXES = ("n_", "num_", "d_", "max_"), ("_size", "_layers", "_heads", "_dim")
# config.json keys that count layers: quoted when the weights hold other layers than the config builds
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")


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
    """A converter's shape (values keyed by their path under the net) as Hydra overrides; a dict
    (a whole mask) replaces what was there (deleted, then added), as :func:`init_net` applies it."""
    return [override for key, value in shape.items() for override in (
        [f"~{prefix}.{key}", f"+{prefix}.{key}={hydra_value(value)}"] if isinstance(value, dict)
        else [f"{'++' if handed(key) else ''}{prefix}.{key}={hydra_value(value)}"])]


def handed(key: str) -> bool:
    """Whether ``key`` (a path under the net) is a dimension a container hands its part
    (``embedder.dropout``): the part's config holds it only where it differs from the Block's
    (GPT-Neo's embedding dropout), so an override adds it (``++``)."""
    parent, _, name = key.rpartition(".")
    return bool(parent) and part_kind(parent) is not None and name in PART_DIMS


class FolderConfig(dict):
    """A folder's ``config.json`` (or a part of it, ``where``): a key it lacks is named with the file
    instead of a bare ``KeyError``."""

    def __init__(self, values: dict[str, Any], file: Path, where: str = ""):
        super().__init__({k: FolderConfig(v, file, f"{where}{k}.") if isinstance(v, dict) else v
                          for k, v in values.items()})
        self.file, self.where = file, where

    def __missing__(self, key: str) -> Any:
        raise ValueError(f"{self.file} has no {self.where}{key}: the converter needs it to build the net")


class FolderWeights(dict):
    """A checkpoint folder's tensors by name, each remembering its file, so that :func:`load_mapped`
    names the file of a bad tensor and refuses a folder holding tensors the net does not use.

    Converters rename and split the tensors (views share their storage), so a folder tensor is
    known again by its storage; ``left_out`` holds the storages a converter leaves out on purpose
    (:func:`leave_out`) or reads through a copy (:func:`copied_from`). Every folder read stays
    findable while its tensors are alive (``_READ``)."""

    def __init__(self, folder: Path, config: dict[str, Any] | None = None):
        super().__init__()
        self.folder, self.config = folder, config or {}
        self.files: dict[str, Path] = {}
        self.by_storage: dict[int, str] = {}
        self.left_out: set[int] = set()
        _READ[id(self)] = self

    def add(self, name: str, tensor: Any, file: Path) -> None:
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{file}: {name!r} is a {type(tensor).__name__}, not a tensor")
        if name in self:
            raise ValueError(f"{file}: tensor {name!r} is also in {self.files[name]}")
        self[name], self.files[name] = tensor, file
        self.by_storage.setdefault(_storage(tensor), name)

    def where(self, name: str) -> str:
        return f"{self.files[name]}: tensor {name!r}"


_READ: "weakref.WeakValueDictionary[int, FolderWeights]" = weakref.WeakValueDictionary()


def _storage(tensor: Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _origin(tensor: Tensor) -> tuple[FolderWeights, str] | None:
    """(the folder, the name) a tensor (or a view of it) was read as, if it was read from a folder."""
    key = _storage(tensor)
    for folder in list(_READ.values()):
        if key in folder.by_storage:
            return folder, folder.by_storage[key]
    return None


def leave_out(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """``state`` without the entries under ``prefix``, their folder tensors left out on purpose (a
    classifier of another label set starts from scratch): :func:`load_mapped` accepts them unused."""
    for name, value in state.items():
        if name.startswith(prefix) and (origin := _origin(value)):
            origin[0].left_out.add(_storage(value))
    return {k: v for k, v in state.items() if not k.startswith(prefix)}


def copied_from(tensor: Tensor) -> Tensor:
    """``tensor``, a folder tensor the converter reads through a copy (its rows regrouped, not a
    view: GPT-NeoX's per-head query, key and value rows), counted as used: :func:`load_mapped`
    accepts it without finding its storage among the loaded weights."""
    if origin := _origin(tensor):
        origin[0].left_out.add(_storage(tensor))
    return tensor


def _weights_file(file: Path) -> dict[str, Tensor]:
    """One safetensors or ``pytorch_model.bin`` file (read with ``weights_only``: it names no code);
    a file that is not one (truncated, a garbage header) is named."""
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(file))
        else:
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # SafetensorError, UnpicklingError, a zip or EOF error: all say the same
        kind = "a safetensors" if file.suffix == ".safetensors" else "a torch.save state dict"
        raise ValueError(f"{file} is not {kind} file that can be read ({type(err).__name__}: {err})") from None
    if not isinstance(state, dict):
        raise ValueError(f"{file} holds a {type(state).__name__}, not a state dict (names -> tensors)")
    return state


def _shards(path: Path, index: str) -> tuple[dict[str, str], list[str]]:
    """(``weight_map``, the shard files' names) of an index file, each shard inside the folder."""
    file = path / index
    try:
        listed = json.loads(inside(path, index, str(file)).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} could not be read as JSON: {err}") from None
    weight_map = listed.get("weight_map") if isinstance(listed, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise ValueError(f"{file}: weight_map must map tensor names to shard files, got {str(weight_map)[:80]}")
    shards = sorted(set(weight_map.values()))
    missing = [shard for shard in shards if not inside(path, shard, f"{file} weight_map").is_file()]
    if missing:
        raise FileNotFoundError(f"{file} lists shards that are missing: {missing}")
    return weight_map, shards


def read_weights(path: Path, config: dict[str, Any] | None = None) -> FolderWeights:
    """The state dict of a checkpoint folder: ``model.safetensors`` (or its shards listed in
    ``model.safetensors.index.json``), else ``pytorch_model.bin`` (or its shards); every file
    inside the folder. ``config`` (its ``config.json``) is what errors about layers quote."""
    state = FolderWeights(path, config)
    for index, single in WEIGHT_FILES:
        if (path / index).is_file():
            weight_map, shards = _shards(path, index)
            for shard in shards:
                for name, tensor in _weights_file(inside(path, shard, str(path / index))).items():
                    state.add(name, tensor, path / shard)
            unlisted = sorted(name for name, shard in weight_map.items() if state.files.get(name) != path / shard)
            if unlisted:
                raise ValueError(f"{path / index}: weight_map places {unlisted[:4]} in shards that do not hold them")
            return state
        if (path / single).is_file():
            file = inside(path, single, str(path / single))
            for name, tensor in _weights_file(file).items():
                state.add(name, tensor, path / single)
            return state
    raise FileNotFoundError(f"{path} has none of model.safetensors, model.safetensors.index.json, "
                            f"pytorch_model.bin, pytorch_model.bin.index.json")


def _sizes(node: Any, file: Path, where: str = "") -> None:
    """Refuse a size in ``config.json`` (``hidden_size``, ``num_hidden_layers``, ``n_embd``, ... at
    any depth) that is not a whole number >= 0 (or a list of them, or null), naming it."""
    for key, value in node.items() if isinstance(node, dict) else ():
        if isinstance(value, dict):
            _sizes(value, file, f"{where}{key}.")
        elif key.startswith(SIZE_PREFIXES) or key.endswith(SIZE_SUFFIXES):
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) for v in values) and isinstance(value, list):
                continue  # names, not sizes (GPT-Neo's attention_layers: ["global", "local"])
            if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in values):
                raise ValueError(f"{file}: {where}{key}={value!r} is not a size (a whole number >= 0)")


def read_config(path: str | Path, model_types, reader: str = "this converter") -> FolderConfig:
    """``config.json`` of the Hugging Face checkpoint folder ``path``, whose ``model_type`` must be
    one of ``model_types`` (those ``reader`` reads, named in the error); a file that is not a JSON
    object, leads out of the folder or holds a size that is not a whole number is refused."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} is missing: {path} is not a Hugging Face checkpoint directory")
    try:
        config = json.loads(inside(path, "config.json", str(config_file)).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{config_file} could not be read as JSON: {err}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: expected a JSON object, got a {type(config).__name__}")
    kind = config.get("model_type")
    if kind not in model_types:
        raise ValueError(f"{config_file} describes model_type={kind!r} (architectures {config.get('architectures')}): "
                         f"{reader} reads {sorted(model_types)}")
    _sizes(config, config_file)
    return FolderConfig(config, config_file)


def read_checkpoint_dir(path: str | Path, model_types: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json as a dict, the state dict) of a Hugging Face checkpoint folder whose
    ``model_type`` is one of ``model_types`` (those the calling converter reads)."""
    config = read_config(path, model_types)
    return config, read_weights(Path(path), config)


# config.json keys of every transformers config (PretrainedConfig's own, and the generation settings
# transformers 4 kept there) that do not change what the network computes: names, bookkeeping, what a
# forward returns, label names, special ids, the init's scale (the weights are read), the dtype (the
# zoo computes in its own), the cache switch, how generate() samples
GENERIC_KEYS = frozenset({
    "_name_or_path", "architectures", "chunk_size_feed_forward", "dtype", "torch_dtype", "id2label", "label2id",
    "model_type", "output_attentions", "output_hidden_states", "problem_type", "return_dict", "is_encoder_decoder",
    "transformers_version", "use_cache", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id",
    "sep_token_id", "cls_token_id", "decoder_start_token_id", "tokenizer_class", "use_return_dict",
    "_attn_implementation_autoset", "finetuning_task", "prefix", "task_specific_params", "num_labels",
    "torchscript", "tf_legacy_loss", "use_bfloat16", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "cache_implementation"})
# PretrainedConfig's keys that change the computation, at the one value the zoo computes unless a family
# implements them (a decoder with cross-attention, heads pruned away)
GENERIC_FIXED = {"is_decoder": False, "add_cross_attention": False, "pruned_heads": {}, "tie_encoder_decoder": False,
                 "cross_attention_hidden_size": None}


@dataclass(frozen=True)
class ConfigKeys:
    """What one family's converter knows of its Hugging Face config class's keys, as plain data:
    every key is implemented (``reads``: the converter honours each value, or refuses it itself),
    knowingly ignored (``ignores``: it does not change the logits, beside :data:`GENERIC_KEYS`), or
    not implemented (``fixed``: the one value the zoo computes, the config class's default). A key
    in none of them is refused whatever its value (:func:`check_keys`): the zoo cannot know it is harmless."""

    reads: frozenset[str] = frozenset()
    ignores: frozenset[str] = frozenset()
    fixed: dict[str, Any] = field(default_factory=dict)

    def __or__(self, other: "ConfigKeys") -> "ConfigKeys":
        """Both declarations (a family's on top of its base's)."""
        return ConfigKeys(self.reads | other.reads, self.ignores | other.ignores, self.fixed | other.fixed)


def check_keys(config: dict[str, Any], keys: ConfigKeys, source: str | None = None) -> None:
    """Refuse, in one line naming it, the first key of ``config`` (a ``config.json`` as a dict) that
    ``keys`` neither implements nor ignores: a ``fixed`` key at another value, or a key it does not
    declare at all. ``source`` names the config (default: its ``model_type``)."""
    source = source or str(config.get("model_type", "this"))
    for key, value in config.items():
        fixed = GENERIC_FIXED | keys.fixed
        if key in keys.reads or key in keys.ignores or key in GENERIC_KEYS:
            continue
        if key in fixed:
            if value == fixed[key] or (value is None and fixed[key] in ({}, [])):
                continue
            raise ValueError(f"{source} config: {key}={value!r} is not implemented by the zoo; it computes "
                             f"{key}={fixed[key]!r} (use a checkpoint with that value)")
        raise ValueError(f"{source} config: {key}={value!r} is not implemented by the zoo; its converter does not "
                         f"know {key!r} (remove it from config.json only if it does not change the model)")


def head_tied(config: dict[str, Any], embedding: Tensor, head: Tensor | None, default: bool,
              folder: str | None = None, head_name: str = "lm_head.weight") -> bool:
    """Whether the output head is the token embedding, as transformers 5's ``from_pretrained`` loads
    it: tied where ``tie_word_embeddings`` (``default`` where the config omits it) says so, unless the
    weights hold a head of other values (transformers then keeps both, untied: the embedding is not
    overwritten). Untied without a head (``head`` None) is refused: transformers would draw it at random."""
    tie = bool(config.get("tie_word_embeddings", default))
    if not tie and head is None:
        weights = f"the weights of {folder}" if folder else "the weights"
        raise ValueError(f"{config.get('model_type', 'this')} config: tie_word_embeddings=False but {weights} hold no "
                         f"{head_name}: transformers would start the head at random; set tie_word_embeddings "
                         f"true if the head is the embedding")
    return tie and (head is None or (head.shape == embedding.shape and bool(torch.equal(head, embedding))))


def refuse(config: dict[str, Any], source: str, **expected: Any) -> None:
    """Refuse a config whose keys differ from the only values the zoo net expresses exactly
    (absent keys take the expected value); names every unsupported key and its value."""
    unsupported = {k: config[k] for k, v in expected.items() if k in config and config[k] != v}
    if unsupported:
        raise ValueError(f"{source}: {unsupported} cannot be expressed by the zoo net "
                         f"(supported: {({k: expected[k] for k in unsupported})})")


def square_side(value: int | list[int], what: str) -> int:
    """``image_size`` / a patch side given as one int or an (h, w) pair (ViViT, VideoMAE, YOLOS);
    the zoo's images, frames and patches are square, so an (h, w) pair of two sides is refused."""
    sides = [value] * 2 if isinstance(value, int) else list(value)
    if sides[0] != sides[1]:
        raise ValueError(f"{what}={value}: the zoo's tubelets and frames are square")
    return sides[0]


def check_one_block(config: dict[str, Any]) -> None:
    """Refuse, naming the keys, an encoder-decoder config (BART's, Whisper's) whose towers differ
    in heads or width: both zoo towers share one Block config."""
    encoder = {key: config[f"encoder_{key}"] for key in ("attention_heads", "ffn_dim")}
    decoder = {key: config[f"decoder_{key}"] for key in ("attention_heads", "ffn_dim")}
    if encoder != decoder:
        raise ValueError(f"{config.get('model_type', 'this')} config: encoder_attention_heads={encoder['attention_heads']}, "
                         f"encoder_ffn_dim={encoder['ffn_dim']} differ from decoder_attention_heads="
                         f"{decoder['attention_heads']}, decoder_ffn_dim={decoder['ffn_dim']}: both zoo towers share "
                         f"one Block config")


class MismatchError(KeyError):
    """The names of a state dict and a net differ (a ``KeyError`` whose message reads as one line)."""

    def __str__(self) -> str:
        return str(self.args[0])


# Folder tensors no zoo net reads, left unused without a refusal: buffers Hugging Face recomputes
# from the config (position ids, rotary frequencies, GPT-2's and GPT-Neo's causal masks) and the
# heads no zoo family builds (BERT's and ViT's pooler, BERT's next-sentence head).
DERIVED = (".position_ids", "rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias", ".attention.bias",
           ".attention.masked_bias")
NOT_BUILT = ("pooler.", "seq_relationship.")


def _layer_keys(config: dict[str, Any], where: str = "") -> list[str]:
    """``key=value`` of every layer count in a ``config.json`` (nested parts too)."""
    found = []
    for key, value in config.items():
        if isinstance(value, dict):
            found += _layer_keys(value, f"{where}{key}.")
        elif key in LAYER_KEYS:
            found.append(f"{where}{key}={value}")
    return found


def _refuse_unused(folder: FolderWeights, used: set[int], loaded: list[Tensor]) -> None:
    """Every tensor of ``folder`` must be one the net loads (``used``: storages), one left out on
    purpose, a derived buffer or unbuilt head (:data:`DERIVED`, :data:`NOT_BUILT`), or a tied copy
    of a loaded tensor (the same values: ``lm_head.weight`` beside the token embedding)."""
    def accounted(name: str, tensor: Tensor) -> bool:
        return (_storage(tensor) in used or _storage(tensor) in folder.left_out or name.endswith(DERIVED)
                or any(part in name for part in NOT_BUILT)
                or any(t.shape == tensor.shape and t.dtype == tensor.dtype and torch.equal(t, tensor) for t in loaded))

    unused = sorted(name for name, tensor in folder.items() if not accounted(name, tensor))
    if unused:
        files = sorted({str(folder.files[name]) for name in unused})
        layers = _layer_keys(folder.config)
        says = f"; its config.json says {', '.join(layers)}" if layers and any(c.isdigit() for c in "".join(unused)) else ""
        raise ValueError(f"{', '.join(files)}: {len(unused)} tensors the net config.json describes does not use "
                         f"({', '.join(unused[:6])}{', ...' if len(unused) > 6 else ''}){says}: the config and the "
                         f"weights disagree; fix config.json or give the weights it describes")


def _check_values(name: str, value: Tensor, own: Tensor, source: str | None) -> None:
    """A weight for a float parameter must be floats, all finite; names the folder tensor and file
    (or ``source``, where the weights came from elsewhere)."""
    origin = _origin(value)
    where = origin[0].where(origin[1]) if origin else f"{source + ': ' if source else ''}weight {name!r}"
    if own.is_floating_point() and not value.is_floating_point():
        raise ValueError(f"{where} holds {value.dtype} values where the net's {name} is a float weight: "
                         f"not a checkpoint of this model's weights")
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise ValueError(f"{where} holds {bad} NaN or infinite values (of {value.numel()}): the weights are broken")


def load_mapped(net: nn.Module, state: dict[str, Tensor], source: str | None = None) -> None:
    """Copy ``state`` into ``net``: every parameter must be given, with its exact shape, as finite
    floats. Weights of layers ``net`` does not build (a LLaVA vision tower's layers after its
    feature layer) are skipped. Where ``state`` was renamed from a folder's tensors
    (:func:`read_weights`), every tensor of that folder must be used (see :func:`_refuse_unused`).
    ``source`` names where ``state`` came from otherwise (e.g. ``model.init_from=run.ckpt``)."""
    given = {_storage(v) for v in state.values() if isinstance(v, Tensor)}
    folders = [f for f in list(_READ.values()) if given & f.by_storage.keys()]
    state = without_unread(net, state)
    own = net.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        source = f" (from {', '.join(str(f.folder) for f in folders)})" if folders else ""
        raise MismatchError(f"state dict mismatch{source}: missing {missing}, unexpected {unexpected}")
    for name, value in state.items():
        if own[name].shape != value.shape:
            origin = _origin(value)
            where = f" (from {origin[0].where(origin[1])})" if origin else ""
            raise ValueError(f"{name}: checkpoint has shape {tuple(value.shape)}{where}, model has "
                             f"{tuple(own[name].shape)}")
    for folder in folders:
        _refuse_unused(folder, given, list(state.values()))
    for name, value in state.items():
        _check_values(name, value, own[name], source)
    net.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})


def convert_folder(converter: str, net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """(``net_cfg`` reshaped, the net) from the folder ``path`` by ``converter``'s ``model.init_from``
    hook; a tensor the converter needs that the folder's weights lack is named with the folder's
    files and its layer counts (a plain ``KeyError`` of the renaming otherwise)."""
    try:
        return hydra.utils.get_method(converter)(net_cfg, path)
    except KeyError as err:
        read = [f for f in list(_READ.values()) if f.folder == Path(path)]
        if type(err) is not KeyError or not read or not isinstance(err.args[0], str):
            raise
        files = sorted({str(file) for f in read for file in f.files.values()})
        layers = _layer_keys(read[0].config)
        says = f" (its config.json says {', '.join(layers)})" if layers else ""
        raise ValueError(f"{', '.join(files) or path}: no tensor {err.args[0]!r}, which the net config.json "
                         f"describes needs{says}: the config and the weights disagree") from None


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
    for key, value in shape.items():  # a dict (a whole mask) replaces what was there, it is not merged into it
        OmegaConf.update(cfg, key, value, merge=not isinstance(value, dict))
    origin = next(filter(None, map(_origin, state.values())), None)
    size.check(OmegaConf.to_container(cfg), f"{origin[0].folder / 'config.json'}" if origin else "the converted net")
    net = hydra.utils.instantiate(cfg)
    with torch.no_grad():
        load(net, state)
    return OmegaConf.to_container(cfg), net

"""A sentence-transformers folder read as data: which subfolder holds the Transformer, how its
hidden states are pooled, whether the result is normalised, how long an input may be.

``modules.json`` lists the folder's modules by class name. The file is untrusted: only the three
modules the zoo computes itself (Transformer, Pooling, Normalize) are accepted, in that order,
and any other is refused by name; no class the file names is ever imported. The
``sentence-transformers`` package is not needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.convert.paths import inside
from zoo.models.pooling import Pooling

MODULES_FILE = "modules.json"
KNOWN = ("Transformer", "Pooling", "Normalize")  # in the order they run
# Pooling/config.json's flags -> the zoo's mode; a flag not here that is set is refused
POOLING_FLAGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
                 "pooling_mode_cls_token": "cls"}
UNSUPPORTED_FLAGS = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                     "pooling_mode_lasttoken")


@dataclass(frozen=True)
class SentenceTransformer:
    """What a sentence-transformers folder says: the Transformer's folder, the pooling, the
    longest input (``max_seq_length`` of ``sentence_bert_config.json``, or None) and the width
    the Pooling module expects (``word_embedding_dimension``, or None)."""

    model_dir: Path
    pooling: Pooling
    max_length: int | None
    width: int | None


def is_sentence_transformer(folder: str | Path) -> bool:
    return (Path(folder) / MODULES_FILE).is_file()


def _json(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} could not be read as JSON: {err}") from None


def _object(file: Path) -> dict[str, Any]:
    """A JSON file that must hold an object (a module's settings)."""
    settings = _json(file)
    if not isinstance(settings, dict):
        raise ValueError(f"{file}: expected a JSON object, got a {type(settings).__name__}")
    return settings


def _modules(folder: Path) -> list[tuple[str, Path]]:
    """(kind, folder) of each module in ``modules.json``, checked: known kinds only, in order."""
    file = folder / MODULES_FILE
    listed = _json(file)
    if not isinstance(listed, list):
        raise ValueError(f"{file}: expected a list of modules, got a {type(listed).__name__}")
    modules = []
    for i, entry in enumerate(listed):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if not isinstance(kind, str):
            raise ValueError(f"{file}: module {i} has no type: {entry!r}")
        short = kind.rsplit(".", 1)[-1]
        if not kind.startswith("sentence_transformers.") or short not in KNOWN:
            raise ValueError(f"{file}: module {i} is {kind!r}; zoo embed follows only sentence-transformers' "
                             f"{', '.join(KNOWN)} modules")
        modules.append((short, inside(folder, entry.get("path", ""), f"{file} module {i}")))
    kinds = [kind for kind, _ in modules]
    if kinds not in (list(KNOWN[:2]), list(KNOWN)):
        raise ValueError(f"{file} lists the modules {kinds}: zoo embed follows Transformer, Pooling and optionally "
                         f"Normalize, in that order")
    return modules


def _pooling_mode(file: Path) -> tuple[str, int | None]:
    """(mode, word_embedding_dimension) of a Pooling module's ``config.json``: exactly one mode set."""
    config = _object(file)
    if "pooling_mode" in config:  # sentence-transformers 6 names its mode (and the width) so
        mode = config["pooling_mode"]
        if mode not in POOLING_FLAGS.values():
            raise ValueError(f"{file}: pooling_mode={mode!r}; zoo embed pools by {sorted(POOLING_FLAGS.values())} only")
        return mode, config.get("embedding_dimension")
    unsupported = [flag for flag in UNSUPPORTED_FLAGS if config.get(flag)]
    if unsupported:
        raise ValueError(f"{file} sets {unsupported}: zoo embed pools by {sorted(POOLING_FLAGS)} only")
    modes = [mode for flag, mode in POOLING_FLAGS.items() if config.get(flag)]
    if len(modes) != 1:
        raise ValueError(f"{file} sets {len(modes)} of {sorted(POOLING_FLAGS)}: zoo embed follows exactly one "
                         f"(sentence-transformers would concatenate several)")
    return modes[0], config.get("word_embedding_dimension")


def _max_length(file: Path) -> int | None:
    """``max_seq_length`` of a Transformer module's ``sentence_bert_config.json``: a positive whole number, or absent."""
    value = _object(file).get("max_seq_length")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{file}: max_seq_length={value!r} is not a positive number of tokens")
    return value


def read(folder: str | Path) -> SentenceTransformer:
    """The sentence-transformers folder at ``folder`` (with its ``modules.json``)."""
    folder = Path(folder)
    modules = dict(_modules(folder))
    mode, width = _pooling_mode(modules["Pooling"] / "config.json")
    settings = modules["Transformer"] / "sentence_bert_config.json"
    max_length = _max_length(settings) if settings.is_file() else None
    return SentenceTransformer(modules["Transformer"], Pooling(mode, "Normalize" in modules), max_length, width)


def transformer_dir(folder: str | Path) -> Path:
    """Where ``folder``'s Transformer is, its ``config.json`` and tokenizer: the folder ``modules.json``
    names for it in a sentence-transformers folder, else ``folder`` itself."""
    return read(folder).model_dir if is_sentence_transformer(folder) else Path(folder)


# --- export: a zoo encoder as a sentence-transformers folder ---------------------------------------

MODULE_TYPES = {kind: f"sentence_transformers.models.{kind}" for kind in KNOWN}  # the names every release reads


def write_modules(out: Path, pooling: Pooling, width: int, max_length: int) -> None:
    """Make ``out`` (a bare encoder and its tokenizer, as :func:`zoo.convert.export.export` wrote them)
    a sentence-transformers folder: the Transformer at its root, cutting inputs at ``max_length``
    tokens, then ``pooling`` over its ``width``-wide hidden states (and ``Normalize`` where it
    normalises), in the layout every sentence-transformers release reads (``pooling_mode_*`` flags)."""
    kinds = [("Transformer", ""), ("Pooling", "1_Pooling")] + [("Normalize", "2_Normalize")] * pooling.normalize
    modules = [{"idx": i, "name": str(i), "path": path, "type": MODULE_TYPES[kind]} for i, (kind, path) in enumerate(kinds)]
    (out / MODULES_FILE).write_text(json.dumps(modules, indent=1))
    flags = {flag: mode == pooling.mode for flag, mode in POOLING_FLAGS.items()} | dict.fromkeys(UNSUPPORTED_FLAGS, False)
    for kind, path in kinds[1:]:
        (out / path).mkdir()
    (out / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": width, **flags}, indent=1))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_length, "do_lower_case": False}))
    (out / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "cosine"}))


# --- export: a zoo BERT back into the sentence-transformers folder it came from ---------------------

POOLER = ("pooler.dense.weight", "pooler.dense.bias")  # BertModel's, which the zoo does not compute


def _pooler(model_dir: Path) -> dict[str, Any]:
    """The pooler weights of the Transformer folder ``model_dir`` (``model.safetensors``), by
    BertModel's names; {} where it holds none."""
    from safetensors import safe_open

    file = model_dir / "model.safetensors"
    if not file.is_file():
        return {}
    with safe_open(str(file), framework="pt") as weights:
        names = set(weights.keys())
        return {name: weights.get_tensor(prefix + name) for name in POOLER
                for prefix in ("", "bert.") if prefix + name in names}


def write(origin: str | Path, out: Path, hf_mlm) -> list[str]:
    """Make the export folder ``out`` (a ``BertForMaskedLM`` ``hf_mlm`` and its tokenizer, as
    :func:`zoo.convert.export.export` wrote them) the sentence-transformers folder ``origin`` is
    (the one the run started from): its ``modules.json``, Pooling and Normalize modules and settings
    (checked by :func:`read`: only those three, paths inside the folder), the Transformer as a
    ``BertModel`` at the same place, holding ``origin``'s pooler (the zoo has none to train), and
    the tokenizer's ``model_max_length`` as ``origin``'s. Returns the weights left at their
    initialisation (the pooler, where ``origin`` has none)."""
    import shutil

    from transformers import BertModel

    origin = Path(origin)
    st = read(origin)
    model_dir = out / st.model_dir.relative_to(origin.resolve())
    bert = BertModel(hf_mlm.config).eval()
    missing = bert.load_state_dict(hf_mlm.bert.state_dict(), strict=False).missing_keys
    pooler = _pooler(st.model_dir)
    for name, value in pooler.items():
        if value.shape != bert.state_dict()[name].shape:
            raise ValueError(f"{st.model_dir}: {name} is {tuple(value.shape)}, the exported BertModel's is "
                             f"{tuple(bert.state_dict()[name].shape)}: it is not the folder this run started from")
    bert.load_state_dict(pooler, strict=False)
    tokenizer_files = [p for p in out.iterdir() if p.name.startswith(("tokenizer", "special_tokens"))]
    for p in out.glob("*.safetensors"):
        p.unlink()
    bert.config.architectures = ["BertModel"]
    bert.save_pretrained(model_dir)
    if model_dir != out:
        for p in tokenizer_files:
            shutil.move(str(p), model_dir / p.name)
        (out / "config.json").unlink()
    root = origin.resolve()
    modules = [p.relative_to(root) for kind, p in _modules(origin) if kind != "Transformer"]
    for module in modules:  # Normalize's folder may hold nothing
        (out / module).mkdir(parents=True, exist_ok=True)
    settings = [Path(MODULES_FILE), Path("config_sentence_transformers.json"),
                st.model_dir.relative_to(root) / "sentence_bert_config.json", *(m / "config.json" for m in modules)]
    for name in settings:  # JSON settings only, re-written: nothing else of the folder travels
        if (root / name).is_file():
            (out / name).write_text(json.dumps(_json(root / name), indent=1))
    own = st.model_dir / "tokenizer_config.json"
    length = _json(own).get("model_max_length") if own.is_file() else None
    if isinstance(length, int):
        config = _json(model_dir / "tokenizer_config.json")
        (model_dir / "tokenizer_config.json").write_text(json.dumps(config | {"model_max_length": length}, indent=1))
    return sorted(set(missing) - set(pooler))

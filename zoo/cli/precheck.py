"""What a command's config alone decides, checked before torch, Lightning or transformers load and
before Hydra makes a run directory: a misspelt group choice (``model=gtp``), an unknown key
(``trainer.max_stpes=10``, ``+promt=hi``), a training run without steps, a run directory that
holds another run. Each refusal is one line with the closest known name ("did you mean ...?")."""

from __future__ import annotations

import ast
import difflib
import importlib.machinery
import os
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, ListConfig

from zoo.config import CONF_DIR, compose_config
from zoo.train import compat, run_dir  # (both light: compat imports a model's classes only when asked)


class Refused(ValueError):
    """A command line the config alone refuses; the message is one line naming the fix."""


def did_you_mean(given: str, known: list[str], prefix: str = "") -> str:
    """" (did you mean PREFIXNAME?)" for the known name closest to ``given``, or "" when none is close."""
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def check_group_choice(group: str, value: Any) -> None:
    """``group=value`` names a file of conf/<group>/ (``value`` a name, not a sweep or a list)."""
    if not isinstance(value, str):
        return
    choices = compat.choices(group)
    if value not in choices:
        raise Refused(f"{group}={value}: no such {group}{did_you_mean(value, choices)}; "
                      f"the choices are conf/{group}/*.yaml: {', '.join(choices)}")


def _module_file(module: str) -> Path | None:
    """The source file of ``module``, found without importing it (nor its packages)."""
    path: list[str] | None = None
    spec = None
    for part in module.split("."):
        name = part if spec is None else f"{spec.name}.{part}"
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def target_parameters(target: str, depth: int = 0) -> set[str] | None:
    """The keyword arguments ``target`` ("package.module.Name", a class or a function) takes, read
    from its source (nothing is imported); None where that source does not tell (``**kwargs``, a
    base class's ``__init__``, an extension module)."""
    module, _, name = target.rpartition(".")
    file = _module_file(module) if module and depth < 5 else None
    if file is None:
        return None
    tree = ast.parse(file.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            return None if init is None else _arguments(init)
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return _arguments(node)
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = next(a.name for a in node.names if (a.asname or a.name) == name)
            base = ".".join(module.split(".")[: len(module.split(".")) - node.level + (file.name == "__init__.py")])
            origin = node.module if node.level == 0 else ".".join(p for p in (base, node.module) if p)
            return target_parameters(f"{origin}.{source}", depth + 1)
    return None


def _arguments(function: ast.FunctionDef) -> set[str] | None:
    if function.args.kwarg is not None:
        return None
    names = [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]
    return set(names[1:] if names[:1] == ["self"] else names)


def _node(cfg: Any, path: list[str]) -> Any:
    """The node at ``path`` (keys, or list indices such as ``masks.1.window``); None where there is none."""
    for key in path:
        if isinstance(cfg, ListConfig):
            if not key.lstrip("-").isdigit() or not -len(cfg) <= int(key) < len(cfg):
                return None
            cfg = cfg._get_node(int(key))
        elif isinstance(cfg, DictConfig) and key in cfg.keys():  # (`in` is False for ???)
            cfg = cfg._get_node(key)
        else:
            return None
    return cfg


def check_added_key(base: DictConfig, key: str) -> None:
    """``+key=...`` adds a key the command or the object reads: at the top level a key of the
    command's config, under a ``_target_`` an argument of that class. (Under a plain dict, e.g.
    ``callbacks``, or in a node the override itself adds, any key may be added.)"""
    *parent_path, leaf = key.split(".")
    parent = _node(base, parent_path)
    if not isinstance(parent, DictConfig) or leaf in parent.keys():
        return
    where = ".".join(parent_path)
    if not parent_path:
        known = [k for k in parent if k != "hydra"]
    elif "_target_" in parent and isinstance(parent._get_node("_target_")._value(), str):
        arguments = target_parameters(parent._get_node("_target_")._value())
        if arguments is None or leaf in arguments:
            return
        known = sorted(arguments | set(parent.keys()) - {"_target_"})
    else:
        return
    suggestion = did_you_mean(leaf, known, f"{where}." if where else "")
    raise Refused(f"+{key}: unknown key{suggestion}; "
                  f"{where or 'this command'} takes {', '.join(sorted(known))}")


def check_unknown_key(base: DictConfig, key: str) -> None:
    """``key=...`` without ``+`` overrides a key the config has; name the closest one when it has not."""
    *parent_path, leaf = key.split(".")
    parent = _node(base, parent_path)
    known = sorted(k for k in parent if k != "hydra") if isinstance(parent, DictConfig) else []
    close = did_you_mean(leaf, known, ".".join(parent_path) + "." if parent_path else "")
    raise Refused(f"{key}: unknown key{close}; add a new key with +{key}=... only where the code reads it")


def check_train(cfg: DictConfig, out: Path) -> None:
    """A training run's values that the config alone decides; ``out`` is its run directory."""
    steps = cfg.trainer.get("max_steps")
    if not isinstance(steps, int) or steps < 1:
        raise Refused(f"trainer.max_steps={steps}: a run trains for a positive number of optimizer steps "
                      f"(the learning-rate schedule spans them), e.g. trainer.max_steps=100")
    # The early refusal only: a process a launcher started into a run (Lightning's DDP children,
    # torchrun / srun ranks) re-enters the directory its rank 0 claims, by design; the claim itself
    # (zoo.train.run_dir.claim) asks the trainer's strategy for the rank, not the environment.
    relaunched = any(os.environ.get(name, "0") != "0" for name in ("LOCAL_RANK", "NODE_RANK", "RANK", "SLURM_PROCID"))
    try:
        if not relaunched:
            run_dir.holds_other_run(out, cfg.get("ckpt_path"), bool(cfg.get("overwrite")))
    except FileExistsError as error:
        raise Refused(str(error)) from None
    # The pair of model and data, from their declared batch types: this one imports the zoo's
    # classes (torch), seconds rather than a fraction of one, but still before any run directory.
    choices = cfg.hydra.runtime.choices
    try:
        check_task(cfg, choices.get("model", "?"))
        compat.batch_type(cfg.model, cfg.data, choices.get("model", "?"), choices.get("data", "?"))
    except ValueError as error:
        raise Refused(str(error)) from None


def check_task(cfg: DictConfig, model: str) -> None:
    """``task=`` swaps the head and objective of the families that have one for it (their conf/model
    file pulls in conf/objective/<kind>/<task>.yaml); any other family keeps its own objective, and
    is refused here in one line naming its objective and batches and the task's."""
    task = cfg.get("task")
    wanted = task.get("objective") if task is not None else None
    if not wanted or cfg.model.get("_target_") == wanted:
        return
    import hydra

    own, other = hydra.utils.get_class(cfg.model._target_), hydra.utils.get_class(wanted)
    raise ValueError(f"task={task.name}: model={model} is a {own.__name__} family ({' or '.join(t.__name__ for t in own.accepted(cfg.model))} "
                     f"batches) with no {task.name} head; task={task.name} trains a {other.__name__} on "
                     f"{' or '.join(t.__name__ for t in other.accepted(cfg.model))} batches: pick an encoder family (bert, roberta, "
                     f"distilbert, ...)")


def check(command: str, config: str, arguments: list[str]) -> None:
    """Refuse ``arguments`` (a command's ``key=value`` overrides) where the config alone can:
    raises :class:`Refused`. Hydra's own flags (``--help``, ``-m``, ...) leave the checks to Hydra."""
    if any(a.startswith("-") for a in arguments):
        return
    cfg = check_overrides(config, arguments)
    if command == "train":
        check_train(cfg, Path(cfg.hydra.run.dir))
    for key in TRAINING_OVERRIDES.get(command, ()):  # e.g. zoo diff's two sides
        from zoo.cli.diff import side_overrides

        try:
            check_overrides("train", side_overrides(cfg[key]))
        except Refused as refusal:
            raise Refused(f"{key}={cfg[key]}: {refusal}") from None
    if command == "compare":
        if "study" not in cfg:
            raise Refused(f"zoo compare: no study; name one: study=NAME, NAME one of conf/study/*.yaml: "
                          f"{', '.join(compat.choices('study'))}")
        check_study(cfg.study, list(cfg.overrides))
        if cfg.launcher:  # a Hydra launcher plugin that is not installed: Hydra would fail after the study folder
            try:
                _compose([f"hydra/launcher={cfg.launcher}"], "train", return_hydra_config=True)
            except Refused:
                raise Refused(f"launcher={cfg.launcher}: Hydra has no such launcher here (is its plugin installed? "
                              f"joblib: pip install hydra-joblib-launcher; submitit_slurm: hydra-submitit-launcher); "
                              f"launcher=null runs one after the other") from None


def check_study(study: DictConfig, extra: list[str] = ()) -> None:
    """A study's runs compose (each value's overrides, and ``extra`` added to every run, checked as
    train's own) and differ in its one axis only (:func:`zoo.cli.study.check_one_axis`)."""
    from zoo.cli.study import check_one_axis, run_overrides

    try:
        for value in study["values"]:
            try:
                check_overrides("train", run_overrides(study, value, extra))
            except Refused as refusal:
                raise Refused(f"study {study.name}, value {value}: {refusal}") from None
        check_one_axis(study, extra)
    except ValueError as error:
        raise Refused(str(error)) from None


# The keys of a command's config that hold overrides of conf/train.yaml, checked as train's own.
TRAINING_OVERRIDES = {"diff": ("a", "b")}


def check_overrides(config: str, arguments: list[str]) -> DictConfig:
    """The checks of :func:`check` that every command shares: group choices and keys; returns
    conf/<config>.yaml composed with ``arguments`` (and Hydra's own config)."""
    overrides = OverridesParser.create().parse_overrides(arguments)
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    for override in overrides:
        key = override.key_or_group
        if key.startswith("hydra.") or key.startswith("hydra/"):
            continue
        group = key.replace(".", "/")
        if group in groups and not override.is_delete():
            check_group_choice(group, override.value())
    group_overrides = [a for a, o in zip(arguments, overrides) if o.key_or_group.replace(".", "/") in groups]
    base = _compose(group_overrides, config)
    for override in overrides:
        key = override.key_or_group
        if key.startswith("hydra") or key.replace(".", "/") in groups or override.is_delete():
            continue
        if override.is_add() or override.is_force_add():
            check_added_key(base, key)
        elif _node(base, key.split(".")) is None:
            check_unknown_key(base, key)
    return _compose(arguments, config, return_hydra_config=True)


def _compose(overrides: list[str], config: str, return_hydra_config: bool = False) -> DictConfig:
    try:
        return compose_config(overrides, config, return_hydra_config)
    except ConfigCompositionException as error:  # Hydra's message, on one line
        raise Refused(" ".join(str(error).split())) from None

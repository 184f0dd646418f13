"""What a command's config alone decides, checked before torch, Lightning or transformers load and
before Hydra makes a run directory: a misspelt group choice (``model=gtp``), an unknown key
(``trainer.max_stpes=10``, ``+promt=hi``), a training run without steps, a run directory that
holds another run. Each refusal is one line with the closest known name ("did you mean ...?")."""

from __future__ import annotations

import ast
import difflib
import importlib.machinery
import math
import os
import re
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf, ValueNode

from zoo.config import CONF_DIR, compose_config
from zoo.train import compat, run_dir  # (both light: compat imports a model's classes only when asked)


class Refused(ValueError):
    """A command line the config alone refuses; the message is one line naming the fix."""


def did_you_mean(given: str, known: list[str], prefix: str = "") -> str:
    """" (did you mean PREFIXNAME?)" for the known name closest to ``given``, or "" when none is close."""
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def check_group_choice(group: str, value: Any, searched: list[Path] = ()) -> None:
    """``group=value`` names a file of conf/<group>/ or of ``searched``/<group>/ (the folders a
    ``hydra.searchpath=`` adds: a study of one's own) (``value`` a name, not a sweep or a list)."""
    if not isinstance(value, str):
        return
    choices = sorted({*compat.choices(group), *(p.stem for folder in searched for p in (folder / group).glob("*.yaml"))})
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


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The keys whose value keeps the kind of its default (a number stays a number, true/false stays
# true/false): the model's, the data's and the optimizer's settings, the budget and the seed.
# (trainer.* takes either kind by design: precision=32 or bf16-mixed, devices=1 or auto.)
TYPED = ("model.", "data.", "optim.", "budget.", "seed")


def check_kind(key: str, default: Any, value: Any) -> None:
    """``key=value`` overrides a number by a number and true/false by true/false (null allowed):
    ``model.net.context=big`` is refused here, not by a ``TypeError`` deep in the model's build."""
    if not key.startswith(TYPED) or not isinstance(default, ValueNode) or not isinstance(value, ValueNode):
        return
    if default._is_interpolation() or value._is_interpolation():
        return
    was, given = default._value(), value._value()
    if given is None:
        return
    if isinstance(was, bool) and not isinstance(given, bool):
        raise Refused(f"{key}={given!r}: expected true or false")
    if isinstance(was, (int, float)) and not isinstance(was, bool) and isinstance(given, (str, bool)):
        whole = "a whole number" if isinstance(was, int) else "a number"
        raise Refused(f"{key}={given!r}: expected {whole} (the default is {was})")


def check_run_values(cfg: DictConfig) -> None:
    """The top-level values of a training run that are read only once torch has loaded: its
    threads, seed, budget and longer contexts, each refused in one line naming what it accepts."""
    threads = cfg.get("threads")
    if threads is not None and not (_whole(threads) and threads >= 1):
        raise Refused(f"threads={threads!r}: expected a whole number of CPU threads >= 1, or null for every core "
                      f"this process may use")
    seed = cfg.get("seed")
    if not (_whole(seed) and 0 <= seed < 2**32):
        raise Refused(f"seed={seed!r}: expected a whole number from 0 to {2**32 - 1} (numpy's seeds)")
    for kind, amount in (cfg.get("budget") or {}).items():
        number = isinstance(amount, (int, float)) and not isinstance(amount, bool)
        if amount is not None and not (number and math.isfinite(amount) and amount > 0):
            raise Refused(f"budget.{kind}={amount!r}: expected a finite number > 0 (e.g. budget.{kind}=1e15), "
                          f"or null for no {kind} budget")
    contexts = cfg.get("eval_contexts")
    if not isinstance(contexts, ListConfig) or not all(_whole(c) and c > 0 for c in contexts):
        raise Refused(f"eval_contexts={contexts}: expected a list of whole numbers of tokens > 0, e.g. "
                      f"eval_contexts=[512,1024], or [] for none")


def check_train(cfg: DictConfig, out: Path) -> None:
    """A training run's values that the config alone decides; ``out`` is its run directory."""
    steps = cfg.trainer.get("max_steps")
    if not isinstance(steps, int) or steps < 1:
        raise Refused(f"trainer.max_steps={steps}: a run trains for a positive number of optimizer steps "
                      f"(the learning-rate schedule spans them), e.g. trainer.max_steps=100")
    check_run_values(cfg)
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
        check_task_head(cfg, choices.get("model", "?"))
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

    other = hydra.utils.get_class(wanted)
    if cfg.model.get("_target_") is None:  # an encoder family without conf/objective/encoder/<task>.yaml
        family = f"model={model} is a family"
    else:
        own = hydra.utils.get_class(cfg.model._target_)
        family = (f"model={model} is a {own.__name__} family "
                  f"({' or '.join(t.__name__ for t in own.accepted(cfg.model))} batches)")
    raise ValueError(f"task={task.name}: {family} with no {task.name} head; task={task.name} trains a {other.__name__} on "
                     f"{' or '.join(t.__name__ for t in other.accepted(cfg.model))} batches: pick "
                     f"{task.get('families', 'an encoder family (bert, roberta, distilbert, ...)')}")


def check_task_head(cfg: DictConfig, model: str) -> None:
    """Under a ``task=`` other than pretraining, refuse a family whose own conf sets keys of its head
    that the task's head does not take (Gemma's LM ``softcap`` merged into the classifier), in one line
    naming both, rather than fail building it."""
    task, head = cfg.get("task"), (cfg.model.get("net") or {}).get("head")
    if task is None or not task.get("objective") or not head or not head.get("_target_"):
        return
    import inspect

    import hydra

    takes = inspect.signature(hydra.utils.get_class(head._target_)).parameters
    foreign = sorted(k for k in set(head) - set(takes) if not k.startswith("_"))
    if foreign and not any(p.kind is p.VAR_KEYWORD for p in takes.values()):
        raise ValueError(f"task={task.name}: model={model} sets {', '.join(f'net.head.{k}' for k in foreign)} of "
                         f"its own head, which the task's {head._target_.rsplit('.', 1)[-1]} does not take: "
                         f"model={model} has no {task.name} head yet")


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
        except ValueError as refusal:  # (Refused is one)
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


KEYS = ("name", "base", "axis", "values", "seeds", "budget", "metric", "better", "baseline", "effect", "lr_grid",
        "bases")  # a study file's keys
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a study's or a value's name: one folder of out=, never a path


def check_name(study: str, what: str, name: object) -> None:
    """Refuse a ``name`` that is not one plain folder name (``../../x``, ``a/b``, ``a,b``, ``..``)."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"study {study}: {what} {name!r} is not a name: a name is letters, digits, _ . - "
                         f"(it names a folder of out=), not . or ..; rename it")


def check_shape(study: DictConfig) -> None:
    """Refuse (ValueError, one line) a study file whose keys, names, seeds or budget are not a
    study's: an unknown key (with the closest known one), a name that is a path, no seeds or a
    seed twice, a budget that is not one positive amount."""
    from zoo.cli.study import budget_overrides

    name = study.get("name", "?")
    for key in study:
        if key not in KEYS:
            raise ValueError(f"study {name}: unknown key {key}{did_you_mean(str(key), list(KEYS))}; "
                             f"a study's keys are {', '.join(KEYS)}")
    for key in ("name", "axis", "values", "seeds", "budget"):
        if study.get(key) is None:
            raise ValueError(f"study {name}: no {key}: a study names {', '.join(KEYS[:6])} (and may name "
                             f"{', '.join(KEYS[6:])})")
    check_name(name, "name", name)
    if not isinstance(study["values"], DictConfig) or not study["values"]:
        raise ValueError(f"study {name}: values: expected a mapping of value names to lists of overrides")
    for value, overrides in study["values"].items():
        check_name(name, "value", value)
        if not isinstance(overrides, ListConfig):
            raise ValueError(f"study {name}: value {value}: expected a list of overrides, e.g. [key=value]")
    seeds = study.seeds
    if not isinstance(seeds, ListConfig) or not seeds or not all(type(s) is int for s in seeds):
        raise ValueError(f"study {name}: seeds={seeds}: a study names one or more whole-number seeds, e.g. "
                         f"seeds: [1337, 1]")
    twice = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if twice:
        raise ValueError(f"study {name}: seeds={list(seeds)}: seed {twice[0]} twice; each seed once")
    budget_overrides(study)
    if study.get("better", "lower") not in ("lower", "higher"):
        raise ValueError(f"study {name}: better={study.better}: expected lower (a loss) or higher (an accuracy)")
    if study.get("baseline") is not None and study.baseline not in study["values"]:
        raise ValueError(f"study {name}: baseline={study.baseline} is not one of its values "
                         f"({', '.join(study['values'])})")
    effect = study.get("effect")
    if effect is not None and (isinstance(effect, bool) or not isinstance(effect, (int, float)) or effect <= 0):
        raise ValueError(f"study {name}: effect={effect}: expected a positive difference of its metric, e.g. 0.01")
    check_grid_and_bases(study)


def check_grid_and_bases(study: DictConfig) -> None:
    """Refuse (ValueError, one line) an ``lr_grid`` that is not two or more distinct positive rates,
    and ``bases:`` that are not a mapping of names to lists of overrides, or stand beside ``base:``."""
    name, grid = study.get("name", "?"), study.get("lr_grid")
    if grid is not None and (not isinstance(grid, ListConfig) or len(grid) < 2 or len(set(grid)) < len(grid) or any(
            isinstance(r, bool) or not isinstance(r, (int, float)) or r <= 0 for r in grid)):
        raise ValueError(f"study {name}: lr_grid={grid}: expected two or more distinct positive learning rates, "
                         f"e.g. lr_grid: [1.0e-3, 3.0e-3]")
    given = study.get("bases")
    if given is None:
        return
    if study.get("base") is not None:
        raise ValueError(f"study {name}: both base and bases: name one (bases: {{NAME: [overrides]}} for several)")
    if not isinstance(given, DictConfig) or not given:
        raise ValueError(f"study {name}: bases: expected a mapping of base names to lists of overrides")
    for base, overrides in given.items():
        check_name(name, "base", base)
        if not isinstance(overrides, ListConfig):
            raise ValueError(f"study {name}: base {base}: expected a list of overrides, e.g. [model=gpt]")


def check_study(study: DictConfig, extra: list[str] = ()) -> None:
    """A study file's keys, names, seeds and budget (:func:`check_shape`); its runs
    compose (each value's overrides, and ``extra`` added to every run, checked as
    train's own) and differ in its one axis only (:func:`zoo.cli.study.check_one_axis`)."""
    from zoo.cli.study import bases, check_one_axis, run_overrides

    try:
        check_shape(study)
        for base in bases(study):
            for value in study["values"]:
                under = f" under base {base}" if base else ""
                try:
                    cfg = check_overrides("train", run_overrides(study, value, extra, base))
                except Refused as refusal:
                    raise Refused(f"study {study.name}, value {value}{under}: {refusal}") from None
                check_bits_per_byte(study, cfg, under)
        check_one_axis(study, extra)
    except ValueError as error:
        raise Refused(str(error)) from None


# What logs val/bpb: a next-token LM validating on data=text's documents, whose UTF-8 bytes it counts.
BITS_PER_BYTE = {"model": "zoo.objectives.lm.NextTokenLM", "data": "zoo.data.text.TextData"}


def check_bits_per_byte(study: DictConfig, cfg: DictConfig, under: str = "") -> None:
    """Refuse ``metric: val/bpb`` for a run whose model or data cannot give it (only a next-token LM
    on data=text counts the validation split's bytes), naming both."""
    if study.get("metric") != "val/bpb":
        return
    if any(OmegaConf.select(cfg, f"{key}._target_") != target for key, target in BITS_PER_BYTE.items()):
        choices = OmegaConf.select(cfg, "hydra.runtime.choices") or {}
        said = ", ".join(f"{key}={choices.get(key, OmegaConf.select(cfg, f'{key}._target_'))}" for key in BITS_PER_BYTE)
        raise ValueError(f"study {study.name}{under}: metric=val/bpb: {said} cannot count the validation split's "
                         f"bytes; bits per byte need a next-token LM (model=gpt, llama, ...) on data=text, or "
                         f"metric=val/loss")


# The keys of a command's config that hold overrides of conf/train.yaml, checked as train's own.
TRAINING_OVERRIDES = {"diff": ("a", "b")}


def check_overrides(config: str, arguments: list[str]) -> DictConfig:
    """The checks of :func:`check` that every command shares: group choices and keys; returns
    conf/<config>.yaml composed with ``arguments`` (and Hydra's own config)."""
    try:
        overrides = OverridesParser.create().parse_overrides(arguments)
    except OverrideParseException as error:
        bad = next((a for a in arguments if not _parses(a)), " ".join(arguments))
        raise Refused(f"{bad!r}: not one key=value ({' '.join(str(error).split()[:8])}); a value of several words "
                      f"is quoted for Hydra too: key='a b'") from None
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    searched = [Path(str(place).removeprefix("file://")) for o in overrides if o.key_or_group == "hydra.searchpath"
                for place in o.value() if str(place).startswith("file://")]
    for override in overrides:
        key = override.key_or_group
        if key.startswith("hydra.") or key.startswith("hydra/"):
            continue
        group = key.replace(".", "/")
        if group in groups and not override.is_delete():
            check_group_choice(group, override.value(), searched)
    group_overrides = [a for a, o in zip(arguments, overrides)
                       if o.key_or_group.replace(".", "/") in groups or o.key_or_group == "hydra.searchpath"]
    base = _compose(group_overrides, config)
    keys = []
    for override in overrides:
        key = override.key_or_group
        if key.startswith("hydra") or key.replace(".", "/") in groups or override.is_delete():
            continue
        if override.is_add() or override.is_force_add():
            check_added_key(base, key)
        elif _node(base, key.split(".")) is None:
            check_unknown_key(base, key)
        else:
            keys.append(key)
    cfg = _compose(arguments, config, return_hydra_config=True)
    for key in keys:
        check_kind(key, _node(base, key.split(".")), _node(cfg, key.split(".")))
    return cfg


def _parses(argument: str) -> bool:
    """Whether Hydra parses ``argument`` as one override."""
    try:
        OverridesParser.create().parse_overrides([argument])
    except OverrideParseException:
        return False
    return True


def _compose(overrides: list[str], config: str, return_hydra_config: bool = False) -> DictConfig:
    try:
        return compose_config(overrides, config, return_hydra_config)
    except ConfigCompositionException as error:  # Hydra's message, on one line
        raise Refused(" ".join(str(error).split())) from None

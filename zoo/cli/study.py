"""A study (conf/study/*.yaml): a base, ONE axis and its values, seeds and a budget, as the runs
of a Hydra multirun. Each value's overrides become one option of a config group ``study_value``
written into the study's folder, so that the sweep is Hydra's own (``+study_run=a/seed_1,b/seed_1``)
under whichever launcher ``hydra/launcher=`` picks. A study whose runs differ in more than its axis
(:mod:`zoo.models.axes`, as ``zoo diff`` groups them) is refused, naming the axes.

A study file is untrusted input: its value names become folders of ``out``, so each is a name
(letters, digits, ``_ . -``), never a path; its keys, seeds and budget are checked before anything
runs (:func:`zoo.cli.precheck.check_shape`), every run's config composed (:func:`check_runs`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from zoo.cli.diff import compared
from zoo.config import CONF_DIR, compose_config
from zoo.models.axes import GROUPS

def run_overrides(study: DictConfig, value: str, extra: list[str] = ()) -> list[str]:
    """The overrides of conf/train.yaml one value's runs are composed from (the seed aside), with
    ``extra`` (zoo compare's ``overrides=``) after the study's own."""
    return [*study.base, *budget_overrides(study), *study["values"][value], *extra]


def check_one_axis(study: DictConfig, extra: list[str] = ()) -> None:
    """Refuse (ValueError, one line) a study whose values' runs differ in a group other than its
    ``axis``, or that names no known axis, no values, or a value that chooses a config group
    (``extra``: overrides every run adds, see :func:`run_overrides`)."""
    if study.axis not in GROUPS:
        raise ValueError(f"study {study.name}: axis={study.axis} is none of {', '.join(GROUPS)}")
    if not study.get("values"):
        raise ValueError(f"study {study.name}: no values of its axis {study.axis}")
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    for name, overrides in study["values"].items():
        for override in OverridesParser.create().parse_overrides(list(overrides)):
            if override.key_or_group in groups or override.is_delete():
                raise ValueError(f"study {study.name}: value {name} sets {override.input_line}: a value sets keys "
                                 f"(merged over the base); choose config groups in the base")
    first, *others = study["values"]
    for name in others:
        grouped = compared(run_overrides(study, first, extra), run_overrides(study, name, extra))
        if any(group != study.axis for group in grouped):  # (extra stays every run's overrides)
            said = "; ".join(f"{group} ({', '.join(grouped[group])})" for group in grouped)
            raise ValueError(f"study {study.name}: values {first} and {name} differ in {' and '.join(grouped)}, "
                             f"not only in its axis {study.axis}: {said}")
        if not grouped:
            raise ValueError(f"study {study.name}: values {first} and {name} are the same config")


def budget_overrides(study: DictConfig) -> list[str]:
    """``budget.KIND=AMOUNT`` for the study's one budget."""
    given = {k: v for k, v in (study.get("budget") or {}).items() if v is not None}
    if len(given) != 1:
        raise ValueError(f"study {study.name}: budget={dict(given)}: a study names one budget (budget.flops, "
                         f"tokens, samples or seconds of conf/train.yaml), equal for every run")
    for kind, amount in given.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount <= 0:
            raise ValueError(f"study {study.name}: budget.{kind}={amount}: a budget is a positive amount, the same "
                             f"for every run")
    return [f"budget.{kind}={amount}" for kind, amount in given.items()]


def split_base(study: DictConfig) -> tuple[list[str], list[str]]:
    """The base's overrides as (those for the command line, those of a key some value sets too).
    A value is an option of a config group, and Hydra applies the command line after every config
    file: a key the base sets there would win over the value's (patch 8 would run at the base's 4).
    Such a key goes into each value's file instead, the value's own setting after it."""
    parser = OverridesParser.create()
    set_by_values = {o.key_or_group for overrides in study["values"].values()
                     for o in parser.parse_overrides(list(overrides))}
    command_line, shared = [], []
    for line, override in zip(study.base, parser.parse_overrides(list(study.base))):
        (shared if override.key_or_group in set_by_values else command_line).append(line)
    return command_line, shared


def runs(study: DictConfig) -> list[tuple[str, int]]:
    """Every (value, seed) of the study, values in its order, then seeds."""
    return [(value, seed) for value in study["values"] for seed in study.seeds]


def run_name(value: str, seed: int) -> str:
    """A run's folder under the study's ``out``: ``VALUE/seed_SEED`` (the value checked a name)."""
    return f"{value}/seed_{seed}"


def write_runs(study: DictConfig, out: Path, starts: dict[tuple[str, int], dict]) -> Path:
    """Each run to start as ``out/configs/study_run/VALUE/seed_SEED.yaml`` (package _global_: the
    value's overrides as nested keys, after the base's for the same keys (:func:`split_base`), its
    seed, ``study: {name, axis, value}``, which the run's config.yaml then holds, and the keys in
    ``starts[run]``: a resume's ``ckpt_path``, a restart's ``overwrite``); returns the folder to
    put on Hydra's search path. Also ``out/study.yaml``, the study itself."""
    folder = out / "configs" / "study_run"
    shutil.rmtree(folder, ignore_errors=True)  # an earlier start's runs
    shared = split_base(study)[1]
    for (value, seed), keys in starts.items():
        tree = OmegaConf.create({"study": {"name": study.name, "axis": study.axis, "value": value}, "seed": seed,
                                 **keys})
        for override in OverridesParser.create().parse_overrides([*shared, *study["values"][value]]):
            OmegaConf.update(tree, override.key_or_group, override.value(), merge=True, force_add=True)
        path = folder / f"{run_name(value, seed)}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# @package _global_\n" + OmegaConf.to_yaml(tree))
    (out / "study.yaml").write_text(OmegaConf.to_yaml(study))
    return out / "configs"


def sweep(study: DictConfig, out: Path, starts: dict[tuple[str, int], dict], launcher: str | None = None,
          extra: list[str] = ()) -> list[str]:
    """The command line of the multirun of the study's runs in ``starts`` (:func:`write_runs`), one
    run folder each (``out/VALUE/seed_SEED``), with the base, the budget and ``extra`` overrides."""
    configs = write_runs(study, out, starts)
    return [sys.executable, "-m", "zoo", "train", "--multirun", f"hydra.searchpath=[file://{configs.resolve()}]",
            f"+study_run={','.join(run_name(*run) for run in starts)}",
            *split_base(study)[0], *budget_overrides(study), *extra, f"hydra.sweep.dir={out.resolve()}",
            "hydra.sweep.subdir=${hydra.runtime.choices.study_run}",
            *([f"hydra/launcher={launcher}"] if launcher else [])]


def check_runs(study: DictConfig, extra: list[str] = ()) -> None:
    """Compose every value's run config as its runs will be, and refuse (ValueError, one line)
    one that names a ``_target_`` that does not exist: found before the first run, not after
    the runs before it have trained. (Imports the targets' modules: after the precheck.)"""
    from hydra.utils import get_object

    for value in study["values"]:
        cfg = compose_config(run_overrides(study, value, extra))
        for key, target in targets(OmegaConf.to_container(cfg)):
            try:
                get_object(target)
            except (ImportError, AttributeError, ValueError) as error:
                raise ValueError(f"study {study.name}, value {value}: {key}._target_={target}: no such class or "
                                 f"function ({' '.join(str(error).split())[:200]})") from None


def targets(tree: object, at: str = "") -> list[tuple[str, str]]:
    """(where, target) for each ``_target_`` in a config tree (dicts and lists)."""
    found = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, node in items:
        if key == "_target_" and isinstance(node, str):
            found.append((at.rstrip("."), node))
        else:
            found += targets(node, f"{at}{key}.")
    return found

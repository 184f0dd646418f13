"""A study (conf/study/*.yaml): a base, ONE axis and its values, seeds and a budget, as the runs
of a Hydra multirun. Each value's overrides become one option of a config group ``study_value``
written into the study's folder, so that the sweep is Hydra's own (``+study_value=a,b seed=1,2``)
under whichever launcher ``hydra/launcher=`` picks. A study whose runs differ in more than its axis
(:mod:`zoo.models.axes`, as ``zoo diff`` groups them) is refused, naming the axes."""

from __future__ import annotations

import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from zoo.cli.diff import compared
from zoo.config import CONF_DIR
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
        extra = [group for group in grouped if group != study.axis]
        if extra:
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


def write_values(study: DictConfig, out: Path) -> Path:
    """Each value as ``out/configs/study_value/VALUE.yaml`` (package _global_: its overrides as
    nested keys, after the base's for the same keys (:func:`split_base`), and ``study: {name, axis,
    value}``, which each run's config.yaml then holds); returns the folder to put on Hydra's search
    path. Also ``out/study.yaml``, the study itself."""
    folder = out / "configs" / "study_value"
    folder.mkdir(parents=True, exist_ok=True)
    shared = split_base(study)[1]
    for name, overrides in study["values"].items():
        tree = OmegaConf.create({"study": {"name": study.name, "axis": study.axis, "value": name}})
        for override in OverridesParser.create().parse_overrides([*shared, *overrides]):
            OmegaConf.update(tree, override.key_or_group, override.value(), merge=True, force_add=True)
        (folder / f"{name}.yaml").write_text("# @package _global_\n" + OmegaConf.to_yaml(tree))
    (out / "study.yaml").write_text(OmegaConf.to_yaml(study))
    return out / "configs"


def sweep(study: DictConfig, out: Path, launcher: str | None = None, extra: list[str] = ()) -> list[str]:
    """The command line of the study's multirun: every value x every seed, one run folder each
    (``out/VALUE/seed_SEED``), with the base, the budget and ``extra`` overrides."""
    configs = write_values(study, out)
    return [sys.executable, "-m", "zoo", "train", "--multirun", f"hydra.searchpath=[file://{configs.resolve()}]",
            f"+study_value={','.join(study['values'])}", f"seed={','.join(str(s) for s in study.seeds)}",
            *split_base(study)[0], *budget_overrides(study), *extra, f"hydra.sweep.dir={out.resolve()}",
            "hydra.sweep.subdir=${hydra.runtime.choices.study_value}/seed_${seed}",
            *([f"hydra/launcher={launcher}"] if launcher else [])]

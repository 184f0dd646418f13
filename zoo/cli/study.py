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
from typing import NamedTuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.cli.diff import compared
from zoo.config import CONF_DIR, compose_config
from zoo.models.axes import GROUPS

class Key(NamedTuple):
    """One run of a study: a value and a seed, and where the study names them, its base (``bases:``),
    its learning rate (``lr_grid:``) and its budget (a list of budgets)."""

    value: str
    seed: int
    base: str | None = None
    lr: float | None = None
    budget: float | None = None


def bases(study: DictConfig) -> dict[str | None, list[str]]:
    """{base: its overrides}: the study's ``bases:``, else {None: its ``base:``}."""
    if study.get("bases"):
        return {name: list(overrides) for name, overrides in study.bases.items()}
    return {None: list(study.get("base") or [])}


def budget_amounts(study: DictConfig) -> tuple[str, list[float] | None]:
    """The study's budget kind and, where it names a list of them, its amounts (else None)."""
    budget_overrides(study)  # checked
    kind, amount = next((k, v) for k, v in study.budget.items() if v is not None)
    return kind, [float(a) for a in amount] if isinstance(amount, ListConfig) else None


def run_overrides(study: DictConfig, value: str, extra: list[str] = (), base: str | None = None) -> list[str]:
    """The overrides of conf/train.yaml one value's runs are composed from (the seed aside), with
    ``extra`` (zoo compare's ``overrides=``) after the study's own; ``base``: one of its ``bases:``.
    A study of several budgets is composed at its first (the budget changes no config but its own)."""
    return [*bases(study)[base], *budget_overrides(study), *study["values"][value], *extra]


def check_one_axis(study: DictConfig, extra: list[str] = ()) -> None:
    """Refuse (ValueError, one line) a study whose values' runs differ in a group other than its
    ``axis`` (under each of its bases), or that names no known axis, no values, or a value that
    chooses a config group, or sets the learning rate its ``lr_grid`` sets (``extra``: overrides
    every run adds, see :func:`run_overrides`)."""
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
            if study.get("lr_grid") and override.key_or_group == "optim.lr":
                raise ValueError(f"study {study.name}: value {name} sets {override.input_line}: its lr_grid sets "
                                 f"optim.lr for every run; drop it from the value")
    for base in bases(study):
        check_base_one_axis(study, base, extra)


def check_base_one_axis(study: DictConfig, base: str | None, extra: list[str]) -> None:
    """:func:`check_one_axis` under one base: every value against the first."""
    first, *others = study["values"]
    under = f" under base {base}" if base else ""
    for name in others:
        grouped = compared(run_overrides(study, first, extra, base), run_overrides(study, name, extra, base))
        if any(group != study.axis for group in grouped):  # (extra stays every run's overrides)
            said = "; ".join(f"{group} ({', '.join(grouped[group])})" for group in grouped)
            raise ValueError(f"study {study.name}: values {first} and {name}{under} differ in "
                             f"{' and '.join(grouped)}, not only in its axis {study.axis}: {said}")
        if not grouped:
            raise ValueError(f"study {study.name}: values {first} and {name}{under} are the same config")


def budget_overrides(study: DictConfig) -> list[str]:
    """``budget.KIND=AMOUNT`` for the study's one budget (its first, where it names a list: each run's
    own is in its file, :func:`write_runs`)."""
    given = {k: v for k, v in (study.get("budget") or {}).items() if v is not None}
    if len(given) != 1:
        raise ValueError(f"study {study.name}: budget={dict(given)}: a study names one budget (budget.flops, "
                         f"tokens, samples or seconds of conf/train.yaml), equal for every run")
    for kind, amount in given.items():
        amounts = list(amount) if isinstance(amount, ListConfig) else [amount]
        if not amounts or any(isinstance(a, bool) or not isinstance(a, (int, float)) or a <= 0 for a in amounts):
            raise ValueError(f"study {study.name}: budget.{kind}={amount}: a budget is a positive amount, the same "
                             f"for every run (or a list of them: every value runs at each)")
        if len(set(amounts)) < len(amounts):
            raise ValueError(f"study {study.name}: budget.{kind}={list(amounts)}: an amount twice; each once")
        return [f"budget.{kind}={amounts[0]}"]


def split_base(study: DictConfig, base: str | None = None) -> tuple[list[str], list[str]]:
    """The base's overrides as (those for the command line, those of a key some value sets too).
    A value is an option of a config group, and Hydra applies the command line after every config
    file: a key the base sets there would win over the value's (patch 8 would run at the base's 4).
    Such a key goes into each value's file instead, the value's own setting after it (so does
    ``optim.lr`` where an ``lr_grid`` sets it per run)."""
    parser = OverridesParser.create()
    set_by_values = {o.key_or_group for overrides in study["values"].values()
                     for o in parser.parse_overrides(list(overrides))} | ({"optim.lr"} if study.get("lr_grid") else set())
    command_line, shared = [], []
    given = bases(study)[base]
    for line, override in zip(given, parser.parse_overrides(given)):
        (shared if override.key_or_group in set_by_values else command_line).append(line)
    return command_line, shared


def runs(study: DictConfig) -> list[tuple[str, int]]:
    """Every (value, seed) of the study, values in its order, then seeds."""
    return [(value, seed) for value in study["values"] for seed in study.seeds]


def keys(study: DictConfig, rates: dict[tuple, float] | None = None) -> list[Key]:
    """Every run of the study: under each base, each value, at each budget, each seed. With an
    ``lr_grid``, the first seed at each rate, then (given ``rates``, {(base, value, budget): the rate
    whose final was best, :func:`zoo.cli.report.best_rates`}) the other seeds at the value's best
    rate and at the baseline value's (same-rate): the grid's runs are the first seed's."""
    amounts = budget_amounts(study)[1] or [None]
    baseline = study.get("baseline") or next(iter(study["values"]))
    found = []
    for base in bases(study):
        for value in study["values"]:
            for budget in amounts:
                if not study.get("lr_grid"):
                    found += [Key(value, seed, base, None, budget) for seed in study.seeds]
                    continue
                found += [Key(value, study.seeds[0], base, float(lr), budget) for lr in study.lr_grid]
                chosen = [(rates or {}).get((base, v, budget)) for v in (value, baseline)]
                for lr in dict.fromkeys(r for r in chosen if r is not None):
                    found += [Key(value, seed, base, lr, budget) for seed in study.seeds[1:]]
    return found


def run_name(value: str, seed: int, base: str | None = None, lr: float | None = None,
             budget: float | None = None, kind: str = "") -> str:
    """A run's folder under the study's ``out``: ``[BASE/]VALUE/[lr_RATE/][KIND_AMOUNT/]seed_SEED``
    (the names checked names, the numbers as Python writes floats)."""
    parts = [base, value, f"lr_{lr!r}" if lr is not None else None,
             f"{kind}_{budget!r}" if budget is not None else None, f"seed_{seed}"]
    return "/".join(p for p in parts if p is not None)


def write_runs(study: DictConfig, out: Path, starts: dict[tuple, dict]) -> Path:
    """Each run to start (a :class:`Key`, or a (value, seed)) as
    ``out/configs/study_run/RUN.yaml`` (RUN: :func:`run_name`; package _global_: the value's
    overrides as nested keys, after the base's for the same keys (:func:`split_base`), its seed,
    learning rate and budget where the study varies them, ``study: {name, axis, value}`` (and its
    base), which the run's config.yaml then holds, and the keys in ``starts[run]``: a resume's
    ``ckpt_path``, a restart's ``overwrite``); returns the folder to put on Hydra's search path.
    Also ``out/study.yaml``, the study itself."""
    folder = out / "configs" / "study_run"
    shutil.rmtree(folder, ignore_errors=True)  # an earlier start's runs
    kind = budget_amounts(study)[0]
    for run, keys_ in starts.items():
        key = Key(*run)
        names = {"name": study.name, "axis": study.axis, "value": key.value, **({"base": key.base} if key.base else {})}
        tree = OmegaConf.create({"study": names, "seed": key.seed, **keys_})
        own = [*([f"optim.lr={key.lr!r}"] if key.lr is not None else []),
               *([f"budget.{kind}={key.budget!r}"] if key.budget is not None else [])]
        for override in OverridesParser.create().parse_overrides([*split_base(study, key.base)[1],
                                                                  *study["values"][key.value], *own]):
            OmegaConf.update(tree, override.key_or_group, override.value(), merge=True, force_add=True)
        path = folder / f"{run_name(*key, kind=kind)}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# @package _global_\n" + OmegaConf.to_yaml(tree))
    (out / "study.yaml").write_text(OmegaConf.to_yaml(study))
    return out / "configs"


def sweep(study: DictConfig, out: Path, starts: dict[tuple, dict], launcher: str | None = None,
          extra: list[str] = ()) -> list[str]:
    """The command line of the multirun of the study's runs in ``starts`` (:func:`write_runs`; all
    under one base), one run folder each (``out/RUN``, :func:`run_name`), with the base, the budget
    and ``extra`` overrides."""
    return command(study, out, write_runs(study, out, starts), starts, launcher, extra)


def command(study: DictConfig, out: Path, configs: Path, starts: dict[tuple, dict], launcher: str | None,
            extra: list[str]) -> list[str]:
    """:func:`sweep`'s command line, the runs' files already in ``configs``."""
    kind = budget_amounts(study)[0]
    base = {Key(*run).base for run in starts}.pop()
    return [sys.executable, "-m", "zoo", "train", "--multirun", f"hydra.searchpath=[file://{configs.resolve()}]",
            f"+study_run={','.join(run_name(*Key(*run), kind=kind) for run in starts)}",
            *split_base(study, base)[0], *(budget_overrides(study) if budget_amounts(study)[1] is None else []),
            *extra, f"hydra.sweep.dir={out.resolve()}", "hydra.sweep.subdir=${hydra.runtime.choices.study_run}",
            *([f"hydra/launcher={launcher}"] if launcher else [])]


def sweeps(study: DictConfig, out: Path, starts: dict[Key, dict], launcher: str | None = None,
           extra: list[str] = ()) -> list[list[str]]:
    """One :func:`sweep` per base of the runs in ``starts`` (a base chooses config groups, which
    only the command line can: one multirun each), every run's file written first."""
    configs = write_runs(study, out, starts)
    by_base: dict[str | None, dict[Key, dict]] = {}
    for run, given in starts.items():
        by_base.setdefault(run.base, {})[run] = given
    return [command(study, out, configs, group, launcher, extra) for group in by_base.values()]


def check_runs(study: DictConfig, extra: list[str] = ()) -> None:
    """Compose every value's run config as its runs will be, and refuse (ValueError, one line)
    one that names a ``_target_`` that does not exist: found before the first run, not after
    the runs before it have trained. (Imports the targets' modules: after the precheck.)"""
    from hydra.utils import get_object

    for base in bases(study):
        for value in study["values"]:
            cfg = compose_config(run_overrides(study, value, extra, base))
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

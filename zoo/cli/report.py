"""``python -m zoo report dir=DIR``: a study's result, from the runs in its folder (its study.yaml;
each run's config.yaml, budget.json, metrics.csv): ``report.md``, one row per value of the axis
(parameters, FLOPs used, the final val metric's min / mean / max over the seeds, the val loss at
each longer context of ``eval_contexts`` (contexts.json) likewise, tokens/s, peak memory), every
run's state, and pictures of the val metric against FLOPs and against wall time, one line per value
(the seeds' mean) with the seeds' band (min to max); and each value paired with the study's
baseline seed by seed (:mod:`zoo.cli.paired`: the mean difference, its intervals, the paired
t-test's p-value and verdict, and the seeds a stated difference would need).

Nothing is lost and nothing is averaged that should not be: every value and seed of the study is
listed as finished, failed (and why), stopped (resumable) or missing; the table's numbers come
from the finished runs alone, each run's final value being the last validation its budget.json
recorded at the run's end (not the last row of a metrics.csv that may be cut short), and the
seeds column says which seeds they are. A folder holding the runs of two studies, or of two
budgets, is refused, naming both."""

from __future__ import annotations

import csv
import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.cli.commands import ERROR_FILE
from zoo.cli.paired import ALPHA, POWER, RESAMPLES, Paired, paired, seeds_needed
from zoo.cli.precheck import check_shape
from zoo.cli.scaling import section as fitted_section
from zoo.cli.study import Key, budget_amounts, keys, run_name
from zoo.plots import plt, read_metrics, save_figure

# What a finished run's budget.json holds that the report reads (zoo.train.budget).
RECORDED = ("spent", "peak_memory_mb", "final")
EFFECT = 0.01  # the difference of the metric whose seeds needed the report states, unless told another


@dataclass
class Run:
    """One (value, seed) of a study, as its folder shows it."""

    value: str
    seed: int
    dir: Path
    state: str  # finished, failed, stopped or missing
    why: str = ""  # what a run that is not finished (or has no final metric) lacks
    spent: dict = field(default_factory=dict)  # budget.json
    final: float | None = None  # the study's metric at the run's last validation
    series: dict = field(default_factory=dict)  # metrics.csv, for the pictures
    contexts: dict = field(default_factory=dict)  # contexts.json's "eval"
    base: str | None = None  # where the study names several bases
    lr: float | None = None  # where it names an lr_grid
    budget: float | None = None  # where it names several budgets
    kind: str = ""  # the budget's kind (flops, tokens, ...)

    @property
    def key(self) -> Key:
        return Key(self.value, self.seed, self.base, self.lr, self.budget)

    @property
    def name(self) -> str:
        return run_name(*self.key, kind=self.kind)

    def said(self, metric: str) -> str:
        """The run's state in a few words."""
        if self.state == "finished" and self.final is not None:
            final = f"finished: final {metric} {self.final:.4f} at step {self.spent['final'].get('step', '?')}"
            return f"{final}; {self.why}" if self.why else final
        return f"{self.state}: {self.why}" if self.why else self.state


def check_folder(folder: Path) -> None:
    """Refuse a ``dir=`` that is no folder, or one the report cannot write into."""
    if not folder.exists():
        raise FileNotFoundError(f"dir={folder}: no such folder; dir= is the out= of a zoo compare")
    if not folder.is_dir():
        raise NotADirectoryError(f"dir={folder} is a file, not a study's folder; dir= is the out= of a zoo compare")
    if not os.access(folder, os.W_OK) or not folder.stat().st_mode & 0o222:
        raise PermissionError(f"dir={folder} is read-only: the report writes report.md and two pictures there; "
                              f"make it writable (chmod u+w) or report a writable copy of it")


def load(path: Path, kind: type = DictConfig) -> DictConfig | ListConfig | None:
    """A YAML file's mapping (or list, ``kind=ListConfig``), or None where it is not one (binary,
    cut short, another kind)."""
    try:
        cfg = OmegaConf.load(path)
    except Exception:  # yaml's and OmegaConf's errors alike: not a config
        return None
    return cfg if isinstance(cfg, kind) else None


def run_configs(folder: Path) -> dict[Path, DictConfig]:
    """{run folder: config.yaml} for every run of a study under ``folder`` (config.yaml with a
    ``study:`` key; Hydra's .hydra/ copies and compare's configs/ are not runs)."""
    found = {}
    for path in sorted(folder.rglob("config.yaml")):
        if {".hydra", "configs"} & set(path.relative_to(folder).parts[:-1]):
            continue
        cfg = load(path)
        if cfg is not None and isinstance(cfg.get("study"), DictConfig):
            found[path.parent] = cfg
    return found


def _budget(budget: object) -> str:
    """A budget as ``kind=amount`` (the amounts as numbers, 6.4936e12 = 6493600000000.0)."""
    def said(amount: object) -> str:
        return f"[{', '.join(said(a) for a in amount)}]" if isinstance(amount, ListConfig) else f"{float(amount):.6g}"

    return ", ".join(f"{k}={said(v)}" for k, v in sorted((budget or {}).items()) if v is not None) or "none"


def study_of(folder: Path) -> DictConfig:
    """The study whose runs ``folder`` holds: its study.yaml (which zoo compare writes), or, without
    one, what the runs' config.yaml say. Refuses (ValueError) a folder whose runs belong to two
    studies or two budgets, naming both, and a folder that holds no study."""
    configs = run_configs(folder)
    by_study: dict[tuple[str, str], list[str]] = {}
    for run, cfg in configs.items():
        key = (str(cfg.study.get("name")), _budget(cfg.get("budget")))
        by_study.setdefault(key, []).append(str(run.relative_to(folder)))
    study_file = folder / "study.yaml"
    if study_file.is_file():
        study = load(study_file)
        if study is None:
            raise ValueError(f"{study_file} is not a study (not a YAML mapping); dir= is the out= of a zoo compare")
        try:
            check_shape(study)
        except ValueError as error:
            raise ValueError(f"{study_file} is not a study: {error}") from None
        kind, amounts = budget_amounts(study)
        own = {(study.name, _budget({kind: a})) for a in amounts or []}  # its runs' budgets, one of its list each
        key = (study.name, _budget({kind: amounts[0]} if amounts else study.budget))
        by_study = {key if k in own else k: [] for k in by_study} | {key: []}
        for run, cfg in configs.items():
            found = (str(cfg.study.get("name")), _budget(cfg.get("budget")))
            by_study[key if found in own else found].append(str(run.relative_to(folder)))
        by_study[key].insert(0, "study.yaml")
    if len(by_study) > 1:
        said = " and ".join(f"study {name} at budget {budget} ({', '.join(where[:3])}"
                            f"{', ...' if len(where) > 3 else ''})" for (name, budget), where in by_study.items())
        raise ValueError(f"dir={folder} holds the runs of {said}: a report is of one study at one budget; "
                         f"put each study's runs in a folder of its own (zoo compare's out=) and report each")
    if study_file.is_file():
        return study
    if not configs:
        raise ValueError(f"dir={folder} holds no study: no study.yaml and no run whose config.yaml names a study; "
                         f"dir= is the out= of a zoo compare")
    first = next(iter(configs.values()))
    values = list(dict.fromkeys(str(cfg.study.value) for cfg in configs.values()))
    study = OmegaConf.create({"name": first.study.name, "axis": first.study.axis, "values": {v: [] for v in values},
                              "seeds": sorted({cfg.seed for cfg in configs.values()}),
                              "budget": {k: v for k, v in (first.get("budget") or {}).items() if v is not None}})
    check_shape(study)  # the names from the runs' files: each one folder name
    return study


def read_run(folder: Path, key: Key, metric: str, kind: str = "") -> Run:
    """A run's state from its folder ``folder/RUN`` (:func:`run_name`): finished (budget.json,
    written at the run's end, with its last validation), failed (error.txt, or a budget.json that
    cannot be read), stopped (a checkpoint to resume from, no end) or missing."""
    run = Run(key.value, key.seed, folder / run_name(*key, kind=kind), "missing", "never started", base=key.base,
              lr=key.lr, budget=key.budget, kind=kind)
    if not run.dir.is_dir():
        return run
    spent_file, error_file = run.dir / "budget.json", run.dir / ERROR_FILE
    if spent_file.is_file():
        read_end(run, spent_file, metric)
    elif error_file.is_file():
        lines = error_file.read_text(errors="replace").strip().splitlines()
        run.state, run.why = "failed", lines[0] if lines else "an error (empty error.txt)"
    elif (run.dir / "checkpoints" / "last.ckpt").is_file():
        run.state, run.why = "stopped", "checkpoints/last.ckpt saved, not at its end: the same zoo compare resumes it"
    else:
        run.state, run.why = "failed", f"ended with no budget.json, no error and no checkpoint (see {run.name}/train.log)"
    return run


def read_end(run: Run, spent_file: Path, metric: str) -> None:
    """Fill ``run`` from what it wrote at its end (budget.json): finished, with its final ``metric``
    (None where it never validated), or failed where that file is damaged; what the pictures
    cannot show of it (metrics.csv, contexts.json damaged) goes into ``run.why``."""
    try:
        run.spent = json.loads(spent_file.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        run.state, run.why = "failed", f"budget.json is damaged ({type(error).__name__}): rerun it"
        return
    lacking = [k for k in RECORDED if not isinstance(run.spent, dict) or not isinstance(run.spent.get(k), dict)]
    if lacking:
        run.state, run.why = "failed", (f"budget.json records no {', '.join(lacking)} (cut short, or written by "
                                        f"an older zoo): rerun it")
        return
    run.state, run.final = "finished", run.spent["final"].get(metric)
    notes = [] if run.final is not None else [f"its last validation recorded no {metric} (it never validated?): "
                                               f"not averaged"]
    run.series, problem = _series(run.dir / "metrics.csv")
    longer = run.dir / "contexts.json"  # eval_contexts=[...]: zoo.train.longer_contexts
    try:
        run.contexts = json.loads(longer.read_text())["eval"] if longer.is_file() else {}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        notes.append("contexts.json is damaged: its longer contexts not shown")
    run.why = "; ".join([*notes, *([problem] if problem else [])])


def _series(path: Path) -> tuple[dict, str]:
    """metrics.csv's series and "", or ({}, why) where it cannot be read or holds nothing."""
    try:
        series = read_metrics(path)
    except (OSError, ValueError, KeyError, TypeError, csv.Error) as error:
        return {}, f"metrics.csv cannot be read ({type(error).__name__}): left out of the pictures"
    return series, "" if series else "metrics.csv holds no rows: left out of the pictures"


def study_runs(folder: Path) -> tuple[DictConfig, list[Run]]:
    """The study in ``folder`` (:func:`study_of`) and each of its runs (:func:`read_run`): with an
    ``lr_grid``, the grid's and then the seeds at the rates its finished grid runs chose."""
    study = study_of(folder)
    metric, kind = study.get("metric") or "val/loss", budget_amounts(study)[0]
    found = [read_run(folder, key, metric, kind) for key in keys(study)]
    if study.get("lr_grid"):
        found = [read_run(folder, key, metric, kind) for key in keys(study, best_rates(study, found))]
    return study, found


def best_rates(study: DictConfig, all_runs: list[Run]) -> dict[tuple, float]:
    """{(base, value, budget): the learning rate of its ``lr_grid`` whose first-seed run finished with
    the best final metric (the study's ``better:``)}; a value none of whose grid runs finished has none."""
    lower = study.get("better", "lower") == "lower"
    best: dict[tuple, Run] = {}
    for run in all_runs:
        if run.seed != study.seeds[0] or run.state != "finished" or run.final is None:
            continue
        cell = (run.base, run.value, run.budget)
        if cell not in best or (run.final < best[cell].final) == lower and run.final != best[cell].final:
            best[cell] = run
    return {cell: run.lr for cell, run in best.items()}


def _curve(run: Run, metric: str, x: str) -> list[tuple[float, float]]:
    """(x, metric) at each validation of a run: ``x`` is val/flops_spent or val/seconds_spent."""
    at = dict(run.series.get(x, []))
    return [(at[step], value) for step, value in run.series.get(metric, []) if step in at]


def averaged(all_runs: list[Run]) -> dict[str, list[Run]]:
    """{value: its finished runs with a final metric}, every value of the study (in its order)."""
    by_value: dict[str, list[Run]] = {}
    for run in all_runs:
        by_value.setdefault(run.value, [])
        if run.state == "finished" and run.final is not None:
            by_value[run.value].append(run)
    return by_value


def table(all_runs: list[Run], metric: str, axis: str) -> str:
    """The Markdown table of the study, one row per value, from its finished runs (the seeds
    column names them; a value with none says so)."""
    by_value = averaged(all_runs)
    contexts = sorted({int(c) for group in by_value.values() for r in group for c in r.contexts})
    header = [axis, "parameters", "FLOPs used", f"final {metric} min / mean / max",
              *(f"val/loss@{c} min / mean / max" for c in contexts), "tokens/s", "peak memory", "seeds averaged"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for value, group in by_value.items():
        if not group:
            lines.append("| " + " | ".join([value, *["no finished run"] * (len(header) - 2), "none"]) + " |")
            continue
        flops = [r.spent["spent"]["flops"] for r in group]
        speed = [r.spent["spent"]["tokens"] / r.spent["spent"]["seconds"] for r in group if r.spent["spent"]["seconds"]]
        kinds = dict.fromkeys(k for r in group for k in r.spent["peak_memory_mb"])
        memory = {k: max(r.spent["peak_memory_mb"].get(k, 0) for r in group) for k in kinds}
        lines.append("| " + " | ".join([
            value, f"{group[0].spent['parameters'] / 1e6:.2f}M",
            f"{min(flops):.4g}" + ("" if max(flops) == min(flops) else f" - {max(flops):.4g}"),
            spread([r.final for r in group]),
            *(longer_cell([r.contexts.get(str(c), {}) for r in group]) for c in contexts),
            f"{statistics.mean(speed):,.0f}" if speed else "not measured",
            ", ".join(f"{mb:,.0f} MiB ({kind.replace('_', ' ')})" for kind, mb in memory.items()) or "not measured",
            ", ".join(str(r.seed) for r in group)]) + " |")
    return "\n".join(lines)


def pairs(study: DictConfig, all_runs: list[Run]) -> dict[str, Paired | None]:
    """{value: :func:`zoo.cli.paired.paired` against the study's baseline} over ``all_runs`` (one
    run per value and seed), the baseline left out."""
    by_value = {value: {r.seed: r.final for r in group} for value, group in averaged(all_runs).items()}
    base = study.get("baseline") or next(iter(study["values"]))
    lower = study.get("better", "lower") == "lower"
    return {value: paired(by_value.get(base, {}), finals, lower) for value, finals in by_value.items() if value != base}


def against_baseline(study: DictConfig, all_runs: list[Run], metric: str, effect: float, where: str = "") -> str:
    """The paired comparison of each value with the study's baseline (``baseline:``, else its first
    value) over the seeds both finished (:mod:`zoo.cli.paired`): a Markdown table, and the line of
    how many seeds would detect a difference of ``effect``. ``where``: which of the study's runs
    these are (a base, a budget, a learning rate), for the heading."""
    by_value = {value: {r.seed: r.final for r in group} for value, group in averaged(all_runs).items()}
    base = study.get("baseline") or next(iter(study["values"]))
    lower = study.get("better", "lower") == "lower"
    header = ["value", "paired seeds", f"mean difference in {metric}", "95% interval (t)", "95% interval (bootstrap)",
              "p (paired t-test)", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    needed = []
    for value, result in pairs(study, all_runs).items():
        if result is None:
            both = sorted(set(by_value.get(base, {})) & set(by_value[value]))
            lines.append(f"| {value} | {', '.join(map(str, both)) or 'none'} | "
                         + " | ".join(["n/a: fewer than 2 seeds finished for both"] * (len(header) - 2)) + " |")
            continue
        lines.append("| " + " | ".join([
            value, ", ".join(map(str, result.seeds)), f"{result.mean:+.4f}",
            "[{:+.4f}, {:+.4f}]".format(*result.t_interval), "[{:+.4f}, {:+.4f}]".format(*result.bootstrap_interval),
            f"{result.p:.3g}", result.verdict]) + " |")
        seeds = seeds_needed(result.spread, effect)
        needed.append(f"{value} {seeds if seeds is not None else 'more than 10,000'} (sd of differences "
                      f"{result.spread:.4f})")
    direction = "lower" if lower else "higher"
    return (f"## Against the baseline, {base}{where}\n\nEach seed draws the same initial weights and data order for every "
            f"value, so each seed's difference (value - {base}) is paired; {direction} {metric} is better. The "
            f"intervals are 95%: Student's t over the seeds' differences, and a percentile bootstrap of their mean "
            f"({RESAMPLES:,} resamples, seeded); the verdict is the paired t-test's at alpha = {ALPHA:g}.\n\n" + "\n".join(lines)
            + f"\n\nSeeds a paired t-test needs to detect a difference of {effect:g} in {metric} (alpha {ALPHA:g}, "
            f"power {POWER:g}), from each value's observed spread: "
            + ("; ".join(needed) if needed else "n/a (no value with 2 paired seeds)") + ".\n")


def spread(values: list[float]) -> str:
    """min / mean / max of the seeds' values."""
    if not values:
        return "not measured"
    return f"{min(values):.4f} / {statistics.mean(values):.4f} / {max(values):.4f}"


def longer_cell(results: list[dict]) -> str:
    """The seeds' val loss at one longer context (each run's contexts.json entry), or why it has none."""
    reasons = sorted({r["n/a"] for r in results if "n/a" in r})
    if reasons:
        return f"n/a ({'; '.join(reasons)})"
    return spread([r["val/loss"] for r in results if "val/loss" in r])


def picture(by_value: dict[str, list[Run]], metric: str, x: str, label: str, path: Path) -> Path:
    """The val metric against ``x`` per value: the seeds' mean as a line, their min to max as a band
    (the seeds' validations taken in order, at their mean x)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for value, group in by_value.items():
        curves = [c for c in (_curve(r, metric, x) for r in group) if c]
        if not curves:
            continue
        n = min(map(len, curves))
        xs = [statistics.mean(c[i][0] for c in curves) for i in range(n)]
        ys = [[c[i][1] for c in curves] for i in range(n)]
        line, = ax.plot(xs, [statistics.mean(y) for y in ys], marker="o", label=f"{value} ({len(curves)} seeds)")
        ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], color=line.get_color(), alpha=0.2)
    ax.set_xlabel(label)
    ax.set_ylabel(metric)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return save_figure(fig, path)


def write_report(folder: Path, effect: float | None = None) -> list[Path]:
    """report.md, val_vs_flops.png and val_vs_seconds.png in a study's folder; returns their paths.
    ``effect``: the difference whose seeds needed report.md states (else the study's ``effect:``)."""
    check_folder(folder)
    study, all_runs = study_runs(folder)
    metric = study.get("metric") or "val/loss"
    finished = [r for r in all_runs if r.state == "finished"]
    first = load(finished[0].dir / "config.yaml") if finished else None
    longer = (f" val/loss@N: the validation's windows made N tokens long, evaluated once training ended "
              f"(eval_contexts; trained at context {OmegaConf.select(first, 'model.net.context')})."
              if any(r.contexts for r in finished) else "")
    text = (f"# Study {study.name}: {study.axis}\n\nEvery run has the same base and budget "
            f"({_budget(study.budget).replace('=', ' ')}); the runs differ in {study.axis} only (and in the seed: "
            f"each seed draws the same initial weights and data order for every value). Final {metric}: the last "
            f"validation of each run, as its budget.json recorded it at the run's end; the table averages the "
            f"finished runs only (the seeds column names them). Peak memory: each run's own, measured from its "
            f"start (on a CPU the process's peak resident set since then, Python and torch included; on a GPU "
            f"the tensors' peak).{longer}\n\n"
            f"{body(study, all_runs, metric, effect or study.get('effect') or EFFECT)}"
            f"## Runs\n\n{len(finished)} of {len(all_runs)} runs finished.\n\n"
            + "".join(f"- {r.name}: {r.said(metric)}\n" for r in all_runs)
            + f"\n![{metric} against FLOPs](val_vs_flops.png)\n![{metric} against wall time](val_vs_seconds.png)\n")
    fitted = scaling(study, all_runs, metric, folder)
    report = folder / "report.md"
    report.write_text(text + "".join(section for section, _ in fitted))
    by_value = curves(all_runs)
    return [report, picture(by_value, metric, "val/flops_spent", "training FLOPs", folder / "val_vs_flops.png"),
            picture(by_value, metric, "val/seconds_spent", "seconds of training steps", folder / "val_vs_seconds.png"),
            *(path for _, path in fitted)]


def curves(all_runs: list[Run]) -> dict[str, list[Run]]:
    """{a line of the pictures (a run's folder less its seed): its finished runs}."""
    by_line: dict[str, list[Run]] = {}
    for run in all_runs:
        if run.state == "finished" and run.final is not None:
            by_line.setdefault(run.name.rsplit("/seed_", 1)[0], []).append(run)
    return by_line


def cells(all_runs: list[Run]) -> dict[tuple, list[Run]]:
    """{(base, budget): its runs}, in the study's order: what one table compares."""
    found: dict[tuple, list[Run]] = {}
    for run in all_runs:
        found.setdefault((run.base, run.budget), []).append(run)
    return found


def label(study: DictConfig, base: str | None, budget: float | None) -> str:
    """Which cell of the study a table is of: `` (base NAME, KIND AMOUNT)``, or nothing."""
    kind = budget_amounts(study)[0]
    said = [*([f"base {base}"] if base else []), *([f"{kind} {budget:.6g}"] if budget is not None else [])]
    return f" ({', '.join(said)})" if said else ""


def at_rates(study: DictConfig, group: list[Run], rates: dict[tuple, float], own: bool = True) -> list[Run]:
    """Of one cell's runs, each value's at its own best rate (``own``) or at the baseline value's
    best rate (same-rate); all of them where the study has no lr_grid."""
    if not study.get("lr_grid"):
        return group
    baseline = study.get("baseline") or next(iter(study["values"]))
    return [r for r in group if r.lr is not None and r.lr == rates.get((r.base, r.value if own else baseline, r.budget))]


def grid_table(study: DictConfig, group: list[Run], metric: str, rates: dict[tuple, float]) -> str:
    """One cell's lr_grid: each value's first-seed final at each rate, and the rate it chose."""
    header = ["value", *(f"lr {float(r):g}" for r in study.lr_grid), "best rate"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for value in study["values"]:
        finals = {r.lr: r for r in group if r.value == value and r.seed == study.seeds[0]}
        best = rates.get((group[0].base, value, group[0].budget))
        lines.append("| " + " | ".join([value, *(f"{finals[float(r)].final:.4f}" if float(r) in finals and
                                                 finals[float(r)].final is not None else "not finished"
                                                 for r in study.lr_grid),
                                        f"{best:g}" if best is not None else "none: no grid run finished"]) + " |")
    return (f"The learning-rate grid: seed {study.seeds[0]}'s final {metric} at each rate; each value's best "
            f"({study.get('better', 'lower')} is better) runs its other seeds, and so does the baseline's best "
            f"for the same-rate comparison.\n\n" + "\n".join(lines) + "\n\n")


def body(study: DictConfig, all_runs: list[Run], metric: str, effect: float) -> str:
    """The report's tables: per base and budget, the values' finals and their pairing with the
    baseline (with an lr_grid: the grid, best rate against best rate, and same rate), then, with
    several bases, the matrix of paired differences (value x base)."""
    rates = best_rates(study, all_runs) if study.get("lr_grid") else {}
    baseline = study.get("baseline") or next(iter(study["values"]))
    text = ""
    for (base, budget), group in cells(all_runs).items():
        where = label(study, base, budget)
        if where:
            text += f"## Values{where}\n\n"
        if study.get("lr_grid"):
            text += grid_table(study, group, metric, rates)
        best = at_rates(study, group, rates)
        text += f"{table(best, metric, study.axis)}\n\n"
        if study.get("lr_grid"):
            text += against_baseline(study, best, metric, effect, f"{where}, each value at its best rate") + "\n"
            rate = rates.get((base, baseline, budget))
            same = f"{where}, every value at {baseline}'s rate {rate:g}" if rate is not None else where
            text += against_baseline(study, at_rates(study, group, rates, own=False), metric, effect, same) + "\n"
        else:
            text += against_baseline(study, best, metric, effect, where) + "\n"
    return text + (matrix(study, all_runs, rates, metric) if study.get("bases") else "")


def matrix(study: DictConfig, all_runs: list[Run], rates: dict[tuple, float], metric: str) -> str:
    """Does the change transfer? Each value (row) under each base and budget (column): its mean
    paired difference against the baseline value, the 95% t interval and the verdict."""
    baseline = study.get("baseline") or next(iter(study["values"]))
    columns = {where: pairs(study, at_rates(study, group, rates))
               for where, group in ((label(study, *cell).strip(" ()"), group) for cell, group in cells(all_runs).items())}
    lines = ["| value | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for value in study["values"]:
        if value == baseline:
            continue
        said = [("n/a: fewer than 2 seeds finished for both" if result is None else
                 "{:+.4f} [{:+.4f}, {:+.4f}] {}".format(result.mean, *result.t_interval, result.verdict))
                for result in (column.get(value) for column in columns.values())]
        lines.append(f"| {value} | " + " | ".join(said) + " |")
    return (f"## Across the bases: {metric} difference against {baseline}\n\nEach cell: the mean paired "
            f"difference (value - {baseline}) over the seeds both finished under that base, its 95% t interval "
            f"and the paired t-test's verdict at alpha = {ALPHA:g}.\n\n" + "\n".join(lines) + "\n\n")


def main(cfg: DictConfig) -> None:
    """``zoo report dir=DIR`` (conf/report.yaml)."""
    for path in write_report(Path(cfg.dir), cfg.get("effect")):
        print(f"wrote {path}")


def scaling(study: DictConfig, all_runs: list[Run], metric: str, folder: Path) -> list[tuple[str, Path]]:
    """A study of several budgets: per base, report.md's section on the fits of the final metric
    against FLOPs and the compute multipliers (:mod:`zoo.cli.scaling`), and its picture
    (``fit_vs_flops.png``, ``fit_vs_flops_BASE.png`` per base): the runs' points and the fitted curves."""
    if budget_amounts(study)[1] is None:
        return []
    rates = best_rates(study, all_runs) if study.get("lr_grid") else {}
    baseline = study.get("baseline") or next(iter(study["values"]))
    found = []
    for base in dict.fromkeys(r.base for r in all_runs):
        points: dict[str, dict[float, dict[int, tuple[float, float]]]] = {v: {} for v in study["values"]}
        for run in at_rates(study, [r for r in all_runs if r.base == base], rates):
            if run.state == "finished" and run.final is not None:
                points[run.value].setdefault(run.budget, {})[run.seed] = (run.spent["spent"]["flops"], run.final)
        text, fits = fitted_section(points, baseline, metric, label(study, base, None), budget_amounts(study)[0])
        path = folder / (f"fit_vs_flops_{base}.png" if base else "fit_vs_flops.png")
        found.append((text + f"![{metric} against FLOPs, fitted]({path.name})\n\n", fit_picture(points, fits, metric, path)))
    return found


def fit_picture(points: dict, fits: dict, metric: str, path: Path) -> Path:
    """Each value's runs (final metric against FLOPs spent) and its fitted curve."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for value, at in points.items():
        xs = [p[0] for seeds in at.values() for p in seeds.values()]
        if not xs:
            continue
        dots = ax.scatter(xs, [p[1] for seeds in at.values() for p in seeds.values()], label=value)
        if fits.get(value) is not None:
            grid = np.geomspace(min(xs), max(xs), 50)
            ax.plot(grid, fits[value](grid), color=dots.get_facecolor()[0])
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel(f"final {metric}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return save_figure(fig, path)

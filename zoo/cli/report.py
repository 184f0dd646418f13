"""``python -m zoo report dir=DIR``: a study's result, from the runs in its folder (each run's
config.yaml, metrics.csv and budget.json): ``report.md``, one row per value of the axis (parameters,
FLOPs used, the final val metric's min / mean / max over the seeds, the val loss at each longer
context of ``eval_contexts`` (contexts.json) likewise, tokens/s, peak memory), and
pictures of the val metric against FLOPs and against wall time, one line per value (the seeds' mean)
with the seeds' band (min to max)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from zoo.plots import plt, read_metrics, save_figure


def runs(folder: Path) -> dict[str, list[dict]]:
    """{value: [run, ...]} for the finished runs under a study's ``folder`` (those with budget.json),
    values in the study's order (its study.yaml), each run a dict of what the report shows."""
    found: dict[str, list[dict]] = defaultdict(list)
    for spent_file in sorted(folder.rglob("budget.json")):
        run = spent_file.parent
        cfg = OmegaConf.load(run / "config.yaml")
        if "study" not in cfg:
            raise ValueError(f"{run}: not a study's run (its config.yaml has no study: key); dir= is a zoo compare out=")
        spent = json.loads(spent_file.read_text())
        longer = run / "contexts.json"  # eval_contexts=[...]: zoo.train.longer_contexts
        found[cfg.study.value].append({"dir": run, "seed": cfg.seed, "spent": spent,
                                       "series": read_metrics(run / "metrics.csv"),
                                       "contexts": json.loads(longer.read_text())["eval"] if longer.is_file() else {}})
    if not found:
        raise FileNotFoundError(f"dir={folder}: no finished run (no budget.json under it)")
    study_file = folder / "study.yaml"
    order = list(OmegaConf.load(study_file)["values"]) if study_file.is_file() else sorted(found)
    return {value: found[value] for value in order if value in found}


def _curve(run: dict, metric: str, x: str) -> list[tuple[float, float]]:
    """(x, metric) at each validation of a run: ``x`` is val/flops_spent or val/seconds_spent."""
    at = dict(run["series"].get(x, []))
    return [(at[step], value) for step, value in run["series"].get(metric, []) if step in at]


def table(by_value: dict[str, list[dict]], metric: str, axis: str) -> str:
    """The Markdown table of the study, one row per value."""
    contexts = sorted({int(c) for group in by_value.values() for r in group for c in r["contexts"]})
    header = [axis, "parameters", "FLOPs used", f"final {metric} min / mean / max",
              *(f"val/loss@{c} min / mean / max" for c in contexts), "tokens/s", "peak memory", "seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for value, group in by_value.items():
        finals = [r["series"][metric][-1][1] for r in group if r["series"].get(metric)]
        flops = [r["spent"]["spent"]["flops"] for r in group]
        speed = [r["spent"]["spent"]["tokens"] / r["spent"]["spent"]["seconds"] for r in group]
        memory = {k: max(r["spent"]["peak_memory_mb"].get(k, 0) for r in group) for k in group[0]["spent"]["peak_memory_mb"]}
        lines.append("| " + " | ".join([
            value, f"{group[0]['spent']['parameters'] / 1e6:.2f}M",
            f"{min(flops):.4g}" + ("" if max(flops) == min(flops) else f" - {max(flops):.4g}"),
            spread(finals),
            *(longer_cell([r["contexts"].get(str(c), {}) for r in group]) for c in contexts),
            f"{statistics.mean(speed):,.0f}",
            ", ".join(f"{mb:,.0f} MiB ({kind.replace('_', ' ')})" for kind, mb in memory.items()) or "not measured",
            ", ".join(str(r["seed"]) for r in group)]) + " |")
    return "\n".join(lines)


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


def picture(by_value: dict[str, list[dict]], metric: str, x: str, label: str, path: Path) -> Path:
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
    ax.legend()
    return save_figure(fig, path)


def write_report(folder: Path) -> list[Path]:
    """report.md, val_vs_flops.png and val_vs_seconds.png in a study's folder; returns their paths."""
    by_value = runs(folder)
    first = OmegaConf.load(next(iter(by_value.values()))[0]["dir"] / "config.yaml")
    study_file = folder / "study.yaml"
    metric = OmegaConf.load(study_file).get("metric", "val/loss") if study_file.is_file() else "val/loss"
    budget = {k: v for k, v in first.budget.items() if v is not None}
    longer = (f" val/loss@N: the validation's windows made N tokens long, evaluated once training ended "
              f"(eval_contexts; trained at context {OmegaConf.select(first, 'model.net.context')})."
              if any(r["contexts"] for group in by_value.values() for r in group) else "")
    text = (f"# Study {first.study.name}: {first.study.axis}\n\nEvery run has the same base and budget "
            f"({', '.join(f'{k} {v:.4g}' for k, v in budget.items()) or 'none'}); the runs differ in "
            f"{first.study.axis} only (and in the seed: each seed draws the same initial weights and data order "
            f"for every value). Final {metric}: the last validation of each run.{longer}\n\n"
            f"{table(by_value, metric, first.study.axis)}\n\n"
            f"![{metric} against FLOPs](val_vs_flops.png)\n![{metric} against wall time](val_vs_seconds.png)\n")
    report = folder / "report.md"
    report.write_text(text)
    return [report, picture(by_value, metric, "val/flops_spent", "training FLOPs", folder / "val_vs_flops.png"),
            picture(by_value, metric, "val/seconds_spent", "seconds of training steps", folder / "val_vs_seconds.png")]


def main(cfg: DictConfig) -> None:
    """``zoo report dir=DIR`` (conf/report.yaml)."""
    for path in write_report(Path(cfg.dir)):
        print(f"wrote {path}")

"""``python -m zoo compare study=NAME``: run a study (conf/study/NAME.yaml) as one Hydra multirun
(every value of its axis x every seed, one budget) into ``out``, then write its report
(:mod:`zoo.cli.report`). ``launcher=joblib`` (or ``submitit_slurm``, where the Hydra plugin is
installed) picks Hydra's launcher; by default the runs go one after the other.

The whole study is checked before the first run (every run's config composed, every ``_target_``
found); one compare at a time holds ``out`` (the lock a training run takes on its folder). It
always ends with the report, which lists every run as finished, failed or not run: a run that
fails does not hide the others. SIGTERM or SIGINT (Ctrl-C) to compare reaches the runs as SIGTERM
(each saves its last.ckpt at the step it reached and stops, as a single run does); compare then
writes the report and exits non-zero, naming what finished and what did not. The same command
again resumes the study: finished runs are kept, stopped ones resume from their checkpoint,
failed and missing ones start anew."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.cli.commands import ERROR_FILE
from zoo.cli.precheck import check_study
from zoo.cli.report import Run, best_rates, load, read_run, study_runs, write_report
from zoo.cli.study import Key, budget_amounts, check_runs, keys, sweeps
from zoo.train import run_dir

OVERRIDES = "overrides.yaml"  # out/: the overrides every run of the study adds (compare's overrides= and steps=)


def main(cfg: DictConfig) -> None:
    """``zoo compare study=NAME [out=DIR] [launcher=NAME] [steps=N]`` (conf/compare.yaml)."""
    if "study" not in cfg:
        raise ValueError("zoo compare: no study; name one: study=NAME, NAME one of conf/study/*.yaml")
    study, out = cfg.study, Path(cfg.out)
    extra = [*cfg.overrides, *([f"trainer.max_steps={cfg.steps}", "quick=true"] if cfg.steps else [])]
    check_study(study, list(cfg.overrides))  # its keys, names, seeds, budget; every run composes; one axis
    check_runs(study, extra)  # every run's config, its _target_s found
    run_dir.lock(out, setting="out=")
    starts = plan(study, out, extra)
    caught = launch(study, out, starts, cfg.launcher, extra, len(keys(study)))
    if study.get("lr_grid") and not caught:  # the grid has run: the other seeds at the rates it chose
        rates = best_rates(study, study_runs(out)[1])
        more = {k: v for k, v in plan(study, out, extra, rates).items() if k not in starts}
        caught = launch(study, out, more, cfg.launcher, extra, len(keys(study, rates)))
    for path in write_report(out):
        print(f"wrote {path}")
    all_runs = study_runs(out)[1]
    if caught:
        print(f"error: {signal.Signals(caught).name}: the runs were stopped; {summary(all_runs, out)}",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + caught)
    if any(r.state != "finished" for r in all_runs):
        raise RuntimeError(summary(all_runs, out))


def launch(study: DictConfig, out: Path, starts: dict[Key, dict], launcher: str | None, extra: list[str],
           total: int) -> int | None:
    """Run ``starts`` (one multirun per base, :func:`zoo.cli.study.sweeps`) one after the other;
    returns the signal that stopped them, or None. ``total``: the study's runs, for the message."""
    for command in sweeps(study, out, starts, launcher, extra) if starts else []:
        (out / OVERRIDES).write_text(OmegaConf.to_yaml(extra))
        started = next(a for a in command if a.startswith("+study_run=")).count(",") + 1
        print(f"{started} of {total} runs into {out}:\n  " + " ".join(command[1:]), flush=True)
        caught = run_forwarding_signals(command, bool(launcher))
        if caught:
            return caught
    return None


def summary(all_runs: list[Run], out: Path) -> str:
    """What finished and what did not, in a line."""
    finished = [r.name for r in all_runs if r.state == "finished"]
    which = f" ({', '.join(finished)})" if finished else ""
    others = "; ".join(f"{r.name} ({r.state})" for r in all_runs if r.state != "finished") or "none"
    return (f"{len(finished)} of {len(all_runs)} runs finished{which}; not finished: {others}; "
            f"the report: {out / 'report.md'}; the same command resumes the study")


def plan(study: DictConfig, out: Path, extra: list[str], rates: dict[tuple, float] | None = None) -> dict[Key, dict]:
    """{run: the keys it starts with} for the study's runs (:func:`zoo.cli.study.keys`, ``rates``: an
    lr_grid's choices) that ``out`` does not hold finished: a stopped run resumes from its
    last.ckpt, a failed one starts anew (its files removed, its error.txt too), a missing one
    starts. Refuses (FileExistsError) an ``out`` that holds something else: another study, the same
    study with other overrides, or files of no study."""
    held = [p.name for p in out.iterdir() if p.name != run_dir.LOCK] if out.is_dir() else []
    if not held:
        return {run: {} for run in keys(study, rates)}
    study_file, overrides_file = out / "study.yaml", out / OVERRIDES
    if not study_file.is_file():
        raise FileExistsError(f"out={out} holds files ({', '.join(sorted(held)[:3])}) but no study.yaml: not a "
                              f"study's folder; pick another out=")
    saved = load(study_file)
    if saved is None or OmegaConf.to_container(saved) != OmegaConf.to_container(study):
        raise FileExistsError(f"out={out} holds another study's runs (its study.yaml is not study={study.name}'s as "
                              f"it is now): pick another out=, or resume that study with its own file")
    saved_extra = load(overrides_file, ListConfig)
    before = OmegaConf.to_container(saved_extra) if saved_extra is not None else []
    if before != extra:
        raise FileExistsError(f"out={out} holds this study's runs with overrides {before}, not {extra}: pick "
                              f"another out=, or resume with the same overrides= and steps=")
    metric = study.get("metric") or "val/loss"
    kind = budget_amounts(study)[0]
    return {r.key: start_keys(r) for r in (read_run(out, key, metric, kind) for key in keys(study, rates))
            if r.state != "finished"}


def start_keys(run: Run) -> dict:
    """What an unfinished run starts with: a stopped one its checkpoint, a failed one anew."""
    if run.state == "stopped":
        return {"ckpt_path": str((run.dir / "checkpoints" / "last.ckpt").resolve())}
    (run.dir / ERROR_FILE).unlink(missing_ok=True)
    return {"overwrite": True} if run.dir.is_dir() else {}


def run_forwarding_signals(command: list[str], launcher: bool) -> int | None:
    """Run ``command`` (the study's multirun) to its end; a SIGTERM or SIGINT to this process is
    sent on as SIGTERM to the multirun, whose runs run in it (Hydra's basic launcher), and, under
    another ``launcher``, to its workers. Returns the signal caught, or None."""
    child = subprocess.Popen(command, start_new_session=True)  # Ctrl-C reaches this process alone
    caught: list[int] = []

    def forward(signum: int, frame: object) -> None:
        caught.append(signum)
        for pid in [child.pid, *(workers(child.pid) if launcher else [])]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return caught[0] if caught else None


def workers(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux's /proc): where a launcher runs the trials."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(p) for p in children.read_text().split()]
        except OSError:
            pass
    return found

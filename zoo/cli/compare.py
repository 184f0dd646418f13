"""``python -m zoo compare study=NAME``: run a study (conf/study/NAME.yaml) as one Hydra multirun
(every value of its axis x every seed, one budget) into ``out``, then write its report
(:mod:`zoo.cli.report`). ``launcher=joblib`` (or ``submitit_slurm``, where the Hydra plugin is
installed) picks Hydra's launcher; by default the runs go one after the other."""

from __future__ import annotations

import subprocess
from pathlib import Path

from omegaconf import DictConfig

from zoo.cli.report import write_report
from zoo.cli.study import check_one_axis, sweep


def main(cfg: DictConfig) -> None:
    """``zoo compare study=NAME [out=DIR] [launcher=NAME] [steps=N]`` (conf/compare.yaml)."""
    if "study" not in cfg:
        raise ValueError("zoo compare: no study; name one: study=NAME, NAME one of conf/study/*.yaml")
    study, out = cfg.study, Path(cfg.out)
    check_one_axis(study, list(cfg.overrides))
    if out.exists() and any(out.rglob("metrics.csv")):
        raise FileExistsError(f"out={out} holds a study's runs already: pick another out= (a killed run resumes "
                              f"alone: python -m zoo train ckpt_path=RUN/checkpoints/last.ckpt with its overrides)")
    extra = [*cfg.overrides, *([f"trainer.max_steps={cfg.steps}", "quick=true"] if cfg.steps else [])]
    command = sweep(study, out, cfg.launcher, extra)
    print(f"{len(study['values']) * len(study.seeds)} runs into {out}:\n  " + " ".join(command[1:]), flush=True)
    done = subprocess.run(command)
    if done.returncode != 0:  # (the runs' own errors are above, in Hydra's log of the multirun)
        raise RuntimeError(f"the study's multirun stopped with exit status {done.returncode}; the finished runs' "
                           f"report: python -m zoo report dir={out}")
    for path in write_report(out):
        print(f"wrote {path}")

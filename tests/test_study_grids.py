"""Issue 48, items 2, 3 and 5: a study's ``lr_grid`` (each value at each rate, its best rate then
over every seed, best against best beside same-rate), several budgets (a power law fitted per
value, the compute multiplier against the baseline) and several bases (the value x base matrix).
The report's maths on study folders made here (no training); one tiny real study per item (slow)."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest
from omegaconf import OmegaConf, open_dict

from test_faults_studies import (TOKENS, compare_command, environment, fake_run, report, row, study_file,
                                 tiny_study)
from zoo.cli.paired import paired
from zoo.cli.precheck import check_shape
from zoo.cli.report import study_of
from zoo.cli.scaling import fit, multiplier
from zoo.cli.study import Key, keys, run_name, sweeps
from zoo.config import compose_config

SEEDS = (1, 2, 3)


def fake(out, key: Key, final: float, kind: str = "tokens", flops: float = 2e6, study: dict | None = None):
    """A finished run of ``key`` (:func:`test_faults_studies.fake_run` at the key's folder)."""
    folder = run_name(*key, kind=kind).rsplit("/seed_", 1)[0]
    run = fake_run(out, folder, key.seed, final=final, tokens=int(key.budget) if key.budget else TOKENS)
    config = OmegaConf.load(run / "config.yaml")
    config.study.value = key.value
    (run / "config.yaml").write_text(OmegaConf.to_yaml(config))
    spent = json.loads((run / "budget.json").read_text())
    spent["spent"]["flops"] = flops
    (run / "budget.json").write_text(json.dumps(spent))
    return run


def write_study(out, **changes) -> dict:
    study = tiny_study(values={"causal": [], "local": []}, seeds=list(SEEDS), **changes)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.yaml").write_text(OmegaConf.to_yaml(study))
    return study


def section(text: str, heading: str) -> str:
    """The part of report.md from ``heading`` to the next heading."""
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


# --- 2. matched learning rates -------------------------------------------------------------------

def test_an_lr_grid_runs_the_first_seed_at_each_rate_then_the_seeds_at_the_best_and_the_baseline_s():
    study = OmegaConf.create(tiny_study(seeds=[1, 2], lr_grid=[1e-3, 3e-3]))
    assert keys(study) == [Key(v, 1, None, lr) for v in ("causal", "local") for lr in (1e-3, 3e-3)]
    chosen = keys(study, {(None, "causal", None): 3e-3, (None, "local", None): 1e-3})
    assert [k for k in chosen if k.seed == 2] == [Key("causal", 2, None, 3e-3), Key("local", 2, None, 1e-3),
                                                  Key("local", 2, None, 3e-3)]
    assert [k for k in chosen if k.seed == 1] == keys(study)
    assert run_name(*chosen[-1]) == "local/lr_0.003/seed_2"


def test_a_grid_run_s_config_has_its_rate_over_the_base_s(tmp_path):
    study = OmegaConf.create(tiny_study(base=["model=gpt", "optim.lr=0.5"], lr_grid=[1e-3, 3e-3]))
    (command,) = sweeps(study, tmp_path, {key: {} for key in keys(study)})
    line = [a for a in command[command.index("--multirun") + 1:] if not a.startswith(("+study_run=", "hydra."))]
    assert "optim.lr=0.5" not in line
    run = compose_config([f"hydra.searchpath=[file://{tmp_path / 'configs'}]", "+study_run=local/lr_0.003/seed_1",
                          *line])
    assert run.optim.lr == 3e-3 and run.study.value == "local" and run.budget.tokens == TOKENS


def test_the_report_picks_each_value_s_best_rate_and_pairs_best_with_best_beside_same_rate(tmp_path):
    write_study(tmp_path, lr_grid=[1e-3, 3e-3], baseline="causal")
    grid = {("causal", 1e-3): 2.3, ("causal", 3e-3): 2.0, ("local", 1e-3): 1.9, ("local", 3e-3): 2.2}
    for (value, lr), final in grid.items():
        fake(tmp_path, Key(value, 1, None, lr), final)
    finals = {("causal", 3e-3): (2.0, 2.1, 2.05), ("local", 1e-3): (1.9, 2.02, 1.96), ("local", 3e-3): (2.2, 2.32, 2.24)}
    for (value, lr), values in finals.items():
        for seed, final in zip(SEEDS[1:], values[1:]):
            fake(tmp_path, Key(value, seed, None, lr), final)
    text = report(tmp_path)
    assert row(text, "causal").startswith("| causal | 2.3000 | 2.0000 | 0.003 |")
    assert row(text, "local").startswith("| local | 1.9000 | 2.2000 | 0.001 |")
    causal = dict(zip(SEEDS, finals[("causal", 3e-3)]))
    for heading, at in (("each value at its best rate", 1e-3), ("every value at causal's rate 0.003", 3e-3)):
        result = paired(causal, dict(zip(SEEDS, finals[("local", at)])))
        part = section(text, f"## Against the baseline, causal, {heading}")
        assert row(part, "local") == ("| local | 1, 2, 3 | {:+.4f} | [{:+.4f}, {:+.4f}] | [{:+.4f}, {:+.4f}] | {:.3g} | "
                                      "{} |").format(result.mean, *result.t_interval, *result.bootstrap_interval,
                                                     result.p, result.verdict)
    assert "better |" in row(section(text, "## Against the baseline, causal, each"), "local")
    assert "worse |" in row(section(text, "## Against the baseline, causal, every"), "local")
    assert "10 of 10 runs finished." in text and "- local/lr_0.003/seed_3: finished: final val/loss 2.2400" in text


@pytest.mark.parametrize("grid", [[1e-3], [1e-3, 1e-3], [1e-3, -1], "1e-3"])
def test_an_lr_grid_that_is_not_two_positive_rates_is_refused(grid):
    with pytest.raises(ValueError, match=r"study tiny: lr_grid=.*: expected two or more distinct positive learning "
                                         r"rates"):
        check_shape(OmegaConf.create(tiny_study(lr_grid=grid)))


def test_a_value_that_sets_the_rate_of_an_lr_grid_is_refused(tmp_path):
    from zoo.cli.precheck import Refused, check_study

    study = tiny_study(lr_grid=[1e-3, 3e-3], values={"causal": [], "fast": ["optim.lr=0.1"]}, axis="training")
    with pytest.raises(Refused, match=r"value fast sets optim\.lr=0\.1: its lr_grid sets optim\.lr for every run"):
        check_study(compose_config(study_file(tmp_path, study), "compare").study)


@pytest.mark.slow  # five tiny runs (~1 min)
def test_a_tiny_lr_grid_study_runs_its_grid_then_the_seeds_at_the_chosen_rates(tmp_path):
    from test_faults_studies import LOCAL

    study = tiny_study(seeds=[1, 2], lr_grid=[1e-3, 1e-2], values={"causal": [], "local": [LOCAL]})
    done = subprocess.run(compare_command(tmp_path, study), cwd=tmp_path, env=environment(tmp_path),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    finals = {(v, lr): json.loads((out / v / f"lr_{lr!r}" / "seed_1" / "budget.json").read_text())["final"]["val/loss"]
              for v in ("causal", "local") for lr in (1e-3, 1e-2)}
    best = {v: min((1e-3, 1e-2), key=lambda lr: finals[(v, lr)]) for v in ("causal", "local")}
    ran = sorted(str(p.parent.relative_to(out)) for p in out.rglob("budget.json"))
    expected = {f"{v}/lr_{lr!r}/seed_1" for v in ("causal", "local") for lr in (1e-3, 1e-2)}
    expected |= {f"causal/lr_{best['causal']!r}/seed_2", f"local/lr_{best['local']!r}/seed_2",
                 f"local/lr_{best['causal']!r}/seed_2"}
    assert ran == sorted(expected)
    assert OmegaConf.load(out / "local" / f"lr_{best['local']!r}" / "seed_2" / "config.yaml").optim.lr == best["local"]
    text = (out / "report.md").read_text()
    assert f"| causal | {finals[('causal', 1e-3)]:.4f} | {finals[('causal', 1e-2)]:.4f} | {best['causal']:g} |" in text
    assert "## Against the baseline, causal, each value at its best rate" in text

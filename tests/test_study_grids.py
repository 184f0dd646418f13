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
    study = tiny_study(**{"values": {"causal": [], "local": []}, "seeds": list(SEEDS), **changes})
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


# --- 3. several budgets and a compute multiplier -------------------------------------------------

def law(flops, a=3.0, b=0.3, c=1.5):
    return a * (np.asarray(flops) / 1e6) ** -b + c


def test_the_power_law_fit_recovers_its_curve_and_the_multiplier_is_the_compute_ratio():
    flops = [1e6, 2e6, 4e6, 8e6, 16e6]
    found = fit([(c, float(law(c))) for c in flops])
    assert (found.a, found.b, found.c) == pytest.approx((3.0, 0.3, 1.5), rel=1e-4)
    assert found.dof == 2 and max(map(abs, found.residuals)) < 1e-8
    assert multiplier(found, float(law(6e6)), 3e6) == pytest.approx(2.0, rel=1e-4)  # the baseline needs 2x
    assert multiplier(found, 1.4, 3e6) is None  # below its floor c: never reached
    assert fit([(c, float(law(c))) for c in flops[:3]]).dof == 0 and fit([(1e6, 2.0), (2e6, 1.9)]) is None


def budget_study(tmp_path, budgets: list[int]) -> dict:
    """A study of causal and local at ``budgets`` (tokens), 3 seeds: local at each budget reaches the
    loss causal reaches at twice its FLOPs, each seed shifting both alike."""
    study = write_study(tmp_path, budget={"tokens": budgets}, baseline="causal")
    for tokens in budgets:
        flops = 1e6 * tokens / budgets[0]
        for seed in SEEDS:
            shift = 0.01 * seed
            fake(tmp_path, Key("causal", seed, None, None, float(tokens)), float(law(flops)) + shift, flops=flops)
            fake(tmp_path, Key("local", seed, None, None, float(tokens)), float(law(2 * flops)) + shift, flops=flops)
    return study


def test_the_report_fits_each_value_and_states_its_compute_multiplier_with_an_interval_over_seeds(tmp_path):
    budget_study(tmp_path, [640, 1280, 2560, 5120])
    text = report(tmp_path)
    part = section(text, "## val/loss against training FLOPs")
    cells = row(part, "causal").split(" | ")
    assert [float(x) for x in cells[1:4]] == pytest.approx([3.0, 0.3, 1.52], rel=1e-3) and cells[-1] == "1 |"
    assert row(section(part, "Compute multiplier"), "local") == "| local | " + " | ".join(
        ["2; seeds: 2 [2, 2] (3 seeds)"] * 4) + " |"
    assert "| causal | 0.03M | 1e+06 | " in row(section(text, "## Values (tokens 640)"), "causal")
    assert "- local/tokens_5120.0/seed_3: finished" in text
    assert (tmp_path / "fit_vs_flops.png").stat().st_size > 1000 and "![val/loss against FLOPs, fitted]" in text


def test_three_budgets_fit_with_no_residual_degrees_of_freedom_and_two_not_at_all(tmp_path):
    budget_study(tmp_path / "three", [640, 1280, 2560])
    assert "| 0: the curve passes through the points and states no error of its own |" in report(tmp_path / "three")
    budget_study(tmp_path / "two", [640, 1280])
    text = report(tmp_path / "two")
    assert row(section(text, "## val/loss against training FLOPs"), "local").startswith("| local | no fit: fewer than 3")
    assert "n/a (no fit of causal)" in text


def test_a_folder_of_another_budget_beside_a_study_of_several_is_still_refused(tmp_path):
    budget_study(tmp_path, [640, 1280, 2560])
    fake_run(tmp_path, "strays", 1, tokens=999)
    with pytest.raises(ValueError, match=r"holds the runs of study tiny at budget tokens=640 \(study\.yaml, .*\) and "
                                         r"study tiny at budget tokens=999 \(strays/seed_1\)"):
        study_of(tmp_path)


@pytest.mark.parametrize("budget, said", [({"tokens": [640, 640]}, r"budget\.tokens=\[640, 640\]: an amount twice"),
                                          ({"tokens": [640, 0]}, r"budget\.tokens=\[640, 0\]: a budget is a positive")])
def test_a_list_of_budgets_that_is_not_distinct_positive_amounts_is_refused(budget, said):
    with pytest.raises(ValueError, match=said):
        check_shape(OmegaConf.create(tiny_study(budget=budget)))


def test_each_run_of_a_study_of_several_budgets_has_its_own_budget(tmp_path):
    study = OmegaConf.create(tiny_study(budget={"tokens": [640, 1280]}))
    (command,) = sweeps(study, tmp_path, {key: {} for key in keys(study)})
    line = [a for a in command[command.index("--multirun") + 1:] if not a.startswith(("+study_run=", "hydra."))]
    assert not any(a.startswith("budget.") for a in line)
    run = compose_config([f"hydra.searchpath=[file://{tmp_path / 'configs'}]", "+study_run=local/tokens_1280.0/seed_1",
                          *line])
    assert run.budget.tokens == 1280 and run.study.value == "local"


@pytest.mark.slow  # four tiny runs (~1 min)
def test_a_tiny_study_at_three_budgets_runs_each_and_reports_the_fit(tmp_path):
    from test_faults_studies import LOCAL

    study = tiny_study(budget={"tokens": [TOKENS // 5 * 2, TOKENS // 5 * 3, TOKENS]}, values={"causal": [],
                                                                                                 "local": [LOCAL]})
    done = subprocess.run(compare_command(tmp_path, study), cwd=tmp_path, env=environment(tmp_path),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    steps = {json.loads(p.read_text())["steps"] for p in out.glob("causal/tokens_*/seed_1/budget.json")}
    assert steps == {2, 3, 5}
    text = (out / "report.md").read_text()
    assert "## val/loss against training FLOPs" in text and (out / "fit_vs_flops.png").is_file()


# --- 5. one change across every base -------------------------------------------------------------

TWO_BASES = {"deep": ["model=gpt", "model.net.n_layers=2"], "shallow": ["model=gpt", "model.net.n_layers=1"]}


def test_the_report_has_a_value_by_base_matrix_of_paired_differences(tmp_path):
    write_study(tmp_path, base=None, bases=TWO_BASES, values={"causal": [], "local": [], "strided": []},
                baseline="causal")
    finals = {("deep", "causal"): (2.0, 2.1, 2.05), ("deep", "local"): (1.9, 2.02, 1.96),
              ("deep", "strided"): (2.1, 2.1, 2.2), ("shallow", "causal"): (2.5, 2.4, 2.45),
              ("shallow", "local"): (2.52, 2.38, 2.5)}
    for (base, value), values in finals.items():
        for seed, final in zip(SEEDS, values):
            fake(tmp_path, Key(value, seed, base), final)
    text = report(tmp_path)
    part = section(text, "## Across the bases: val/loss difference against causal")
    assert part.splitlines()[4] == "| value | base deep | base shallow |"
    cell = {}
    for base in TWO_BASES:
        result = paired(dict(zip(SEEDS, finals[(base, "causal")])), dict(zip(SEEDS, finals[(base, "local")])))
        cell[base] = "{:+.4f} [{:+.4f}, {:+.4f}] {}".format(result.mean, *result.t_interval, result.verdict)
    assert row(part, "local") == f"| local | {cell['deep']} | {cell['shallow']} |"
    assert row(part, "strided").endswith("| n/a: fewer than 2 seeds finished for both |")
    assert "## Against the baseline, causal (base shallow)" in text and "- shallow/strided/seed_2: missing" in text


def test_each_base_is_a_multirun_of_its_own_and_its_runs_are_its_configs(tmp_path):
    from test_faults_studies import LOCAL

    study = OmegaConf.create(tiny_study(base=None, bases=TWO_BASES, values={"causal": [], "local": [LOCAL]}))
    commands = sweeps(study, tmp_path, {key: {} for key in keys(study)})
    assert [next(a for a in c if a.startswith("+study_run=")) for c in commands] == [
        "+study_run=deep/causal/seed_1,deep/local/seed_1", "+study_run=shallow/causal/seed_1,shallow/local/seed_1"]
    for command, layers in zip(commands, (2, 1)):
        line = [a for a in command[command.index("--multirun") + 1:] if not a.startswith(("+study_run=", "hydra."))]
        name = next(a for a in command if a.startswith("+study_run=")).split("=")[1].split(",")[1]
        run = compose_config([f"hydra.searchpath=[file://{tmp_path / 'configs'}]", f"+study_run={name}", *line])
        assert run.model.net.n_layers == layers and run.study.base == name.split("/")[0]
        assert run.model.net.mask.window == 8


@pytest.mark.parametrize("change, said", [
    ({"bases": TWO_BASES}, r"study tiny: both base and bases: name one"),
    ({"base": None, "bases": {"../up": []}}, r"study tiny: base '\.\./up' is not a name"),
    ({"base": None, "bases": {"a": "model=gpt"}}, r"study tiny: base a: expected a list of overrides"),
])
def test_bases_that_are_not_named_lists_of_overrides_are_refused(change, said):
    with pytest.raises(ValueError, match=said):
        check_shape(OmegaConf.create(tiny_study(**change)))


def test_a_value_that_differs_in_a_second_axis_under_one_base_is_refused_naming_it(tmp_path):
    from zoo.cli.precheck import Refused, check_study

    bases = {"wide": ["model=gpt", "model.net.block.n_heads=2"], "four": ["model=gpt", "model.net.block.n_heads=4"]}
    study = tiny_study(base=None, bases=bases, axis="block", values={"two": [], "four": ["model.net.block.n_heads=4"]})
    with pytest.raises(Refused, match=r"values two and four under base four are the same config"):
        check_study(compose_config(study_file(tmp_path, study), "compare").study)


@pytest.mark.slow  # four tiny runs (~1 min)
def test_a_tiny_study_over_two_bases_runs_every_value_under_each(tmp_path):
    from test_faults_studies import BASE, LOCAL

    bases = {"deep": BASE, "shallow": [*BASE, "model.net.n_layers=1"]}
    study = tiny_study(base=None, bases=bases, seeds=[1, 2], values={"causal": [], "local": [LOCAL]})
    done = subprocess.run(compare_command(tmp_path, study), cwd=tmp_path, env=environment(tmp_path),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    for base, layers in (("deep", 2), ("shallow", 1)):
        for value in ("causal", "local"):
            assert OmegaConf.load(out / base / value / "seed_2" / "config.yaml").model.net.n_layers == layers
    text = (out / "report.md").read_text()
    assert row(section(text, "## Across the bases"), "local").count("]") == 2


# --- 4. bits per byte ----------------------------------------------------------------------------

def test_a_bits_per_byte_study_on_data_that_cannot_count_its_bytes_is_refused_naming_both(tmp_path):
    from zoo.cli.precheck import Refused, check_study

    study = tiny_study(metric="val/bpb")  # the tiny GPT on tinyshakespeare's random windows
    with pytest.raises(Refused, match=r"study tiny: metric=val/bpb: model=gpt, data=tinyshakespeare cannot count the "
                                      r"validation split's bytes; bits per byte need a next-token LM .* on data=text"):
        check_study(compose_config(study_file(tmp_path, study), "compare").study)
    bert = tiny_study(metric="val/bpb", base=["model=bert", "data=text", "data.source=x.txt"], axis="block",
                      values={"gelu": [], "relu": ["model.net.block.activation=relu"]})
    with pytest.raises(Refused, match=r"metric=val/bpb: model=bert, data=text cannot count"):
        check_study(compose_config(study_file(tmp_path, bert), "compare").study)
    text = tiny_study(metric="val/bpb", base=["model=gpt", "data=text", "data.source=x.txt"])
    check_study(compose_config(study_file(tmp_path, text), "compare").study)  # a GPT on data=text gives it


@pytest.mark.slow  # two tiny runs on data=text (~1 min)
def test_a_tiny_study_on_text_reports_bits_per_byte_the_test_stage_s_on_the_same_split(tmp_path):
    from test_data_text import write_corpus
    from test_faults_studies import BASE, LOCAL

    corpus = write_corpus(tmp_path / "corpus", files=8)
    held = corpus / "doc0.md"
    base = [b for b in BASE if b not in ("test=false", "trainer.val_check_interval=2")
            and not b.startswith(("data.check", "data.val_batches"))]
    base += ["data=text", f"data.source={corpus}", f"data.val={held}", f"data.test={held}", "test=true",
             "trainer.val_check_interval=50"]
    study = tiny_study(metric="val/bpb", base=base, values={"causal": [], "local": [LOCAL]})
    done = subprocess.run(compare_command(tmp_path, study), cwd=tmp_path, env=environment(tmp_path),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "out" / "report.md").read_text()
    for value in ("causal", "local"):
        run = tmp_path / "out" / value / "seed_1"
        final = json.loads((run / "budget.json").read_text())["final"]
        with open(run / "metrics.csv") as f:
            tested = next(float(r["test/bpb"]) for r in __import__("csv").DictReader(f) if r.get("test/bpb"))
        assert final["val/bpb"] == pytest.approx(tested, rel=1e-6)  # the same split and weights: the same number
        assert f" | {final['val/bpb']:.4f} / " in row(text, value)

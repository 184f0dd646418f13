"""Issue 48, paired statistics in ``zoo report``: each value's seeds against the baseline's, a mean
difference with its t and bootstrap intervals, the paired t-test's p-value and verdict, and how many
seeds would detect a stated difference. The statistics are checked against scipy on the same numbers
and, by simulation, for what they promise (coverage, power); the report's table on study folders
made here (no training)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from test_faults_studies import fake_run, fake_study, report, row
from zoo.cli.paired import paired, power, seeds_needed
from zoo.cli.precheck import check_shape


def test_the_paired_test_is_scipy_s_ttest_rel_and_the_interval_is_the_t_interval():
    base = {1: 2.31, 2: 2.27, 3: 2.35, 4: 2.30, 5: 2.33}
    value = {1: 2.29, 2: 2.26, 3: 2.30, 4: 2.31, 5: 2.28, 9: 1.0}  # seed 9: no baseline run, not paired
    result = paired(base, value)
    a, b = np.array([base[s] for s in range(1, 6)]), np.array([value[s] for s in range(1, 6)])
    assert result.seeds == (1, 2, 3, 4, 5)
    assert result.p == pytest.approx(stats.ttest_rel(b, a).pvalue, rel=1e-12)
    interval = stats.ttest_rel(b, a).confidence_interval(0.95)
    assert result.t_interval == pytest.approx((interval.low, interval.high), rel=1e-12)
    assert result.mean == pytest.approx((b - a).mean())
    low, high = result.bootstrap_interval
    assert (b - a).min() <= low < result.mean < high <= (b - a).max()


@pytest.mark.parametrize("lower, verdict", [(True, "better"), (False, "worse")])
def test_a_constant_shift_is_certain_and_its_direction_is_the_study_s(lower, verdict):
    result = paired({1: 2.0, 2: 2.5, 3: 3.0}, {1: 1.9, 2: 2.4, 3: 2.9}, lower_is_better=lower)
    assert result.p < 1e-9 and result.verdict == verdict and result.mean == pytest.approx(-0.1)


def test_identical_runs_are_no_difference_and_one_seed_is_no_test():
    assert paired({1: 2.0, 2: 2.5}, {1: 2.0, 2: 2.5}).verdict == "no difference at alpha = 0.05"
    assert paired({1: 2.0, 2: 2.5}, {1: 2.0, 3: 2.5}) is None


def test_the_t_interval_covers_the_true_difference_95_times_in_100():
    """Simulated studies of 5 seeds whose differences are drawn around a known shift: the interval
    holds the shift in 95% of them, and an A/A draw (no shift) is called a difference in 5%."""
    rng = np.random.default_rng(7)
    covered = called = 0
    trials = 2000
    for _ in range(trials):
        base = rng.normal(2.0, 0.05, 5)
        result = paired(dict(enumerate(base)), dict(enumerate(base + 0.01 + rng.normal(0, 0.02, 5))), resamples=10)
        covered += result.t_interval[0] <= 0.01 <= result.t_interval[1]
        same = paired(dict(enumerate(base)), dict(enumerate(base + rng.normal(0, 0.02, 5))), resamples=10)
        called += not same.verdict.startswith("no difference")
    assert abs(covered / trials - 0.95) < 0.015
    assert abs(called / trials - 0.05) < 0.015


def test_a_known_shift_is_detected_at_the_stated_power_with_the_seeds_needed():
    spread, effect = 0.02, 0.01
    seeds = seeds_needed(spread, effect)
    assert power(seeds, spread, effect) >= 0.8 > power(seeds - 1, spread, effect)
    rng = np.random.default_rng(3)
    trials = 2000
    found = sum(paired(dict(enumerate(np.zeros(seeds))), dict(enumerate(rng.normal(-effect, spread, seeds))),
                        resamples=10).verdict
                == "better" for _ in range(trials))
    assert abs(found / trials - power(seeds, spread, effect)) < 0.03


def test_the_report_tables_each_value_against_the_baseline_and_states_the_seeds_needed(tmp_path):
    fake_study(tmp_path, values=("causal", "local", "same", "alone"), seeds=(1, 2, 3))
    finals = {"causal": (2.00, 2.10, 2.05), "local": (1.90, 2.05, 1.98), "same": (2.00, 2.10, 2.05)}
    for value, values in finals.items():
        for seed, final in zip((1, 2, 3), values):
            fake_run(tmp_path, value, seed, final=final)
    fake_run(tmp_path, "alone", 1, final=1.5)
    text = report(tmp_path)
    assert "## Against the baseline, causal" in text
    text = text[text.index("## Against the baseline"):]  # its table, not the first
    local = paired(dict(zip((1, 2, 3), finals["causal"])), dict(zip((1, 2, 3), finals["local"])))
    assert row(text, "local") == (f"| local | 1, 2, 3 | {local.mean:+.4f} | [{local.t_interval[0]:+.4f}, "
                                  f"{local.t_interval[1]:+.4f}] | [{local.bootstrap_interval[0]:+.4f}, "
                                  f"{local.bootstrap_interval[1]:+.4f}] | {local.p:.3g} | better |")
    assert row(text, "same").endswith("| +0.0000 | [+0.0000, +0.0000] | [+0.0000, +0.0000] | 1 | no difference at "
                                      "alpha = 0.05 |")
    assert row(text, "alone").startswith("| alone | 1 | n/a: fewer than 2 seeds finished for both |")
    assert (f"detect a difference of 0.01 in val/loss (alpha 0.05, power 0.8), from each value's observed spread: "
            f"local {seeds_needed(local.spread, 0.01)} (sd of differences {local.spread:.4f}); same 2") in text


@pytest.mark.parametrize("change, said", [
    ({"better": "smaller"}, "better=smaller: expected lower (a loss) or higher (an accuracy)"),
    ({"baseline": "rotary"}, "baseline=rotary is not one of its values (causal, local)"),
    ({"effect": 0}, "effect=0: expected a positive difference of its metric"),
])
def test_a_study_s_statistics_keys_are_checked(change, said):
    study = OmegaConf.create({"name": "tiny", "axis": "mask", "seeds": [1], "budget": {"tokens": 10},
                              "values": {"causal": [], "local": []}, **change})
    with pytest.raises(ValueError, match=re.escape(f"study tiny: {said}")):
        check_shape(study)


@pytest.mark.slow  # a tiny study of two values and two seeds, run twice (~2 min)
def test_the_same_study_run_twice_gives_the_same_finals_and_a_paired_table(tmp_path):
    """Issue 48, item 7: the whole study run again into another folder gives every run the same
    final to the bit; its report pairs local with causal over both seeds."""
    import json
    import subprocess

    from test_faults_studies import compare_command, environment, tiny_study

    study = tiny_study(seeds=[1, 2])
    finals = []
    for out in ("first", "second"):
        done = subprocess.run([*compare_command(tmp_path, study)[:-1], f"out={tmp_path / out}"], cwd=tmp_path,
                              env=environment(tmp_path), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        finals.append({(v, s): json.loads((tmp_path / out / v / f"seed_{s}" / "budget.json").read_text())["final"]
                       ["val/loss"] for v in ("causal", "local") for s in (1, 2)})
    assert finals[0] == finals[1]
    assert finals[0][("causal", 1)] != finals[0][("causal", 2)]  # the seeds differ: not one run four times
    text = (tmp_path / "first" / "report.md").read_text()
    assert row(text[text.index("## Against the baseline, causal"):], "local").startswith("| local | 1, 2 | ")

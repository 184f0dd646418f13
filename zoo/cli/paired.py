"""Paired statistics of a study's values against its baseline, over seeds.

Every seed of a study gives each value the same initial weights draw and the same data order, so
a seed's final metric for a value and for the baseline form a pair: their difference cancels
what the seed alone did. Over the seeds, for each value:

- the mean difference (value - baseline), and its 95% confidence interval two ways: Student's t
  on the differences, and a percentile bootstrap of their mean (seeded: the report is the same
  every time it is written);
- the paired t-test's two-sided p-value (``scipy.stats.ttest_1samp`` of the differences against 0,
  which is ``ttest_rel`` of the two columns);
- a verdict at ``alpha``: better, worse (by the study's ``better:`` direction), or no difference;
- from the differences' observed spread, how many seeds a paired t-test needs to detect a
  difference of a given size with a given power (the noncentral t distribution).

Differences that are all equal have no spread: none at all (an A/A study of identical runs) is
no difference (p = 1), a constant shift is a certain one (p = 0)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05
POWER = 0.8
RESAMPLES = 10_000  # the bootstrap's resamples
MOST_SEEDS = 10_000  # seeds_needed gives up past this many


@dataclass(frozen=True)
class Paired:
    """A value against the baseline over their paired seeds."""

    seeds: tuple[int, ...]  # the seeds where both finished
    differences: tuple[float, ...]  # value - baseline, per seed
    mean: float
    t_interval: tuple[float, float]
    bootstrap_interval: tuple[float, float]
    p: float
    verdict: str

    @property
    def spread(self) -> float:
        """The differences' sample standard deviation."""
        return statistics.stdev(self.differences)


def paired(baseline: dict[int, float], value: dict[int, float], lower_is_better: bool = True,
           alpha: float = ALPHA, resamples: int = RESAMPLES) -> Paired | None:
    """``value``'s finals against ``baseline``'s ({seed: final}) over the seeds both have; None
    with fewer than two such seeds (no interval, no test). ``resamples``: the bootstrap's."""
    seeds = tuple(sorted(set(baseline) & set(value)))
    if len(seeds) < 2:
        return None
    diffs = np.array([value[s] - baseline[s] for s in seeds], dtype=np.float64)
    mean, n = float(diffs.mean()), len(diffs)
    p = (1.0 if mean == 0 else 0.0) if np.all(diffs == diffs[0]) else float(stats.ttest_1samp(diffs, 0.0).pvalue)
    t_interval = interval(diffs.tolist(), alpha)
    means = np.random.default_rng(0).choice(diffs, size=(resamples, n)).mean(axis=1)
    bootstrap = (float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2)))
    if p < alpha:
        verdict = "better" if (mean < 0) == lower_is_better else "worse"
    else:
        verdict = f"no difference at alpha = {alpha:g}"
    return Paired(seeds, tuple(diffs.tolist()), mean, t_interval, bootstrap, p, verdict)


def interval(values: list[float], alpha: float = ALPHA) -> tuple[float, float]:
    """The 1 - ``alpha`` Student's t interval of the mean of ``values`` (two or more); values that
    are all equal (no spread: 0 / 0) give the point itself."""
    sample = np.array(values, dtype=np.float64)
    mean, n = float(sample.mean()), len(sample)
    if np.all(sample == sample[0]):
        return mean, mean
    half = float(stats.t.ppf(1 - alpha / 2, n - 1) * sample.std(ddof=1) / math.sqrt(n))
    return mean - half, mean + half


def power(seeds: int, spread: float, effect: float, alpha: float = ALPHA) -> float:
    """The chance that a two-sided paired t-test over ``seeds`` seeds at ``alpha`` finds a true mean
    difference ``effect`` whose per-seed differences have standard deviation ``spread``."""
    df = seeds - 1
    shift = abs(effect) / spread * math.sqrt(seeds)  # the noncentrality
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def seeds_needed(spread: float, effect: float, alpha: float = ALPHA, wanted: float = POWER) -> int | None:
    """The fewest seeds (at least 2) whose paired t-test detects ``effect`` with power ``wanted``,
    given the differences' standard deviation ``spread``; None past :data:`MOST_SEEDS`."""
    if spread == 0:
        return 2
    low, high = 1, 2  # power grows with the seeds: double past the answer, then halve the gap
    while power(high, spread, effect, alpha) < wanted:
        if high >= MOST_SEEDS:
            return None
        low, high = high, min(2 * high, MOST_SEEDS)
    while high - low > 1:  # power(low) < wanted <= power(high)
        middle = (low + high) // 2
        low, high = (low, middle) if power(middle, spread, effect, alpha) >= wanted else (middle, high)
    return high

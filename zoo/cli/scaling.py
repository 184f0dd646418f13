"""Loss against training FLOPs, for a study run at several budgets: a power law plus a constant,
L(C) = a * (C / C0)^-b + c (C0 the smallest FLOPs fitted, so that a is a loss, not 1e30 of one),
fitted by least squares (``scipy.optimize.curve_fit``), and a value's **compute multiplier**
against the baseline: the FLOPs at which the baseline's fitted curve reaches the value's loss,
divided by the FLOPs the value spent (2 = the value's loss would cost the baseline twice the
compute). Three parameters: three budgets fit exactly (no residual degrees of freedom, the fit
states no error of its own); fewer cannot be fitted."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from zoo.cli.paired import interval

PARAMETERS = 3  # a, b, c


@dataclass(frozen=True)
class Fit:
    """L(C) = a * (C / scale)^-b + c through ``points`` ((FLOPs, loss)), and its residuals."""

    a: float
    b: float
    c: float
    scale: float
    points: tuple[tuple[float, float], ...]

    def __call__(self, flops: float | np.ndarray) -> float | np.ndarray:
        return self.a * (np.asarray(flops) / self.scale) ** -self.b + self.c

    @property
    def residuals(self) -> list[float]:
        """Measured minus fitted loss at each point."""
        return [loss - float(self(flops)) for flops, loss in self.points]

    @property
    def dof(self) -> int:
        """Residual degrees of freedom: points less parameters."""
        return len(self.points) - PARAMETERS

    def flops_for(self, loss: float) -> float | None:
        """The FLOPs at which the curve reaches ``loss``; None where it never does (at or below c,
        its floor, or a curve that does not fall)."""
        if loss <= self.c or self.a <= 0 or self.b <= 0:
            return None
        return self.scale * ((loss - self.c) / self.a) ** (-1 / self.b)


def fit(points: list[tuple[float, float]]) -> Fit | None:
    """The least-squares power law plus constant through (FLOPs, loss) ``points`` (three or more at
    distinct FLOPs), a and b positive (the loss falls with compute); None where there are fewer or
    the fit does not converge."""
    points = sorted(points)
    if len({c for c, _ in points}) < PARAMETERS:
        return None
    flops, loss = np.array(points, dtype=np.float64).T
    scale = float(flops[0])
    guess = (max(float(loss[0] - loss[-1]), 1e-6), 0.5, float(loss[-1]) - 1e-3)
    try:
        with warnings.catch_warnings():  # three points leave no covariance to estimate: not used here
            warnings.simplefilter("ignore", OptimizeWarning)
            (a, b, c), _ = curve_fit(lambda x, a, b, c: a * x ** -b + c, flops / scale, loss, p0=guess,
                                     bounds=([0.0, 0.0, -np.inf], [np.inf, 10.0, np.inf]), maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    if not all(map(math.isfinite, (a, b, c))):
        return None
    return Fit(float(a), float(b), float(c), scale, tuple(map(tuple, points)))


def multiplier(baseline: Fit, loss: float, flops: float) -> float | None:
    """The baseline's FLOPs to reach ``loss`` over ``flops`` (the value's); None where it never does."""
    needed = baseline.flops_for(loss)
    return None if needed is None else needed / flops


def t_cell(values: list[float]) -> str:
    """The seeds' multipliers as ``mean [low, high] (N seeds)``, or why there is no interval."""
    if len(values) < 2:
        return f"n/a ({len(values)} seed{'s' * (len(values) != 1)} with a fit: no interval)"
    low, high = interval(values)
    return f"{sum(values) / len(values):.3g} [{low:.3g}, {high:.3g}] ({len(values)} seeds)"


def fit_table(fits: dict[str, Fit | None]) -> str:
    """Each value's fit: its parameters and residuals, or why it has none."""
    lines = ["| value | a | b | c | C0 | residuals (measured - fitted, by FLOPs) | residual dof |", "|---|---|---|---|---|---|---|"]
    for value, found in fits.items():
        if found is None:
            lines.append(f"| {value} | " + " | ".join(["no fit: fewer than 3 budgets finished, or no convergence"] * 6)
                         + " |")
            continue
        dof = ("0: the curve passes through the points and states no error of its own" if found.dof == 0
               else str(found.dof))
        lines.append(f"| {value} | {found.a:.4g} | {found.b:.4g} | {found.c:.4g} | {found.scale:.4g} | "
                     + ", ".join(f"{r:+.2e}" for r in found.residuals) + f" | {dof} |")
    return "\n".join(lines)


def multipliers(points: dict[str, dict[float, dict[int, tuple[float, float]]]], baseline: str, kind: str) -> str:
    """Each value's compute multiplier against ``baseline`` at each budget: from the seeds' mean
    points, and over the seeds (the baseline fitted per seed, where a seed has 3 or more budgets)."""
    fitted = fit([mean_point(seeds) for seeds in points[baseline].values()])
    per_seed = {seed: fit([at[seed] for at in points[baseline].values() if seed in at])
                for seed in {s for at in points[baseline].values() for s in at}}
    budgets = sorted({b for at in points.values() for b in at})
    lines = ["| value | " + " | ".join(f"{kind} {b:.6g}" for b in budgets) + " |", "|" + "---|" * (len(budgets) + 1)]
    for value, at in points.items():
        if value == baseline:
            continue
        said = []
        for budget in budgets:
            if budget not in at or fitted is None:
                said.append("n/a (no run finished)" if budget not in at else f"n/a (no fit of {baseline})")
                continue
            mean = multiplier(fitted, *reversed(mean_point(at[budget])))
            seeds = [m for m in (multiplier(per_seed[s], loss, flops) for s, (flops, loss) in at[budget].items()
                                 if per_seed.get(s) is not None) if m is not None]
            said.append(f"{mean:.3g}" if mean is not None else f"n/a (below {baseline}'s fitted floor c)")
            said[-1] += f"; seeds: {t_cell(seeds)}"
        lines.append(f"| {value} | " + " | ".join(said) + " |")
    return "\n".join(lines)


def mean_point(seeds: dict[int, tuple[float, float]]) -> tuple[float, float]:
    """The seeds' mean (FLOPs, loss) at one budget."""
    return tuple(float(np.mean([p[i] for p in seeds.values()])) for i in (0, 1))


def section(points: dict[str, dict[float, dict[int, tuple[float, float]]]], baseline: str, metric: str,
            where: str, kind: str) -> tuple[str, dict[str, Fit | None]]:
    """report.md's section on the budgets (``points``: {value: {budget: {seed: (FLOPs spent, final)}}}),
    and each value's fit for the picture."""
    fits = {value: fit([mean_point(seeds) for seeds in at.values()]) for value, at in points.items()}
    return (f"## {metric} against training FLOPs{where}\n\nPer value, L(C) = a (C / C0)^-b + c fitted by least "
            f"squares (scipy.optimize.curve_fit; a, b >= 0) to the seeds' mean final {metric} and FLOPs at each "
            f"budget. Three parameters: with fewer than 4 budgets the fit has no residual degrees of freedom.\n\n"
            f"{fit_table(fits)}\n\nCompute multiplier against {baseline}: the FLOPs at which {baseline}'s fitted "
            f"curve reaches the value's loss, divided by the value's FLOPs, at each budget (above 1: the value "
            f"saves compute); then its mean and 95% t interval over the seeds, {baseline} fitted per seed (n/a "
            f"where fewer than 2 seeds have 3 budgets).\n\n{multipliers(points, baseline, kind)}\n\n"), fits

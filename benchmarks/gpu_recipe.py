"""What a training run took, read from its metrics.csv: the final val loss, the training time with
the compile time apart, and the val loss against the training time (benchmarks/gpu.sh prints it
for the baby GPT recipe).

    python benchmarks/gpu_recipe.py outputs/gpt_shakespeare_char/<run>/metrics.csv [--goal-loss 1.47 --goal-seconds 60]

``train/time`` (zoo.train.callbacks.Throughput, Lightning's ThroughputMonitor) is the training wall
time since the fit began, validation left out, logged with the count of batches so far
(``train/batches``). The first logged interval holds the compile (torch.compile's first step) and
the first step's warm-up; the steps after it run at the steady rate. So the compile time is
estimated as the first row's time less its batches at the steady rate (the median rate of the
later intervals), and the training time without it is the rest.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

from zoo.plots import read_metrics


@dataclass
class RecipeTimes:
    """Seconds of a run's training: ``compile`` (the first logged interval's excess over the steady
    rate), ``steady`` (the rest), ``per_step`` (the steady seconds per batch), over ``steps`` batches;
    ``val`` holds (batches trained, training seconds without the compile, val loss) per evaluation."""

    steps: int
    compile: float
    steady: float
    per_step: float
    val: list[tuple[int, float, float]]


def recipe_times(series: dict[str, list[tuple[int, float]]]) -> RecipeTimes:
    """The times of a run from ``read_metrics``' series (it needs ``train/time`` and
    ``train/batches`` logged at two steps at least, and ``val/loss``)."""
    for key in ("train/time", "train/batches", "val/loss"):
        if not series.get(key):
            raise ValueError(f"the log has no {key}: the run logged {sorted(series)}")
    batches = dict(series["train/batches"])
    rows = [(int(batches[step]), t) for step, t in series["train/time"] if step in batches]
    if len(rows) < 2:
        raise ValueError(f"train/time is logged at {len(rows)} step(s): the steady rate needs two or more "
                         f"(a longer run, or a smaller trainer.log_every_n_steps)")
    per_step = statistics.median((t1 - t0) / (b1 - b0) for (b0, t0), (b1, t1) in zip(rows, rows[1:]) if b1 > b0)
    first_batches, first_time = rows[0]
    compile = max(first_time - first_batches * per_step, 0.0)

    def trained(n: int) -> float:  # training seconds after n batches, the compile left out
        return max((t for b, t in rows if b <= n), default=0.0) - compile

    # A val row at step s follows s + 1 training batches (Lightning's steps count from 0).
    val = [(step + 1, max(trained(step + 1), 0.0), loss) for step, loss in series["val/loss"]]
    return RecipeTimes(rows[-1][0], compile, rows[-1][1] - compile, per_step, val)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("metrics", type=Path, help="the run's metrics.csv")
    p.add_argument("--goal-loss", type=float, default=1.47, help="the val loss to reach")
    p.add_argument("--goal-seconds", type=float, default=60.0, help="within this much training (compile left out)")
    a = p.parse_args()
    if not a.metrics.is_file():
        raise SystemExit(f"{a.metrics} is missing: the run wrote no log")
    times = recipe_times(read_metrics(a.metrics))
    batches, _, loss = times.val[-1]
    print(f"final val loss {loss:.4f} (the last evaluation, after {batches} of the {times.steps} steps trained)")
    print(f"training time {times.steady:.1f} s ({1000 * times.per_step:.1f} ms/step), compile time "
          f"{times.compile:.1f} s apart (torch.compile and the first step's warm-up; validation not counted)")
    for n, seconds, value in times.val:
        print(f"    step {n:6d}: val loss {value:.4f} at {seconds:7.1f} s of training")
    reached = next(((n, s) for n, s, value in times.val if value <= a.goal_loss), None)
    if reached and reached[1] <= a.goal_seconds:
        verdict = f"met: {a.goal_loss} reached at step {reached[0]}, {reached[1]:.1f} s"
    elif reached:
        verdict = f"missed: {a.goal_loss} reached at step {reached[0]}, {reached[1]:.1f} s"
    else:
        verdict = f"missed: the lowest val loss is {min(v for *_, v in times.val):.4f}"
    print(f"goal: val loss <= {a.goal_loss} within {a.goal_seconds:.0f} s of training: {verdict} "
          f"(nanoGPT's 1.4697 took ~3 minutes on an A100)")


if __name__ == "__main__":
    main()

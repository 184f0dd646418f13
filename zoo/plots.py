"""Pictures a run leaves behind: loss and metric curves from its CSV log."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


# What the throughput monitor logs besides the rates: running counts, not curves to look at.
THROUGHPUT_COUNTERS = {"batches", "lengths", "samples", "time"}


def read_metrics(csv_path: Path) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(step, value), ...]} from Lightning's metrics.csv."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key not in ("step", "epoch") and value not in ("", None):
                    series[key].append((int(row["step"]), float(value)))
    return series


def plot_curves(csv_path: Path, out_path: Path) -> Path | None:
    """One panel per metric family (loss, accuracy, ...), train/val/test curves together.
    Returns the PNG's path, or None when the log holds no curve yet."""
    series = read_metrics(csv_path)
    groups: dict[str, list[str]] = defaultdict(list)
    for key in series:
        split, _, name = key.partition("/")
        if split in ("train", "val") and name not in THROUGHPUT_COUNTERS and "/" not in name and len(series[key]) > 1:
            groups[name].append(key)
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.5), squeeze=False)
    for ax, (name, keys) in zip(axes[0], sorted(groups.items())):
        for key in sorted(keys):
            steps, values = zip(*series[key])
            ax.plot(steps, values, label=key, marker="." if key.startswith("val") else None)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return out_path

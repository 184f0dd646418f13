"""Pictures a run leaves behind: loss and metric curves from its CSV log, a classifier's
confusion matrix, video clips as strips of frames with their predicted and true classes; and
:func:`save_figure`, how every zoo picture is written (those of :mod:`zoo.viz` too). Below the
objectives that draw them at the end of a test: it imports nothing of the zoo."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402


def save_figure(fig, path: Path, dpi: int = 100, metadata: dict[str, str] | None = None) -> Path:
    """Lay out ``fig``, write it to ``path`` as PNG (cropped to what is drawn, so that no title or
    axis label is cut off; ``metadata``: PNG text fields) and free it (figures are files only)."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata=metadata)
    plt.close(fig)
    return path


# Running counts, not curves to look at: the throughput monitor's besides its rates, and the
# seq2seq objectives' target tokens per batch.
COUNTERS = {"batches", "lengths", "samples", "time", "target_tokens"}


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
    """One panel per metric family (loss, accuracy, ...), train/val curves together; every point
    is marked on a curve of few points (a run that validated once has a one-point val curve). Returns the PNG's path, or None when the log holds no curve yet."""
    series = read_metrics(csv_path)
    groups: dict[str, list[str]] = defaultdict(list)
    for key in series:
        split, _, name = key.partition("/")
        if split in ("train", "val") and name not in COUNTERS and "/" not in name:
            groups[name].append(key)
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 3.5), squeeze=False)
    for ax, (name, keys) in zip(axes[0], sorted(groups.items())):
        for key in sorted(keys):
            steps, values = zip(*series[key])
            ax.plot(steps, values, label=key, marker="." if key.startswith("val") or len(steps) < 3 else None)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, out_path, metadata={"panels": json.dumps(sorted(groups))})


def plot_confusion(matrix: Tensor, class_names: list[str], out_path: Path) -> Path:
    """A confusion matrix (true class down, predicted across), each row as fractions of
    the class's examples, with the counts written in; the title gives the accuracy."""
    counts = matrix.long()
    rows = counts.float() / counts.sum(1, keepdim=True).clamp(min=1)
    n = len(class_names)
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * n, 0.6 + 0.5 * n))
    ax.imshow(rows.numpy(), cmap="Blues", vmin=0, vmax=1)
    for i in range(n):
        for j in range(n):
            if counts[i, j]:
                ax.text(j, i, str(int(counts[i, j])), ha="center", va="center", fontsize=7,
                        color="white" if rows[i, j] > 0.5 else "black")
    ax.set_xticks(range(n), class_names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), class_names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    accuracy = counts.diag().sum().item() / max(1, counts.sum().item())
    ax.set_title(f"test accuracy {accuracy:.1%} ({counts.sum().item()} examples)", fontsize=9)
    return save_figure(fig, out_path)


def plot_clips(clips: Tensor, titles: list[str], out_path: Path) -> Path:
    """Clips (N, T, 3, H, W) with pixels in [0, 1], each drawn as one strip of its T frames side
    by side (a white gap between them) and titled ``titles[i]`` (e.g. "predicted circle-left,
    true circle-left")."""
    n, t, _, h, w = clips.shape
    gap = max(1, w // 16)
    strips = torch.ones(n, 3, h, t * (w + gap) - gap)
    for j in range(t):
        strips[..., j * (w + gap): j * (w + gap) + w] = clips[:, j].clamp(0, 1)
    fig, axes = plt.subplots(n, 1, figsize=(0.8 * t, 1.0 * n + 0.3), squeeze=False)
    for ax, strip, title in zip(axes[:, 0], strips, titles):
        ax.imshow(strip.permute(1, 2, 0).numpy())
        ax.set_axis_off()
        ax.set_title(title, fontsize=8, loc="left")
    return save_figure(fig, out_path)

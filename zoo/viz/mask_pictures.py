"""Pictures of each family's attention masks on a small example batch (`python -m zoo describe masks=DIR`).

The example: 8 positions, the last 3 of them padding (as in the second sequence of a batch;
images and clips have none), and for prefix-LM masks a prefix of 4 (image + prompt). A mask with
a window, a stride or blocks is drawn long enough to show them (:func:`example_length`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from zoo.models.presets import build, model_names  # noqa: E402
from zoo.nn.embedders import PatchEmbedder, TubeletEmbedder  # noqa: E402
from zoo.nn.masks import causal_mask  # noqa: E402
from zoo.nn.merging import PatchMerging  # noqa: E402
from zoo.plots import save_figure  # noqa: E402

LENGTH, PADDED, PREFIX = 8, 3, 4
# The families whose masks the README opens with: a decoder, an encoder, an encoder-decoder.
THESIS = ("gpt", "bert", "t5")


def example_length(mask_fn) -> int:
    """Positions enough to show the mask (its ``picture_length``: a window or a stride twice over,
    ...), at least :data:`LENGTH`."""
    return max(LENGTH, getattr(mask_fn, "picture_length", LENGTH))


def materialise(mask_fn, q_len: int, k_len: int, padded: int = PADDED) -> torch.Tensor:
    """The (q_len, k_len) picture of a mask object for the example sequence (its last ``padded``
    positions padding): True / 1 where a query may attend; an additive mask (BigBird's) shows the
    weight a key gets, 0 where hidden."""
    padding = torch.arange(k_len)[None] < k_len - padded
    mask, is_causal = mask_fn(q_len, k_len, torch.device("cpu"), padding, torch.tensor([PREFIX]))
    if mask is not None and mask.is_floating_point():
        mask = mask.exp()  # log-count -> count
    full = torch.ones(q_len, k_len, dtype=torch.bool) if mask is None else mask.expand(1, 1, q_len, k_len)[0, 0]
    return full & causal_mask(q_len, k_len) if is_causal else full


@dataclass(frozen=True)
class Panel:
    title: str
    mask: torch.Tensor  # (queries, keys): bool, or counts (BigBird's keys counted more than once)
    padded: int  # the last keys that are padding (0 for images and clips: they have none)


def padded_keys(tower) -> int:
    """Padding in the example of ``tower``: text and audio batches pad, images, clips and the later
    stages of a staged hierarchy (over an image's patches) do not."""
    return 0 if isinstance(tower.embedder, (PatchEmbedder, TubeletEmbedder, PatchMerging)) else PADDED


def tower_panels(tower, title: str = "{}") -> list[Panel]:
    """A panel for each distinct mask of a tower's layers (a per-layer pattern has several), each at
    its :func:`example_length`; ``title`` formats the mask (its class and settings)."""
    padded = padded_keys(tower)
    return [Panel(title.format(repr(m)), materialise(m, example_length(m), example_length(m), padded), padded)
            for m in dict.fromkeys(tower.layer_masks)]


def family_panels(net, prefix: str = "") -> list[Panel]:
    """One network's panels: each tower's self-attention mask(s) (titled by the tower's name when
    there are several), and the cross-attention of a tower that has one (over the first tower's
    keys, the source)."""
    towers = net.towers
    panels = []
    for name, tower in towers.items():
        panels += tower_panels(tower, prefix + ("{}" if len(towers) == 1 else f"{name} ({{}})"))
        if tower.cross_attention:
            padded = padded_keys(next(iter(towers.values())))
            keys = (torch.arange(LENGTH) < LENGTH - padded)[None].expand(LENGTH, LENGTH)
            panels.append(Panel(f"{prefix}cross ({name} -> source)", keys, padded))
    return panels


def legend(panels: list[Panel]) -> str:
    """What the shades mean, for the shades these panels use."""
    counts = max(float(p.mask.max()) for p in panels)
    parts = ["white: may attend"] if counts <= 1 else [
        f"black: hidden; grey to white: a key counted 1 to {counts:g} times (BigBird's overlapping blocks)"]
    if any(p.padded for p in panels):
        parts.append("red: padding")
    return "; ".join(parts)


def draw_panels(panels: list[Panel], title: str, path: Path) -> Path:
    """The panels side by side under ``title`` and the legend; the panel titles are kept in the PNG
    (its ``panels`` text field, a JSON list), so that a test can compare a committed picture's
    structure with the code's."""
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5, 3.2 * len(panels)), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        mask = panel.mask
        ax.imshow(mask.float().numpy(), cmap="gray", vmin=0, vmax=max(1.0, float(mask.max())))
        if panel.padded:
            ax.axvspan(mask.shape[1] - panel.padded - 0.5, mask.shape[1] - 0.5, color="red", alpha=0.15, hatch="//")
        ax.set_title(panel.title, fontsize=7)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        if mask.shape[1] <= 16:
            ax.set_xticks(range(mask.shape[1]))
            ax.set_yticks(range(mask.shape[0]))
    fig.suptitle(f"{title}\n({legend(panels)})", fontsize=9)
    return save_figure(fig, path, dpi=90, metadata={"panels": json.dumps([p.title for p in panels])})


def mask_picture(model: str, out_dir: Path) -> Path:
    """``out_dir/mask_<model>.png``: the masks of ``model``'s towers."""
    return draw_panels(family_panels(build(model)[1]), f"model={model}", out_dir / f"mask_{model}.png")


def families_picture(out_dir: Path) -> Path:
    """``out_dir/mask_families.png``: :data:`THESIS`'s masks side by side (the README's first picture)."""
    panels = [p for model in THESIS for p in family_panels(build(model)[1], f"{model}: ")]
    return draw_panels(panels, "One Block, different masks: " + ", ".join(THESIS), out_dir / "mask_families.png")


def write_mask_pictures(out_dir: Path) -> list[Path]:
    """One PNG per model config (``mask_<model>.png``), and the families' (``mask_families.png``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [mask_picture(model, out_dir) for model in model_names()] + [families_picture(out_dir)]

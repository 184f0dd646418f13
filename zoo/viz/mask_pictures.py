"""Pictures of each family's attention masks on a small example batch (`python -m zoo describe masks=DIR`).

The example: 8 positions, the last 3 of them padding (as in the second sequence of a
batch), and for prefix-LM masks a prefix of 4 (image + prompt). A mask with a window, a
stride or blocks is drawn long enough to show them (:func:`example_length`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from zoo.models.presets import build, model_names  # noqa: E402
from zoo.nn.masks import causal_mask  # noqa: E402
from zoo.viz.plots import save_figure  # noqa: E402

LENGTH, PADDED, PREFIX = 8, 3, 4


def example_length(mask_fn) -> int:
    """Positions enough to show the mask (its ``picture_length``: a window or a stride twice over,
    ...), at least :data:`LENGTH`."""
    return max(LENGTH, getattr(mask_fn, "picture_length", LENGTH))


def materialise(mask_fn, q_len: int, k_len: int) -> torch.Tensor:
    """The (q_len, k_len) picture of a mask object for the example sequence (its last
    :data:`PADDED` positions padding): True / 1 where a query may attend; an additive mask
    (BigBird's) shows the weight a key gets, 0 where hidden."""
    padding = torch.arange(k_len)[None] < k_len - PADDED
    mask, is_causal = mask_fn(q_len, k_len, torch.device("cpu"), padding, torch.tensor([PREFIX]))
    if mask is not None and mask.is_floating_point():
        mask = mask.exp()  # log-count -> count
    full = torch.ones(q_len, k_len, dtype=torch.bool) if mask is None else mask.expand(1, 1, q_len, k_len)[0, 0]
    return full & causal_mask(q_len, k_len) if is_causal else full


def tower_masks(tower, title: str = "{}") -> dict[str, torch.Tensor]:
    """{panel title: mask} for each distinct mask of a tower's layers (a per-layer pattern has several),
    each at its :func:`example_length`; ``title`` formats the mask (its class and settings)."""
    return {title.format(repr(m)): materialise(m, example_length(m), example_length(m))
            for m in dict.fromkeys(tower.layer_masks)}


def family_masks(net) -> dict[str, torch.Tensor]:
    """{panel title: mask} for one network: each tower's self-attention mask(s) (titled by the
    tower's name when there are several), and the cross-attention of a tower that has one."""
    towers = net.towers
    panels = {}
    for name, tower in towers.items():
        panels |= tower_masks(tower, "{}" if len(towers) == 1 else f"{name} ({{}})")
        if tower.cross_attention:
            panels[f"cross ({name} -> source)"] = (torch.arange(LENGTH) < LENGTH - PADDED)[None].expand(LENGTH, LENGTH)
    return panels


def write_mask_pictures(out_dir: Path) -> list[Path]:
    """One PNG per model config: white = may attend, dark = hidden; padded keys hatched red."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for model in model_names():
        _, net = build(model)
        panels = family_masks(net)
        fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5, 3.2 * len(panels)), 3.6), squeeze=False)
        for ax, (title, mask) in zip(axes[0], panels.items()):
            ax.imshow(mask.float().numpy(), cmap="gray", vmin=0, vmax=max(1.0, float(mask.max())))
            ax.axvspan(mask.shape[1] - PADDED - 0.5, mask.shape[1] - 0.5, color="red", alpha=0.15, hatch="//")
            ax.set_title(title, fontsize=7)
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            if mask.shape[1] <= 16:
                ax.set_xticks(range(mask.shape[1]))
                ax.set_yticks(range(mask.shape[0]))
        fig.suptitle(f"model={model}\n(white: may attend; red: padding)", fontsize=9)
        paths.append(save_figure(fig, out_dir / f"mask_{model}.png", dpi=90))
    return paths

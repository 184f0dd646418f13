"""Pictures of each family's attention masks on a small example batch (`python -m zoo describe masks=DIR`).

The example: 8 positions, the last 3 of them padding (as in the second sequence of a
batch), and for prefix-LM masks a prefix of 4 (image + prompt).
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

LENGTH, REAL, PREFIX = 8, 5, 4


def materialise(mask_fn, q_len: int, k_len: int) -> torch.Tensor:
    """The (q_len, k_len) boolean picture of a mask object for the example sequence."""
    padding = torch.arange(k_len)[None] < REAL
    mask, is_causal = mask_fn(q_len, k_len, torch.device("cpu"), padding, torch.tensor([PREFIX]))
    full = torch.ones(q_len, k_len, dtype=torch.bool) if mask is None else mask.expand(1, 1, q_len, k_len)[0, 0]
    return full & causal_mask(q_len, k_len) if is_causal else full


def stack_masks(stack, title: str = "{}") -> dict[str, torch.Tensor]:
    """{panel title: mask} for each distinct mask of a stack's layers (a per-layer pattern has several);
    ``title`` formats the mask's class name."""
    return {title.format(type(m).__name__): materialise(m, LENGTH, LENGTH) for m in dict.fromkeys(stack.layer_masks)}


def family_masks(net) -> dict[str, torch.Tensor]:
    """{panel title: mask} for one network: its self-attention mask(s) and cross-attention."""
    if hasattr(net, "encoder_mask"):
        cross = (torch.arange(LENGTH) < REAL)[None].expand(LENGTH, LENGTH)
        return {**stack_masks(net.encoder, "encoder ({})"), **stack_masks(net.decoder, "decoder ({})"),
                "cross (decoder -> source)": cross}
    return stack_masks(net.stack)


def write_mask_pictures(out_dir: Path) -> list[Path]:
    """One PNG per model config: white = may attend, dark = hidden; padded keys hatched red."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for model in model_names():
        _, net = build(model)
        panels = family_masks(net)
        fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5, 3.2 * len(panels)), 3.6), squeeze=False)
        for ax, (title, mask) in zip(axes[0], panels.items()):
            ax.imshow(mask.float().numpy(), cmap="gray", vmin=0, vmax=1)
            ax.axvspan(REAL - 0.5, mask.shape[1] - 0.5, color="red", alpha=0.15, hatch="//")
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            ax.set_xticks(range(mask.shape[1]))
            ax.set_yticks(range(mask.shape[0]))
        fig.suptitle(f"model={model}\n(white: may attend; red: padding)", fontsize=9)
        paths.append(save_figure(fig, out_dir / f"mask_{model}.png", dpi=90))
    return paths

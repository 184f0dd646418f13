"""Attention maps from a checkpoint: PNG heatmaps of the attention weights of every layer and head.

    python -m zoo.attention_maps ckpt=PATH text="ROMEO: But soft" out=attention/

SDPA returns no weights, so the Blocks' attention modules switch to their explicit
inspection path (``MultiHeadAttention.keep_weights``), which computes the same outputs
(tested) and keeps the weights.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from zoo.checkpoint import load  # noqa: E402
from zoo.data.tokenizers import tokenizer_from_state  # noqa: E402
from zoo.nn.attention import MultiHeadAttention  # noqa: E402


@torch.no_grad()
def self_attention_weights(net, inputs: torch.Tensor) -> list[torch.Tensor]:
    """Run ``net`` once on ``inputs`` through the inspection path; return each layer's
    self-attention weights (B, H, L, L)."""
    modules = [block.attn for block in net.stack.blocks]
    for m in net.modules():
        if isinstance(m, MultiHeadAttention):
            m.keep_weights = True
    try:
        net(inputs)
        return [m.last_weights for m in modules]
    finally:
        for m in net.modules():
            if isinstance(m, MultiHeadAttention):
                m.keep_weights, m.last_weights = False, None


def plot_layers(weights: list[torch.Tensor], labels: list[str], out_dir: Path, title: str) -> list[Path]:
    """One PNG per layer: a grid of heads, query positions down, key positions across."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for layer, w in enumerate(weights):
        heads = w.shape[1]
        cols = min(heads, 4)
        rows = (heads + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
        for h, ax in enumerate(axes.flat):
            if h >= heads:
                ax.axis("off")
                continue
            ax.imshow(w[0, h].float().numpy(), cmap="viridis", vmin=0)
            ax.set_title(f"head {h}", fontsize=8)
            if len(labels) <= 40:
                ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
                ax.set_yticks(range(len(labels)), labels, fontsize=6)
            else:
                ax.set_xticks([]), ax.set_yticks([])
        fig.suptitle(f"{title}: layer {layer}", fontsize=10)
        fig.tight_layout()
        path = out_dir / f"layer{layer:02d}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str]) -> None:
    args = dict(a.split("=", 1) for a in argv)
    if "ckpt" not in args or "text" not in args:
        raise SystemExit("usage: python -m zoo.attention_maps ckpt=PATH text=TEXT [out=DIR]")
    objective = load(args["ckpt"])
    kind = objective.hparams.input_kind
    if kind != "text" or not hasattr(objective.net, "stack"):
        raise SystemExit(f"{args['ckpt']} is a model for {kind} input, but text=... was given")
    tokenizer = tokenizer_from_state(objective.hparams.tokenizer)
    ids = tokenizer.encode(args["text"])
    context = objective.net.context
    if len(ids) > context:
        warnings.warn(f"input of {len(ids)} tokens is longer than the model's context of {context}: cropped")
        ids = ids[:context]
    weights = self_attention_weights(objective.net, torch.tensor([ids]))
    labels = [repr(tokenizer.decode([i]))[1:-1] for i in ids]
    for path in plot_layers(weights, labels, Path(args.get("out", "attention")), Path(args["ckpt"]).name):
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])

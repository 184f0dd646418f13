"""Attention maps from a checkpoint: PNG heatmaps of attention weights, per layer and head.

    python -m zoo attention-maps ckpt=GPT.ckpt text="ROMEO: But soft"           # self-attention (GPT, BERT, Llama)
    python -m zoo attention-maps ckpt=TRANSFORMER.ckpt text="Ein Hund rennt."   # + target x source alignment
    python -m zoo attention-maps ckpt=WHISPER.ckpt audio=clip.wav               # + transcript x time alignment
    python -m zoo attention-maps ckpt=VIT.ckpt image=cat.png                    # + rollout over the patches
    python -m zoo attention-maps ckpt=YOLOS.ckpt image=shapes.png               # + each detection token's look
    python -m zoo attention-maps ckpt=LLAVA.ckpt image=shapes.png question="what color is the circle?"

Files (in ``out=``, default ``attention/``): ``self_layerNN.png`` (a grid of heads; query
positions down, key positions across) for a single stack; ``encoder_``/``decoder_``/
``cross_layerNN.png`` for an encoder-decoder, which first decodes its output greedily and
then shows the decoder reading the source (``alignment.png``: each layer's cross-attention,
heads averaged); ``rollout.png`` for images: attention rollout (Abnar & Zuidema, 2020) of
the classifier's query (ViT) or of the first answer token (LLaVA, through the language
model and then the vision tower) over the image patches; ``detections.png`` for a detector
(YOLOS): per top-scoring detection token, where it looks over the patches in the last layer
(heads averaged), with its box, as DETR's figures show each object query.

SDPA returns no weights, so the attention modules switch to their explicit inspection
path (``MultiHeadAttention.keep_weights``), which computes the same outputs (tested).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from zoo.data.audio import HOP_LENGTH, SAMPLE_RATE, LogMel, load_audio  # noqa: E402
from zoo.data.images import load_image, to_tensor  # noqa: E402
from zoo.data.tokenizers import tokenizer_from_state  # noqa: E402
from zoo.inference.detecting import Detector  # noqa: E402
from zoo.models.encoder_decoder import EncoderDecoder  # noqa: E402
from zoo.nn.attention import MultiHeadAttention  # noqa: E402
from zoo.objectives.detection import predictions  # noqa: E402
from zoo.plots import save_figure  # noqa: E402

SHOWN_DETECTIONS = 6  # the top-scoring detection tokens detections.png shows


@contextmanager
def kept_weights(net: nn.Module) -> Iterator[None]:
    """Inside the block every attention module of ``net`` runs its inspection path and keeps
    its last weights (B, H, Lq, Lk) in ``last_weights``."""
    modules = [m for m in net.modules() if isinstance(m, MultiHeadAttention)]
    for m in modules:
        m.keep_weights = True
    try:
        yield
    finally:
        for m in modules:
            m.keep_weights, m.last_weights = False, None


def weights_of(tower: nn.Module, cross: bool = False) -> list[Tensor]:
    """The kept self- (or cross-) attention weights of a tower's blocks that ran, in order."""
    modules = [block.cross_attn if cross else block.attn for block in tower.blocks]
    return [m.last_weights for m in modules if m.last_weights is not None]


@torch.no_grad()
def self_attention_weights(net: nn.Module, inputs: Tensor, **kwargs) -> list[Tensor]:
    """Run a single-tower ``net`` once on ``inputs``; each layer's self-attention weights (B, H, L, L)."""
    (tower,) = net.towers.values()
    with kept_weights(net):
        net(inputs, **kwargs)
        return weights_of(tower)


def rollout(weights: list[Tensor]) -> Tensor:
    """Attention rollout: how much each output position draws on each input position
    through all layers, (B, L, L). Per layer the heads are averaged and the residual path
    is counted as half the flow (0.5 A + 0.5 I, rows renormalised)."""
    flow = None
    for w in weights:
        a = w.float().mean(dim=1)
        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1])
        a = a / a.sum(dim=-1, keepdim=True)
        flow = a if flow is None else a @ flow
    return flow


def _label_axes(ax, rows: list[str], cols: list[str]) -> None:
    for labels, set_ticks, kw in ((cols, ax.set_xticks, {"rotation": 90}), (rows, ax.set_yticks, {})):
        if len(labels) <= 40:
            set_ticks(range(len(labels)), labels, fontsize=6, **kw)
        else:
            set_ticks([])


def plot_layers(weights: list[Tensor], rows: list[str], cols: list[str], out_dir: Path, name: str,
                title: str) -> list[Path]:
    """One PNG per layer (``{name}_layerNN.png``): a grid of heads, queries down, keys across."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for layer, w in enumerate(weights):
        heads = w.shape[1]
        n_cols = min(heads, 4)
        n_rows = -(-heads // n_cols)
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.2 * n_cols, 3.2 * n_rows), squeeze=False)
        for h, ax in enumerate(axes.flat):
            if h >= heads:
                ax.axis("off")
                continue
            ax.imshow(w[0, h].float().numpy(), cmap="viridis", vmin=0, aspect="auto")
            ax.set_title(f"head {h}", fontsize=8)
            _label_axes(ax, rows, cols)
        fig.suptitle(f"{title}: {name} attention, layer {layer}", fontsize=10)
        paths.append(save_figure(fig, out_dir / f"{name}_layer{layer:02d}.png", dpi=90))
    return paths


def run_title(ckpt: str | Path) -> str:
    """A picture's title for a checkpoint: the run it belongs to, then the file
    (``outputs/train/2026-12-01_10-00-00/checkpoints/last.ckpt`` -> ``train/2026-12-01_10-00-00 (last.ckpt)``)."""
    path = Path(ckpt)
    if path.parent.name != "checkpoints":
        return path.name
    run = path.parent.parent.resolve()
    return f"{run.parent.name}/{run.name} ({path.name})"


# The alignment picture's largest size in inches (a degenerate output of hundreds of tokens).
MAX_WIDTH, MAX_HEIGHT = 12.0, 16.0


def plot_alignment(cross: list[Tensor], rows: list[str], cols: list[str], path: Path, title: str,
                   spectrogram: Tensor | None = None, step: float = 0.0) -> Path:
    """Each decoder layer's cross-attention, heads averaged: the token each position writes
    down, source positions across; for speech the log-mel spectrogram sits above on the same time
    axis (``step``: the seconds each encoder position covers)."""
    panels = len(cross) + (spectrogram is not None)
    width = min(MAX_WIDTH, max(6.0, 0.25 * len(cols) if len(cols) <= 40 else 8.0))
    height = min(MAX_HEIGHT, 1.2 + 0.25 * max(len(rows), 6) * panels)
    fig, axes = plt.subplots(panels, 1, figsize=(width, height), squeeze=False)
    axes = list(axes[:, 0])
    if spectrogram is not None:
        ax = axes.pop(0)
        ax.imshow(spectrogram.numpy(), origin="lower", aspect="auto", cmap="magma",
                  extent=(0, spectrogram.shape[-1] * HOP_LENGTH / SAMPLE_RATE, 0, spectrogram.shape[0]))
        ax.set_ylabel("mel bin", fontsize=7)
        ax.set_title(title, fontsize=9)
    for layer, (ax, w) in enumerate(zip(axes, cross)):
        extent = None
        if spectrogram is not None:  # encoder positions -> seconds
            extent = (0, w.shape[-1] * step, len(rows) - 0.5, -0.5)
        ax.imshow(w[0].float().mean(0).numpy(), cmap="viridis", vmin=0, aspect="auto", extent=extent)
        ax.set_ylabel(f"layer {layer}", fontsize=7)
        ax.set_yticks(range(len(rows)), rows, fontsize=6)
        if spectrogram is None:
            _label_axes(ax, rows, cols)
    if spectrogram is not None:
        axes[-1].set_xlabel("seconds")
    else:
        axes[0].set_title(title, fontsize=9)
    return save_figure(fig, path)


def plot_rollout(image: Tensor, heat: Tensor, path: Path, title: str) -> Path:
    """The image (3, H, W) in [0, 1] and the rollout over its patches (gh, gw) upsampled onto it."""
    fig, axes = plt.subplots(1, 2, figsize=(6, 3.2))
    axes[0].imshow(image.permute(1, 2, 0).clamp(0, 1).numpy())
    axes[0].axis("off")
    _overlay(axes[1], image, heat)
    axes[1].set_title("attention rollout", fontsize=8)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def _overlay(ax, image: Tensor, heat: Tensor) -> None:
    """The image (3, H, W) in [0, 1] with ``heat`` over its patches (gh, gw) upsampled onto it,
    scaled to its maximum."""
    heat = F.interpolate(heat[None, None].float(), size=image.shape[1:], mode="nearest")[0, 0]
    ax.imshow(image.permute(1, 2, 0).clamp(0, 1).numpy())
    ax.imshow((heat / heat.max()).numpy(), cmap="inferno", alpha=0.6)
    ax.axis("off")


def plot_detection_maps(image: Tensor, heats: Tensor, boxes: Tensor, titles: list[str], path: Path,
                        title: str) -> Path:
    """A grid of panels, one per detection token: the image (3, H, W) in [0, 1], the token's
    attention over the patches ``heats`` (K, gh, gw) on it, and its box (``boxes`` (K, 4) xyxy in
    the image's pixels)."""
    n_cols = min(len(heats), 3)
    n_rows = -(-len(heats) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(2.8 * n_cols, 2.9 * n_rows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(heats):
            ax.axis("off")
            continue
        _overlay(ax, image, heats[k])
        x0, y0, x1, y1 = boxes[k].tolist()
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor="cyan", linewidth=1.5))
        ax.set_title(titles[k], fontsize=8)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def denormalised(pixels: Tensor, mean: float | list[float], std: float | list[float]) -> Tensor:
    """Normalised pixels (3, H, W) back in [0, 1] (to show them)."""
    return pixels * torch.tensor(std).view(-1, 1, 1) + torch.tensor(mean).view(-1, 1, 1)


def _cropped(ids: list[int], limit: int, what: str) -> list[int]:
    if len(ids) > limit:
        warnings.warn(f"{what} of {len(ids)} positions is longer than the model's {limit}: cropped to {limit}")
    return ids[:limit]


def text_maps(objective, text: str, out: Path, title: str) -> list[Path]:
    """Self-attention of a single-stack language model (GPT, BERT, Llama) reading ``text``."""
    tokenizer = tokenizer_from_state(objective.hparams.tokenizer)
    ids = _cropped(tokenizer.encode(text), objective.net.context, "the input")
    labels = [repr(tokenizer.decode([i]))[1:-1] for i in ids]
    return plot_layers(self_attention_weights(objective.net, torch.tensor([ids])), labels, labels, out, "self", title)


@torch.no_grad()
def encoder_decoder_maps(objective, source: Tensor, source_labels: list[str], out: Path, title: str,
                         spectrogram: Tensor | None = None) -> list[Path]:
    """Decode ``source`` (1, S, ...) greedily, then show the encoder, the decoder and the
    cross-attention of the decoder reading the source while writing that output."""
    net: EncoderDecoder = objective.net
    if objective.bos_id is None or objective.eos_id is None:
        raise SystemExit(f"{title} has no decoder start and end tokens (bos_id, eos_id), so it cannot decode "
                         f"(a T5 pre-trained on plain text: fine-tune it on pairs first)")
    prompt = torch.tensor([[objective.bos_id]])
    output = objective.decode(source, prompt)[0]
    target = torch.cat([prompt, torch.tensor([output], dtype=torch.long).view(1, -1)], dim=1)
    tokenizer = objective.tokenizer
    words = [repr(tokenizer.decode([i]))[1:-1] for i in output]
    # Position t reads the target so far and writes the next token: queries are labelled by
    # what they write, keys by what they read.
    reads, writes = ["<s>"] + words, words + ["</s>"]
    print(f"output: {tokenizer.decode(output)}")
    towers = net.towers
    with kept_weights(net):
        net(source, target)
        encoder, decoder = weights_of(towers["encoder"]), weights_of(towers["decoder"])
        cross = weights_of(towers["decoder"], cross=True)
    step = 0.0
    if spectrogram is not None:  # positions of an audio encoder are 20 ms steps, not worth a label each
        step = towers["encoder"].embedder.stride * HOP_LENGTH / SAMPLE_RATE
        source_labels = [f"{t * step:.2f}s" for t in range(encoder[0].shape[-1])]
    return (plot_layers(encoder, source_labels, source_labels, out, "encoder", title)
            + plot_layers(decoder, writes, reads, out, "decoder", title)
            + plot_layers(cross, writes, source_labels, out, "cross", title)
            + [plot_alignment(cross, writes, source_labels, out / "alignment.png",
                              f"{title}: {tokenizer.decode(output)!r}", spectrogram, step)])


def translation_maps(objective, text: str, out: Path, title: str) -> list[Path]:
    tokenizer = objective.tokenizer
    ids = _cropped(tokenizer.encode(text), objective.net.context, "the source")
    return encoder_decoder_maps(objective, torch.tensor([ids]), [repr(tokenizer.decode([i]))[1:-1] for i in ids],
                                out, title)


def speech_maps(objective, audio: str, out: Path, title: str) -> list[Path]:
    wave = load_audio(audio)
    window = objective.net.towers["encoder"].embedder.max_frames * HOP_LENGTH  # samples the encoder holds
    if len(wave) > window:
        warnings.warn(f"{audio} is longer than the encoder's {window / SAMPLE_RATE:.1f} s: cropped")
    features = LogMel()(wave[:window])
    return encoder_decoder_maps(objective, features[None], [], out, title, spectrogram=features)


@torch.no_grad()
def image_maps(objective, image_path: str, out: Path, title: str) -> list[Path]:
    """A ViT classifier: each layer's self-attention over [CLS] + patches, and the rollout of
    what the classifier reads (the CLS vector, or the mean of the patch vectors) over the patches."""
    net, h = objective.net, objective.hparams
    embedder = net.embedder
    pixels = to_tensor(load_image(image_path), embedder.image_size, mean=h.pixel_mean or 0.5, std=h.pixel_std or 0.5)
    weights = self_attention_weights(net, pixels[None])
    logits = net(pixels[None])[0]
    names = h.class_names or [str(i) for i in range(len(logits))]
    prefix = int(embedder.cls is not None)
    labels = ["[CLS]"] * prefix + [f"p{i}" for i in range(embedder.n_patches)]
    flow = rollout(weights)[0]
    reads = flow[0] if net.head.pool == "cls" else flow[prefix:].mean(0)
    grid = embedder.image_size // embedder.patch_size
    shown = denormalised(pixels, h.pixel_mean or 0.5, h.pixel_std or 0.5)
    top = logits.softmax(-1).max()
    return plot_layers(weights, labels, labels, out, "self", title) + [
        plot_rollout(shown, reads[prefix:].view(grid, grid), out / "rollout.png",
                     f"{title}: {names[int(logits.argmax())]} ({top:.0%})")]


def detection_heat(weights: list[Tensor], n_patches: int, n_detections: int) -> Tensor:
    """Where each detection token looks over the patches in the last layer, heads averaged:
    ``weights`` of a [CLS, patches, detection tokens] sequence (1, H, L, L) per layer ->
    (n_detections, n_patches)."""
    last = weights[-1][0].float().mean(0)
    return last[-n_detections:, 1 : 1 + n_patches]


@torch.no_grad()
def detection_maps(objective, image_path: str, out: Path, title: str) -> list[Path]:
    """A detector (YOLOS): each layer's self-attention over [CLS] + patches + detection tokens,
    and, per top-scoring detection token, its last layer's attention over the patches with its
    box, on the image as the network reads it (letterboxed into its square)."""
    detector = Detector(objective)
    embedder = detector.net.embedder
    pixels, _ = detector.inputs(load_image(image_path))
    weights = self_attention_weights(detector.net, pixels)
    (scored,) = predictions(detector.forward(pixels), detector.image_size)
    top = scored["scores"].argsort(descending=True)[:SHOWN_DETECTIONS]
    names = detector.class_names or [str(i) for i in range(objective.hparams.num_classes)]
    titles = [f"det{q}: {names[int(scored['labels'][q])]} {scored['scores'][q]:.2f}" for q in top.tolist()]
    grid = embedder.image_size // embedder.patch_size
    heat = detection_heat(weights, embedder.n_patches, embedder.n_detections)[top].view(-1, grid, grid)
    labels = (["[CLS]"] + [f"p{i}" for i in range(embedder.n_patches)]
              + [f"det{q}" for q in range(embedder.n_detections)])
    shown = denormalised(pixels[0].cpu(), detector.mean, detector.std)
    return plot_layers(weights, labels, labels, out, "self", title) + [
        plot_detection_maps(shown, heat.cpu(), scored["boxes"][top].cpu(), titles, out / "detections.png",
                            f"{title}: the {len(top)} best detection tokens, last layer")]


@torch.no_grad()
def image_question_maps(ckpt: str, image_path: str, question: str, out: Path, title: str) -> list[Path]:
    """LLaVA: the language model's self-attention over image tokens + prompt + answer, and the
    rollout of the position that writes the first answer token, through the language model
    onto the image tokens and then through the vision tower onto the image patches."""
    from zoo.inference.answering import Answerer

    answerer = Answerer(ckpt)
    net, tokenizer, tower = answerer.net, answerer.tokenizer, answerer.net.embedder.vision
    towers = net.towers
    if "vision" not in towers:
        raise ValueError(f"{ckpt}'s vision tower is a timm backbone: rollout needs the zoo ViT tower")
    image = load_image(image_path)
    prompt, answer = answerer.answer_ids(image, question)
    _, pixels, at = answerer.inputs(image, question)
    print(f"answer: {tokenizer.decode(answer)}")
    tokens = torch.cat([prompt, torch.tensor([answer], dtype=torch.long).view(1, -1)], dim=1)
    with kept_weights(net):
        net(tokens, images=pixels, prefix_len=torch.tensor([prompt.shape[1]]))
        lm, vision = weights_of(towers["decoder"]), weights_of(towers["vision"])
    labels = [f"<img{i - at}>" if at <= i < at + tower.n_tokens else repr(tokenizer.decode([t]))[1:-1]
              for i, t in enumerate(tokens[0].tolist())]
    on_image_tokens = rollout(lm)[0, prompt.shape[1] - 1, at : at + tower.n_tokens]
    on_patches = on_image_tokens @ rollout(vision)[0, tower.n_dropped :, :]  # (patches [+ CLS])
    embedder = towers["vision"].embedder
    grid = embedder.image_size // embedder.patch_size
    heat = on_patches[int(embedder.cls is not None) :].view(grid, grid)
    return plot_layers(lm, labels, labels, out, "self", title) + [
        plot_rollout(pixels[0] * 0.5 + 0.5, heat, out / "rollout.png",
                     f"{question} -> {tokenizer.decode(answer)}")]

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

One entry, :func:`attention_maps`: the input is read once (:func:`read_input`, with the readers
the data modules use), and every tower's positions are labelled from what its embedder says they
are (``describe_positions``: tokens, a CLS, patches by (row, column), detection tokens, audio
frames, image tokens), which also places the patches on their grid for the rollouts.

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
from zoo.nn.embedders import Position  # noqa: E402
from zoo.objectives.detection import Detection, predictions  # noqa: E402
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


def position_labels(positions: list[Position], tokenizer=None) -> list[str]:
    """A label per position, from what the embedder says it is (:meth:`describe_positions`): a
    token's text, ``[CLS]``, ``[DIST]``, ``reg{r}``, a patch's ``(row,column)``, ``det{q}``, the second an audio frame
    starts at, ``<img{k}>``."""
    labels = {"token": lambda i: repr(tokenizer.decode([i]))[1:-1], "cls": lambda: "[CLS]",
              "distillation": lambda: "[DIST]", "register": lambda r: f"reg{r}", "patch": lambda row, column: f"({row},{column})", "detection": lambda q: f"det{q}",
              "frame": lambda frame: f"{frame * HOP_LENGTH / SAMPLE_RATE:.2f}s", "image": lambda k: f"<img{k}>"}
    return [labels[p.kind](*p.index) for p in positions]


def patch_grid(positions: list[Position], values: Tensor) -> Tensor:
    """values (..., L) over an embedder's L positions -> (..., rows, columns): the patches' values on
    their grid (an embedder lists its patches row by row)."""
    at = [i for i, p in enumerate(positions) if p.kind == "patch"]
    rows, columns = (max(positions[i].index[axis] for i in at) + 1 for axis in (0, 1))
    return values[..., at].reshape(*values.shape[:-1], rows, columns)


def detection_heat(weights: list[Tensor], positions: list[Position]) -> Tensor:
    """Where each detection token looks over the patches in the last layer, heads averaged:
    ``weights`` (1, H, L, L) per layer over a detector's ``positions`` -> (n_detections, rows, columns)."""
    last = weights[-1][0].float().mean(0)
    return patch_grid(positions, last[[i for i, p in enumerate(positions) if p.kind == "detection"]])


def _cropped(ids: list[int], limit: int) -> list[int]:
    if len(ids) > limit:
        warnings.warn(f"the input of {len(ids)} positions is longer than the model's {limit}: cropped to {limit}")
    return ids[:limit]


def read_input(objective, kind: str, given: str) -> Tensor:
    """The network's input (1, ...) for the one input given, read by the readers the data modules
    use: ``text`` through the checkpoint's tokenizer (cropped to the context), ``audio`` as the
    log-mel frames the encoder holds (cropped), ``image`` normalised as in training, resized
    (a classifier) or letterboxed (a detector: :class:`Detector`)."""
    net, h = objective.net, objective.hparams
    if kind == "text":
        return torch.tensor([_cropped(tokenizer_from_state(h.tokenizer).encode(given), net.context)])
    if kind == "audio":
        wave = load_audio(given)
        window = net.towers["encoder"].embedder.max_frames * HOP_LENGTH  # samples the encoder holds
        if len(wave) > window:
            warnings.warn(f"{given} is longer than the encoder's {window / SAMPLE_RATE:.1f} s: cropped")
        return LogMel()(wave[:window])[None]
    if isinstance(objective, Detection):
        return Detector(objective).inputs(load_image(given))[0]
    return to_tensor(load_image(given), net.embedder.image_size, mean=h.pixel_mean or 0.5, std=h.pixel_std or 0.5)[None]


@torch.no_grad()
def attention_maps(objective, ckpt: str | Path, kind: str, given: str, question: str | None, out: Path,
                   title: str) -> list[Path]:
    """The maps of ``objective`` (loaded from ``ckpt``) for one input of ``kind`` (text, audio,
    image), read by :func:`read_input`, each tower's positions labelled by its embedder; by
    container: an encoder-decoder decodes first, a single stack is read once (a classifier adds
    its rollout, a detector its detection tokens), LLaVA answers ``question`` first."""
    if question is not None:
        return image_question_maps(ckpt, given, question, out, title)
    source = read_input(objective, kind, given)
    if isinstance(objective.net, EncoderDecoder):
        return encoder_decoder_maps(objective, source, out, title, source[0] if kind == "audio" else None)
    if not hasattr(objective.net, "embedder"):  # a staged hierarchy: each stage's grid is its own
        raise ValueError(f"attention maps of a {type(objective.net).__name__} net (towers {list(objective.net.towers)}) "
                         f"are not drawn: its stages attend over grids of their own (maps of one stack only)")
    tokenizer = tokenizer_from_state(objective.hparams.tokenizer) if kind == "text" else None
    positions = objective.net.embedder.describe_positions(source)
    labels = position_labels(positions, tokenizer)
    weights = self_attention_weights(objective.net, source)
    layers = plot_layers(weights, labels, labels, out, "self", title)
    if kind == "text":
        return layers
    if isinstance(objective, Detection):
        return layers + [detection_picture(objective, source, weights, positions, out, title)]
    return layers + [rollout_picture(objective, source, weights, positions, out, title)]


def rollout_picture(objective, pixels: Tensor, weights: list[Tensor], positions: list[Position], out: Path,
                    title: str) -> Path:
    """A ViT classifier's rollout of what its head reads (the CLS vector, or the mean of the patch
    vectors) over the patches of ``pixels`` (1, 3, S, S), titled with the top class."""
    net, h = objective.net, objective.hparams
    logits = net(pixels)[0]
    names = h.class_names or [str(i) for i in range(len(logits))]
    flow = rollout(weights)[0]
    patches = [i for i, p in enumerate(positions) if p.kind == "patch"]
    reads = flow[0] if net.head.pool == "cls" else flow[patches].mean(0)
    shown = denormalised(pixels[0], h.pixel_mean or 0.5, h.pixel_std or 0.5)
    top = logits.softmax(-1).max()
    return plot_rollout(shown, patch_grid(positions, reads), out / "rollout.png",
                        f"{title}: {names[int(logits.argmax())]} ({top:.0%})")


def detection_picture(objective, pixels: Tensor, weights: list[Tensor], positions: list[Position], out: Path,
                      title: str) -> Path:
    """A detector (YOLOS): per top-scoring detection token, its last layer's attention over the
    patches with its box, on the image as the network reads it (letterboxed into its square)."""
    detector = Detector(objective)
    (scored,) = predictions(detector.forward(pixels), detector.image_size)
    top = scored["scores"].argsort(descending=True)[:SHOWN_DETECTIONS]
    names = detector.class_names or [str(i) for i in range(objective.hparams.num_classes)]
    titles = [f"det{q}: {names[int(scored['labels'][q])]} {scored['scores'][q]:.2f}" for q in top.tolist()]
    heat = detection_heat(weights, positions)[top]
    shown = denormalised(pixels[0].cpu(), detector.mean, detector.std)
    return plot_detection_maps(shown, heat.cpu(), scored["boxes"][top].cpu(), titles, out / "detections.png",
                               f"{title}: the {len(top)} best detection tokens, last layer")


def encoder_decoder_maps(objective, source: Tensor, out: Path, title: str,
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
    source_labels = position_labels(towers["encoder"].embedder.describe_positions(source), tokenizer)
    # the seconds an audio encoder's position covers (its positions are 20 ms steps)
    step = towers["encoder"].embedder.stride * HOP_LENGTH / SAMPLE_RATE if spectrogram is not None else 0.0
    return (plot_layers(encoder, source_labels, source_labels, out, "encoder", title)
            + plot_layers(decoder, writes, reads, out, "decoder", title)
            + plot_layers(cross, writes, source_labels, out, "cross", title)
            + [plot_alignment(cross, writes, source_labels, out / "alignment.png",
                              f"{title}: {tokenizer.decode(output)!r}", spectrogram, step)])


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
    labels = position_labels(net.embedder.describe_positions(tokens), tokenizer)
    on_image_tokens = rollout(lm)[0, prompt.shape[1] - 1, at : at + tower.n_tokens]
    on_patches = on_image_tokens @ rollout(vision)[0, tower.n_dropped :, :]  # (the vision tower's positions)
    heat = patch_grid(towers["vision"].embedder.describe_positions(pixels), on_patches)
    return plot_layers(lm, labels, labels, out, "self", title) + [
        plot_rollout(pixels[0] * 0.5 + 0.5, heat, out / "rollout.png",
                     f"{question} -> {tokenizer.decode(answer)}")]

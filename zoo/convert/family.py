"""What a family's converter module declares for the export (``FAMILY = Family(...)``), and the
pieces several families' declarations share: example inputs, their outputs, the per-layer masks
of a net as one kind per layer, a Hugging Face image processor.

A module of ``zoo/convert`` that assigns ``FAMILY`` at its top level is a family: its
``pretrained`` is a ``model.converter`` (:func:`zoo.registry.family_modules` finds it without
importing it) and its ``FAMILY`` is collected by :mod:`zoo.convert.families`. Nothing about one
family is written anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn


REQUIRED = object()  # in a table of plain copies: a key config.json must hold (no default)


def copies(config: dict[str, Any], table: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The import's side of a table of plain copies (Hugging Face config key -> (zoo net path, its
    value when the config omits it, or :data:`REQUIRED`)): zoo path -> the config's value."""
    return {path: config[key] if default is REQUIRED else config.get(key, default)
            for key, (path, default) in table.items()}


def plain(table: dict[str, tuple[str, Any]], prefix: str = "") -> dict[str, str]:
    """The export's side of the same table: Hugging Face config key (under ``prefix``) -> zoo path."""
    return {prefix + key: path for key, (path, _) in table.items()}


def at(net: dict[str, Any], path: str) -> Any:
    """The value at ``path`` (dotted) of the net config ``net``."""
    return OmegaConf.select(OmegaConf.create(net), path)


def is_classifier(net: dict[str, Any]) -> bool:
    """Whether the net (its plain config) ends in a classifier head (task=classify, ViT)."""
    return net.get("head", {}).get("_target_") == "zoo.nn.heads.ClassifierHead"


def is_headless(net: dict[str, Any]) -> bool:
    """Whether the net (its plain config) gives its hidden states, its head ``torch.nn.Identity``
    (task=embed: the bare encoder)."""
    return net.get("head", {}).get("_target_") == "torch.nn.Identity"


def is_span_head(net: dict[str, Any]) -> bool:
    """Whether the net (its plain config) ends in a span head (task=qa)."""
    return net.get("head", {}).get("_target_") == "zoo.nn.heads.SpanHead"


def is_tagger(net: dict[str, Any]) -> bool:
    """Whether the net's classifier head classifies every token (task=tag: ``pool="tokens"``)."""
    return is_classifier(net) and net["head"].get("pool") == "tokens"


EXAMPLE_LENGTH = 1024  # the longest example the export checks on: past every CPU preset's window


def tokens(net: dict[str, Any], vocab: str = "embedder.vocab_size", length: int | None = None) -> Tensor:
    """(2, T) random ids below the vocabulary at ``vocab``, T = ``length`` cut to the context; by
    default the whole context up to :data:`EXAMPLE_LENGTH`, so that a mask or position the class
    does not express (a window, ALiBi) shows in the outputs: a short example sees none of it."""
    return torch.randint(0, at(net, vocab), (2, min(length or EXAMPLE_LENGTH, net["context"])))


def logits(hf: nn.Module, x: Tensor) -> Tensor:
    """(B, T, V): a Hugging Face model's logits on the input ids ``x``."""
    return hf(x).logits


def image(net: dict[str, Any]) -> Tensor:
    """(2, C, S, S) random images of the net's embedder's size."""
    e = net["embedder"]
    return torch.randn(2, e["channels"], e["image_size"], e["image_size"])


def video(net: dict[str, Any]) -> Tensor:
    """(2, T, C, S, S) random clips (frames first, as the zoo's and Hugging Face's video models read them)."""
    e = net["embedder"]
    return torch.randn(2, e["frames"], e["channels"], e["image_size"], e["image_size"])


def config_only(shape: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]:
    """A family's import shape that reads only the Hugging Face config."""
    return lambda config, net: shape(config)


def layer_masks(net: dict[str, Any], kinds: dict[str, str], windowed: str,
                hf_class: str) -> tuple[list[str], int | None]:
    """(each layer's kind, the one window) of the zoo net's masks (a PerLayer pattern tiles the
    layers), ``kinds``: mask class -> the Hugging Face name of the layer kind; ``windowed``: the
    class whose ``window`` is the window. Other masks, or two windows, are refused."""
    mask = net["mask"]
    masks = mask["masks"] if mask["_target_"] == "zoo.nn.masks.PerLayer" else [mask]
    unknown = sorted({m["_target_"] for m in masks} - set(kinds))
    windows = {m["window"] for m in masks if m["_target_"] == windowed}
    if unknown or len(windows) > 1:
        raise ValueError(f"{hf_class} has {sorted(kinds)} layers with one window: this net has masks "
                         f"{unknown or sorted(windows)}")
    return [kinds[masks[i % len(masks)]["_target_"]] for i in range(net["n_layers"])], next(iter(windows), None)


def image_processor(kind: str, size: int, hparams: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face image processor's config (``kind``, e.g. ``ViTImageProcessor``) that reads an
    image as the zoo's data does: resized (bicubic) to ``size`` square, pixels / 255, then
    normalised by the run's per-channel mean and std (the zoo's default 0.5 where the run has none)."""
    from zoo.data.images import MEAN, STD

    mean, std = hparams.get("pixel_mean") or [MEAN] * 3, hparams.get("pixel_std") or [STD] * 3
    return {"image_processor_type": kind, "do_resize": True, "size": {"height": size, "width": size},
            "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": list(mean), "image_std": list(std)}


def _nothing(*args: Any) -> dict[str, Any]:
    return {}


def _no_change(*args: Any) -> None:
    return None


def _same_ids(net: nn.Module, net_cfg: dict[str, Any], tokenizer: Any) -> tuple[nn.Module, dict[str, Any], Any]:
    return net, net_cfg, tokenizer


def _run(net: nn.Module, x: Tensor | tuple[Tensor, ...]) -> Tensor:
    return net(*x) if isinstance(x, tuple) else net(x)


@dataclass(frozen=True)
class Family:
    """What exporting one family needs (given by keyword in its converter module's ``FAMILY``).

    ``keys``: Hugging Face config key (dotted into a sub-config: ``text_config.x``) -> zoo net
    config path, the plain copies; ``shape``: (the import's Hugging Face config as a dict, the
    net config) -> the zoo values the import sets, against which the export's config is checked;
    ``state_dict``: (a Hugging Face state dict, the net config) -> the import's renaming;
    ``example``: the net config -> an input (or a tuple of inputs) both models are run on."""

    hf_class: str  # transformers class name, e.g. "GPT2LMHeadModel"
    config_class: str  # e.g. "GPT2Config"
    keys: dict[str, str]
    shape: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    state_dict: Callable[[dict[str, Tensor], dict[str, Any]], dict[str, Tensor]]
    example: Callable[[dict[str, Any]], Tensor | tuple[Tensor, ...]] = tokens
    outputs: Callable[[nn.Module, Any], Tensor] = logits  # the Hugging Face model's outputs
    ours: Callable[[nn.Module, Any], Tensor] = _run  # the zoo net's outputs on the same example
    activations: dict[str, str] = field(default_factory=dict)  # Hugging Face activation -> zoo's ({}: in ``extra``)
    activation_key: str | None = None  # the Hugging Face config key of the activation
    extra: Callable[[dict[str, Any]], dict[str, Any]] = _nothing  # config keys that are not plain copies
    prepare: Callable[[nn.Module, dict[str, Any]], None] = _no_change  # e.g. untie a head
    computed: tuple[str, ...] = ()  # zoo weights Hugging Face computes itself (not among its weights)
    ids_prefix: str = ""  # where the config keeps the special token ids (LLaVA: its text_config.)
    # (net config, run hparams) -> the processor files (name -> JSON) its client reads inputs with
    processors: Callable[[dict[str, Any], dict[str, Any]], dict[str, dict[str, Any]]] = _nothing
    tokenizer_files: Callable[[Path], None] = _no_change  # rewrites the saved tokenizer folder for its client
    # (net, net config, the run's tokenizer or None) -> the same with token ids renumbered, where the
    # Hugging Face class reads an id as something the run's id is not (CLIP: an end of text at id 2)
    renumber: Callable[[nn.Module, dict[str, Any], Any], tuple[nn.Module, dict[str, Any], Any]] = _same_ids
    chat_template: bool = False  # the run's prompt becomes the tokenizer's chat template (LLaVA)
    # a checkpoint whose model.converter is this module's is exported to hf_class (ViTDet: no, the
    # class is the backbone and a zoo ViTDet a classifier; named with hf_class=)
    marks_checkpoints: bool = True
    # the transformers class of this family with a sequence classifier in place of its head
    # (task=classify: ``zoo export`` writes it for a net whose head is a ``ClassifierHead``)
    classifier: str | None = None
    # the transformers class of this family's bare encoder (task=embed: ``zoo export`` writes it, in a
    # sentence-transformers folder, for a net whose head is ``torch.nn.Identity``)
    encoder: str | None = None
    # the transformers class of this family with a span head (task=qa: ``*ForQuestionAnswering``)
    question_answering: str | None = None
    # the same with a token classifier (task=tag: a ``ClassifierHead`` of ``pool="tokens"``)
    tagger: str | None = None

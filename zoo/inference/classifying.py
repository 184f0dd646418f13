"""Zero-shot classification with a two-tower checkpoint (CLIP, SigLIP): what ``zoo classify`` runs.

Each label becomes a caption (``prompt``, "a photo of a {label}"), encoded by the text tower as the
objective encodes its classes' captions (:meth:`~zoo.objectives.contrastive.Contrastive.class_vectors`);
the image, resized to the vision tower's size and normalised as the image-text data are, is compared
with each. The scores are the model's own reading of its logits: a softmax over the labels (CLIP's
loss) or each label's sigmoid (SigLIP's).
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from zoo.data.images import to_tensor
from zoo.data.tokenizers import WordTokenizer
from zoo.objectives.loading import load

PROMPT = "a photo of a {label}"


class ZeroShot:
    """A two-tower network and its tokenizer, loaded from a zoo checkpoint."""

    def __init__(self, ckpt: str | Path, device: str = "cpu"):
        self.objective = load(ckpt, device, accepts=("contrastive",), command="zoo classify (model=clip / siglip)")
        if self.objective._tokenizer is None:
            raise ValueError(f"{ckpt} holds no tokenizer: it cannot read the labels")
        self.ckpt = ckpt

    def prompts(self, labels: list[str], prompt: str = PROMPT) -> list[str]:
        """Each label's caption; refused: no labels, one label under a softmax (CLIP's score of it is
        1.0 whatever the image: a choice among one says nothing; SigLIP's sigmoid scores a label
        on its own, so one is fine), a prompt without ``{label}``, and (a word vocabulary) words
        the checkpoint never saw (each would read as ``<unk>``)."""
        if not labels:
            raise ValueError('labels=[] is empty: give the labels to choose among, e.g. labels="[cat, dog]"')
        if len(labels) == 1 and self.objective.hparams.loss != "sigmoid":
            raise ValueError(f"labels=[{labels[0]}] is one label: {self.ckpt} scores labels by a softmax over "
                             f"them, which gives one label 1.0 whatever the image: give two or more to choose among")
        if "{label}" not in prompt:
            raise ValueError(f"prompt={prompt!r} has no {{label}} to put each label in")
        captions = [prompt.format(label=label) for label in labels]
        tokenizer = self.objective._tokenizer
        if isinstance(tokenizer, WordTokenizer):
            unknown = sorted({w for c in captions for w in WordTokenizer.split(c) if w not in tokenizer.index})
            if unknown:
                raise ValueError(f"words not in the vocabulary of {self.ckpt}: {unknown} (each would read as <unk>): "
                                 f"use labels it was trained on")
        return captions

    @torch.no_grad()
    def __call__(self, image: Image.Image, labels: list[str], prompt: str = PROMPT) -> list[tuple[str, float]]:
        """(label, score) for each label, best first."""
        captions = self.prompts(labels, prompt)
        net = self.objective.net
        pixels = to_tensor(image, net.vision.embedder.image_size)[None].to(self.objective.device)
        logits = net.similarity(net.encode_image(pixels), self.objective.class_vectors(captions))[0].float()
        scores = logits.sigmoid() if self.objective.hparams.loss == "sigmoid" else logits.softmax(-1)
        return sorted(zip(labels, scores.tolist()), key=lambda pair: -pair[1])

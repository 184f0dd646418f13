"""Answering a question about an image with a LLaVA checkpoint (greedy decoding, KV cache):
what ``zoo answer`` and the LLaVA attention maps run.

The checkpoint holds everything needed: the network's config, its weights, the
tokenizer and the prompt template of the data it was trained on. The image is
resized to the vision tower's size; the prompt's ``<image>`` placeholder becomes the
image tokens, which go through the cache on the first decoding step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from torch import nn

from zoo.objectives.loading import load
from zoo.data.images import to_tensor
from zoo.data.tokenizers import WordTokenizer, tokenizer_from_state
from zoo.models.sampling import generate
from zoo.nn.multimodal import expand_image_placeholder


class Answerer:
    """A LLaVA network, its tokenizer and prompt template, loaded from a zoo checkpoint."""

    def __init__(self, ckpt: str | Path):
        objective = load(ckpt, accepts=("vlm",), command="zoo answer (model=llava*)")
        hparams = objective.hparams
        if not hparams.tokenizer:
            raise ValueError(f"{ckpt} holds no tokenizer: it cannot read a question")
        self.net: nn.Module = objective.net
        self.tokenizer = tokenizer_from_state(hparams.tokenizer)
        self.prompt, self.max_tokens = hparams.prompt, hparams.max_answer_tokens
        self.ckpt = ckpt

    def check_question(self, question: str) -> None:
        """Refuse a question the checkpoint cannot read: none where its prompt template asks one,
        one where it asks none (a captioning checkpoint), or words outside its word vocabulary
        (each would read as ``<unk>``)."""
        asks = "{question}" in self.prompt
        if asks and not question.strip():
            raise ValueError(f"question={question!r} is empty: {self.ckpt} answers a question about the image "
                             f"(its prompt is {self.prompt!r}); ask one")
        if not asks and question.strip():
            raise ValueError(f"{self.ckpt} was trained on prompts without a question ({self.prompt!r}: it describes "
                             f"the image): leave question= out")
        if isinstance(self.tokenizer, WordTokenizer):
            unknown = sorted({w for w in WordTokenizer.split(question) if w not in self.tokenizer.index})
            if unknown:
                raise ValueError(f"words not in the vocabulary of {self.ckpt}: {unknown} (each would read as "
                                 f"<unk>): ask with the words it was trained on")

    def inputs(self, image: Image.Image, question: str = "") -> tuple[torch.Tensor, torch.Tensor, int]:
        """The network's inputs for one question (checked: :meth:`check_question`): prompt ids (1, L)
        with the image tokens expanded, pixels (1, 3, S, S), and where the image tokens start in the prompt."""
        self.check_question(question)
        vision = self.net.embedder.vision
        ids = self.tokenizer.encode(self.prompt.format(question=question))
        ids, at = expand_image_placeholder(ids, self.tokenizer.image_id, vision.n_tokens, self.net.context)
        return torch.tensor([ids]), to_tensor(image, vision.image_size)[None], at

    @torch.no_grad()
    def answer_ids(self, image: Image.Image, question: str = "") -> tuple[torch.Tensor, list[int]]:
        """(prompt ids (1, L), greedy answer ids, end token left out)."""
        tokens, pixels, _ = self.inputs(image, question)
        out = generate(self.net, tokens, self.max_tokens, temperature=0, eos_id=self.tokenizer.eos_id,
                       suppress=(self.net.embedder.image_token_id,), images=pixels)
        answer = out[0, tokens.shape[1]:].tolist()
        return tokens, answer[: answer.index(self.tokenizer.eos_id)] if self.tokenizer.eos_id in answer else answer

    def __call__(self, image: Image.Image, question: str = "") -> str:
        return self.tokenizer.decode(self.answer_ids(image, question)[1])

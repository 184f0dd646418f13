"""Two towers of the same Block, side by side, no cross-attention: a text tower and a vision tower,
each pooled to one vector and projected into one shared space, where an image and a text are
compared by the cosine of their vectors (CLIP, SigLIP). A contrastive objective
(``zoo.objectives.contrastive``) joins them.

The text tower is this module itself (a :class:`~zoo.models.model.Model`: its embedder, Blocks,
final norm and head, the head being the text projection), named ``text``; the vision tower is a
second Model, named ``vision``, its head the visual projection (CLIP) or the attention-pooling
head (SigLIP). Each tower pools by a rule of ``zoo.nn.token_pool`` (only the pooled position goes
through the head), or, with ``vision_pool=None``, its head reads every position (SigLIP's MAP head).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.models.model import Model
from zoo.nn.flops import linear_flops, tower_flops, training_flops
from zoo.nn.token_pool import check_rule, pick, pooled_index


class TwoTower(Model):
    """A text tower (this Model) and a vision tower (``vision``), their pooled and projected vectors
    compared by ``exp(logit_scale) * cos(image, text) + logit_bias``.

    Args (besides :class:`~zoo.models.model.Model`'s, which build the text tower):
        vision: the vision tower, a Model (a PatchEmbedder, Blocks, a head that makes each image one
            vector of the text head's width).
        text_pool: the text tower's pooling rule (``zoo.nn.token_pool.RULES``): CLIP ``eos`` (or
            ``argmax``), SigLIP ``last``.
        eos_id: the end-of-text id ``text_pool=eos`` pools at.
        vision_pool: the vision tower's pooling rule (CLIP ``first``: the CLS token), or None: its
            head reads every position (SigLIP's attention-pooling head).
        logit_scale: the learned temperature's log at the start (CLIP: log(1 / 0.07)).
        logit_bias: a learned offset of every logit, its start (SigLIP: -10); None: none (CLIP).
    """

    def __init__(self, *args, vision: Model, text_pool: str = "eos", eos_id: int | None = None,
                 vision_pool: str | None = "first", logit_scale: float = math.log(1 / 0.07),
                 logit_bias: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        check_rule(text_pool, eos_id)
        if vision_pool is not None:
            check_rule(vision_pool, None)
        self.name, vision.name = "text", "vision"
        self.vision = vision
        self.text_pool, self.eos_id, self.vision_pool = text_pool, eos_id, vision_pool
        self.logit_scale = nn.Parameter(torch.tensor(float(logit_scale)))
        self.logit_bias = None if logit_bias is None else nn.Parameter(torch.tensor(float(logit_bias)))

    def encode_text(self, tokens: Tensor, key_padding: Tensor | None = None) -> Tensor:
        """tokens (B, L) ids, key_padding (B, L) True at real tokens -> text vectors (B, P), not normalised."""
        x = self.hidden(tokens, key_padding)  # (B, L, D)
        return self.head(pick(x, pooled_index(self.text_pool, tokens, tokens.shape[1], self.eos_id)))

    def encode_image(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> image vectors (B, P), not normalised."""
        x = self.vision.hidden(images)  # (B, L, D)
        if self.vision_pool is not None:
            x = pick(x, pooled_index(self.vision_pool, images, x.shape[1]))  # (B, D)
        return self.vision.head(x)

    def similarity(self, image_vectors: Tensor, text_vectors: Tensor) -> Tensor:
        """(N, P) image and (M, P) text vectors -> logits per image (N, M): the cosine of each pair,
        scaled by exp(logit_scale), plus logit_bias."""
        cosine = F.normalize(image_vectors, dim=-1) @ F.normalize(text_vectors, dim=-1).T
        logits = cosine * self.logit_scale.exp()
        return logits if self.logit_bias is None else logits + self.logit_bias

    def forward(self, tokens: Tensor, images: Tensor, key_padding: Tensor | None = None) -> Tensor:
        """tokens (M, L), images (N, C, H, W), key_padding (M, L) -> logits per image (N, M)
        (Hugging Face's ``logits_per_image``; its transpose is ``logits_per_text``)."""
        return self.similarity(self.encode_image(images), self.encode_text(tokens, key_padding))

    def batch_flops(self, tokens: Tensor, images: Tensor) -> int:
        """Training FLOPs of one step on a batch of ``tokens`` (B, L) and ``images`` (what ``forward`` takes)."""
        return self.training_flops(tokens.shape[0], tokens.shape[1], self.vision.output_length(images))

    def training_flops(self, batch: int, text_length: int, image_length: int) -> int:
        """Analytic FLOPs of one training step on ``batch`` pairs of a text of ``text_length`` tokens
        and an image of ``image_length`` positions (see zoo.nn.flops): both towers and their heads, a
        pooled head on its one vector (the (batch x batch) cosines are left out: a vector's width per pair)."""
        vision_head = linear_flops(self.vision.head) * (image_length if self.vision_pool is None else 1)
        return training_flops(batch * (tower_flops(self, text_length) + tower_flops(self.vision, image_length)
                                       + linear_flops(self.head) + vision_head))

"""LLaVA's input: projected image features spliced into the text sequence.

The prompt carries one ``<image>`` placeholder; :func:`expand_image_placeholder`
repeats it once per image feature (or puts the image tokens in front when the
prompt has none), as Hugging Face's LLaVA processor does. The
:class:`MultimodalEmbedder` then puts the projected features where those tokens
are, so the language model sees one sequence and every position (targets,
masks, the KV cache) lines up with the token ids.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.nn.embedders import Position, TokenEmbedder


class Projector(nn.Sequential):
    """Vision features -> LM width: ``linear`` (LLaVA) or ``mlp2x_gelu`` (LLaVA-1.5)."""

    def __init__(self, kind: str, d_in: int, d_out: int):
        if kind == "linear":
            layers = [nn.Linear(d_in, d_out)]
        elif kind == "mlp2x_gelu":
            layers = [nn.Linear(d_in, d_out), nn.GELU(), nn.Linear(d_out, d_out)]
        else:
            raise ValueError(f"unknown projector {kind!r}: expected 'linear' or 'mlp2x_gelu'")
        super().__init__(*layers)


def check_fits(n_text: int, n_image: int, context: int) -> None:
    """Fail, with the lengths, when prompt + image tokens exceed the LM's context."""
    if n_text + n_image > context:
        raise ValueError(f"prompt of {n_text} text tokens + {n_image} image tokens = {n_text + n_image} "
                         f"is longer than the language model's context of {context}")


def expand_image_placeholder(ids: list[int], image_token_id: int, n_image_tokens: int,
                             context: int | None = None) -> tuple[list[int], int]:
    """Repeat the prompt's one ``<image>`` id ``n_image_tokens`` times (prepend them when it has none).

    Returns (expanded ids, index of the first image token). A prompt with more than one
    placeholder for its one image fails, as does a result longer than ``context``.
    """
    count = ids.count(image_token_id)
    if count > 1:
        raise ValueError(f"the prompt has {count} <image> placeholders for one image: put exactly one "
                         f"(or none, to put the image first)")
    at = ids.index(image_token_id) if count else 0
    rest = ids[at + 1 :] if count else ids
    if context is not None:
        check_fits(len(ids) - count, n_image_tokens, context)
    return ids[:at] + [image_token_id] * n_image_tokens + rest, at


def expand_batch(tokens: Tensor, targets: Tensor, prefix_len: Tensor, image_token_id: int, n_image_tokens: int,
                 pad_id: int, context: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`expand_image_placeholder` for a right-padded batch.

    tokens, targets (B, L) -> (B, L'), with target -100 at the image tokens (no loss there);
    prefix_len (B,) is shifted by the tokens added before it. Rows are right-padded again
    (``pad_id``, target -100) to the longest.
    """
    rows, row_targets, prefixes = [], [], []
    for ids, tgt, prefix in zip(tokens.tolist(), targets.tolist(), prefix_len.tolist()):
        expanded, at = expand_image_placeholder(ids, image_token_id, n_image_tokens, context)
        added = len(expanded) - len(ids)
        placeholder = int(image_token_id in ids)
        rows.append(expanded)
        row_targets.append(tgt[:at] + [-100] * n_image_tokens + tgt[at + placeholder :])
        prefixes.append(prefix + added)
    width = max(map(len, rows))
    new_tokens = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], device=tokens.device)
    new_targets = torch.tensor([t + [-100] * (width - len(t)) for t in row_targets], device=tokens.device)
    return new_tokens, new_targets, torch.tensor(prefixes, device=prefix_len.device)


class MultimodalEmbedder(nn.Module):
    """Token ids + images -> (B, L, D): token embeddings, with the projected image
    features in place of the ``<image>`` tokens, then the text embedder's positions.

    Args:
        text: the language model's token embedder.
        vision: a vision tower (``n_tokens``, ``d_out``, ``image_size``).
        projector: ``linear`` or ``mlp2x_gelu`` (:class:`Projector`).
        image_token_id: the id of ``<image>``.
    """

    def __init__(self, text: TokenEmbedder, vision: nn.Module, projector: str, image_token_id: int):
        super().__init__()
        self.text, self.vision, self.image_token_id = text, vision, image_token_id
        self.projector = Projector(projector, vision.d_out, text.tokens.embedding_dim)

    @property
    def tokens(self) -> nn.Embedding:
        """The token embedding (what a tied LM head shares)."""
        return self.text.tokens

    @property
    def n_image_tokens(self) -> int:
        return self.vision.n_tokens

    def output_length(self, tokens: Tensor) -> int:
        """Vectors for ``tokens`` (B, L), image placeholders already expanded: one per token."""
        return self.text.output_length(tokens)

    def describe_positions(self, tokens: Tensor) -> list[Position]:
        """tokens (1, L), image placeholders already expanded: the ``image`` tokens numbered in
        order, the text's ``token`` positions elsewhere."""
        where = (tokens[0] == self.image_token_id).tolist()
        numbers = (torch.cumsum(tokens[0] == self.image_token_id, 0) - 1).tolist()
        return [Position("image", (k,)) if image else p
                for image, k, p in zip(where, numbers, self.text.describe_positions(tokens))]

    def image_features(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> projected features (B, n_image_tokens, D)."""
        return self.projector(self.vision(images))

    def forward(self, tokens: Tensor, start: int = 0, images: Tensor | None = None) -> Tensor:
        """tokens (B, L) (image placeholders already expanded), images (B, C, H, W) -> (B, L, D)."""
        where = tokens == self.image_token_id
        # The checks read the tokens' values (an .item() each), which would stop torch.compile's
        # graph: they run eagerly and are left out of a compiled forward, as transformers does.
        if not torch.compiler.is_compiling():
            self.check(where, start, images)
        if images is None:
            return self.text(tokens, start)
        features = self.image_features(images)
        return self.text(tokens, start, inserted=(where, features.flatten(0, 1)))

    def check(self, where: Tensor, start: int, images: Tensor | None) -> None:
        """Refuse tokens that do not fit the context, <image> tokens without an image, or rows whose
        <image> tokens are not as many as an image's features. where (B, L): the <image> tokens."""
        n_image = int(where.sum(1).max())
        check_fits(start + where.shape[1] - n_image, n_image, self.text.max_len)
        if images is None:
            if n_image:
                raise ValueError(f"the tokens hold {n_image} <image> tokens but no image was given")
            return
        per_row = where.sum(1)
        if (per_row != self.n_image_tokens).any():
            raise ValueError(f"rows hold {per_row.tolist()} <image> tokens but each image gives {self.n_image_tokens} "
                             f"features: expand the prompt's one placeholder (expand_image_placeholder)")

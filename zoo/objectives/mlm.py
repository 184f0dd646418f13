"""Masked language modelling (BERT): corrupt some tokens, predict the originals.

Reusable by any bidirectional encoder whose net takes ``(tokens, key_padding=, keep=)``
(see :class:`zoo.models.model.Model`) and whose data yields :class:`PaddedTokens` batches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from zoo.data.batches import PaddedTokens
from zoo.objectives.base import Objective


def mask_tokens(tokens: Tensor, padding: Tensor, special_ids: Tensor, mask_id: int, vocab_size: int,
                select_prob: float, mask_prob: float, random_prob: float,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """BERT's corruption. tokens, padding (B, L) (padding True = real) -> (inputs (B, L), selected (B, L) bool).

    Each real, non-special token is selected with probability ``select_prob``; a selected
    token becomes [MASK] with probability ``mask_prob``, a uniformly random token with
    ``random_prob``, and stays itself otherwise. The loss is computed on the selected
    positions only. At least one token is selected, so the loss is always defined.
    """
    candidates = padding & ~torch.isin(tokens, special_ids)
    draw = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    selected = candidates & (draw < select_prob)
    if not selected.any() and candidates.any():  # a tiny batch can draw none
        first = candidates.flatten().nonzero()[0]
        selected.view(-1)[first] = True
    # Reuse the draw: given selection, draw / select_prob is uniform on [0, 1).
    how = draw / select_prob
    to_mask = selected & (how < mask_prob)
    to_random = selected & (how >= mask_prob) & (how < mask_prob + random_prob)
    random_tokens = torch.randint(vocab_size, tokens.shape, generator=generator, device=tokens.device)
    inputs = torch.where(to_mask, mask_id, torch.where(to_random, random_tokens, tokens))
    return inputs, selected


def batch_generator(objective: Objective, seed: int, stream: int, index: int,
                    device: torch.device | str | None = None) -> torch.Generator:
    """A generator (on ``device``, by default ``objective``'s) for batch ``index`` of ``stream``
    (0 train, 1 val, 2 test) of its rank: a corruption drawn from it is a function of (seed, rank,
    stream, index), so a resumed run corrupts as an uninterrupted one would."""
    rank = objective.global_rank if objective._trainer is not None else 0
    seed = ((seed * 1_000_003 + rank) * 7 + stream) * 1_000_003 + index
    return torch.Generator(device=device or objective.device).manual_seed(seed)


class MaskedLM(Objective):
    """Cross-entropy of the original tokens at the selected positions (BERT's MLM).

    Batches are :class:`PaddedTokens` (tokens (B, L) int, padding (B, L) bool, True = real). Only
    the selected positions go through the head (``keep``), so the vocabulary projection
    costs ~15% of a full one. Validation and test report the loss, the masked-token
    accuracy and the perplexity over the selected tokens (torchmetrics, accumulated over
    the whole split), with a masking that is the same at every evaluation.

    Args (besides :class:`Objective`'s):
        mask_id: the [MASK] token's id.
        special_ids: ids that are never selected ([CLS], [SEP], [PAD], [MASK], [UNK], ...).
        select_prob, mask_prob, random_prob: BERT's 15% / 80% / 10% (the rest unchanged).
        seed: seeds the masking, which is a function of (seed, rank, step), so a resumed run
            masks as an uninterrupted one would.
    """

    accepts = (PaddedTokens,)

    def __init__(self, *args, mask_id: int, special_ids: list[int], select_prob: float = 0.15,
                 mask_prob: float = 0.8, random_prob: float = 0.1, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0 < select_prob <= 1 or mask_prob + random_prob > 1:
            raise ValueError(f"select_prob={select_prob}, mask_prob={mask_prob}, random_prob={random_prob}: "
                             f"need 0 < select_prob <= 1 and mask_prob + random_prob <= 1")
        # Checkpoints must rebuild this objective: keep its own arguments next to the base's.
        self.hparams.update({"mask_id": mask_id, "special_ids": list(special_ids), "select_prob": select_prob,
                             "mask_prob": mask_prob, "random_prob": random_prob, "seed": seed})
        self.mask_id, self.seed = mask_id, seed
        self.select_prob, self.mask_prob, self.random_prob = select_prob, mask_prob, random_prob
        self.register_buffer("special_ids", torch.tensor(special_ids, dtype=torch.long), persistent=False)
        self.vocab_size = self.net.embedder.tokens.num_embeddings
        self.metrics = torch.nn.ModuleDict({
            stage: torch.nn.ModuleDict({
                "acc": MulticlassAccuracy(self.vocab_size, average="micro"),
                "ppl": Perplexity(),
            }) for stage in ("val", "test")
        })

    def _generator(self, stream: int, index: int) -> torch.Generator:
        return batch_generator(self, self.seed, stream, index)

    def forward_mlm(self, batch: PaddedTokens, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """(logits (N, V), targets (N,)) at the N selected positions of ``batch``."""
        tokens, padding = batch.tokens, batch.padding
        inputs, selected = mask_tokens(tokens, padding, self.special_ids, self.mask_id, self.vocab_size,
                                       self.select_prob, self.mask_prob, self.random_prob, generator)
        logits = self.forward_net(inputs, key_padding=padding, keep=selected)
        return logits.float(), tokens[selected]

    def training_step(self, batch: PaddedTokens, batch_idx: int) -> Tensor:
        # (counts the head on every position: an upper bound, as only ~15% go through it)
        self.flops_per_batch = self.net.batch_flops(batch.tokens)
        logits, targets = self.forward_mlm(batch, self._generator(0, self.global_step))
        loss = F.cross_entropy(logits, targets)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def _evaluate(self, stage: str, stream: int, batch: PaddedTokens, batch_idx: int) -> None:
        logits, targets = self.forward_mlm(batch, self._generator(stream, batch_idx))
        n = len(targets)
        self.log(f"{stage}/loss", F.cross_entropy(logits, targets), prog_bar=True, sync_dist=True, batch_size=n)
        metrics = self.metrics[stage]
        metrics["acc"].update(logits, targets)
        metrics["ppl"].update(logits[None], targets[None])
        self.log(f"{stage}/acc", metrics["acc"], batch_size=n)
        self.log(f"{stage}/ppl", metrics["ppl"], batch_size=n)

    def validation_step(self, batch: PaddedTokens, batch_idx: int) -> None:
        self._evaluate("val", 1, batch, batch_idx)

    def test_step(self, batch: PaddedTokens, batch_idx: int) -> None:
        self._evaluate("test", 2, batch, batch_idx)

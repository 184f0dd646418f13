"""BART's pre-training (Lewis et al. 2019, section 2.2): a sequence-to-sequence model restores
text that was corrupted by **sentence permutation** (the sentences shuffled) and then **text
infilling** (spans of Poisson(3) lengths, 30% of the tokens in all, each span replaced by one
mask token, a span of length 0 inserting one); the target is the original text.

Batches of plain text (:class:`~zoo.data.batches.PaddedTokens`, e.g. data=wikitext) are corrupted
here; text pairs (:class:`~zoo.data.batches.SequencePairs`, data=multi30k) pass through as
:class:`~zoo.objectives.seq2seq.Seq2Seq` reads them (fine-tuning).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import torch

from zoo.data.batches import PaddedTokens, SequencePairs
from zoo.data.tokenizers import present_ids
from zoo.objectives.mlm import batch_generator
from zoo.objectives.seq2seq import Seq2Seq


def span_lengths(n_masked: int, poisson_lambda: float, generator: torch.Generator) -> list[int]:
    """Span lengths drawn from Poisson(``poisson_lambda``) until they cover ``n_masked`` tokens,
    the last cut so that they sum to exactly that (it may be cut to 0: an insertion)."""
    lengths: list[int] = []
    while sum(lengths) < n_masked:
        lengths += torch.poisson(torch.full((n_masked,), float(poisson_lambda)), generator=generator).long().tolist()
        covered = torch.tensor(lengths).cumsum(0)
        lengths = lengths[: int((covered < n_masked).sum()) + 1]
    lengths[-1] -= sum(lengths) - n_masked
    return lengths


def infill(tokens: list[int], mask_id: int, ratio: float, poisson_lambda: float,
           generator: torch.Generator) -> list[int]:
    """Text infilling: round(``ratio`` * len) of ``tokens`` in spans of Poisson lengths, each span
    replaced by one ``mask_id``. The spans are placed at random, apart (at least one kept token
    between two of them, so each stays one mask); where the kept tokens are too few to hold them
    apart, the last spans are joined."""
    n_masked = round(ratio * len(tokens))
    if n_masked == 0:
        return list(tokens)
    lengths = span_lengths(n_masked, poisson_lambda, generator)
    kept = len(tokens) - n_masked
    while len(lengths) - 1 > kept:
        lengths[-2:] = [lengths[-2] + lengths[-1]]
    # the kept tokens split into len + 1 runs, the inner ones at least 1 long (stars and bars)
    k, free = len(lengths), kept - (len(lengths) - 1)
    bars = torch.randperm(free + k, generator=generator)[:k].sort().values.tolist()
    runs = [b - a - 1 for a, b in zip([-1, *bars], [*bars, free + k])]
    runs = [r + (0 < i < k) for i, r in enumerate(runs)]
    out, pos = list(tokens[: runs[0]]), runs[0]
    for length, run in zip(lengths, runs[1:]):
        out.append(mask_id)
        out += tokens[pos + length: pos + length + run]
        pos += length + run
    return out


def permute_sentences(tokens: list[int], ends: set[int], generator: torch.Generator) -> list[int]:
    """Sentence permutation: ``tokens`` split after each id in ``ends`` (a full stop, ...), the
    sentences in a random order."""
    sentences, start = [], 0
    for i, t in enumerate(tokens):
        if t in ends:
            sentences.append(tokens[start: i + 1])
            start = i + 1
    if start < len(tokens):
        sentences.append(tokens[start:])
    return [t for i in torch.randperm(len(sentences), generator=generator).tolist() for t in sentences[i]]


class Denoising(Seq2Seq):
    """BART's denoising objective: :class:`Seq2Seq` on (corrupted text, text) pairs.

    Args (besides :class:`Seq2Seq`'s):
        mask_id: the mask token (data=wikitext's ``[MASK]``); needed for plain text only.
        special_ids: ids that frame a sequence (``[CLS]`` ... ``[SEP]``): a first and last token
            among them stay in place, the text between them is corrupted.
        mask_ratio: the share of the text's tokens infilling masks (BART: 0.3).
        poisson_lambda: the mean span length (BART: 3).
        sentence_ends: the tokens that end a sentence, looked up in the run's tokenizer (those it
            has); none, or no tokenizer: no sentence permutation.
        start_id: the decoder's first input (BART starts from its end-of-sequence token).
        seed: the corruption of batch i of a split is a function of (seed, rank, split, i).
    """

    @classmethod
    def accepted(cls, model_cfg: Any) -> tuple[type, ...]:
        return SequencePairs, PaddedTokens

    def __init__(self, *args, mask_id: int | None = None, special_ids: list[int] | None = None,
                 mask_ratio: float = 0.3, poisson_lambda: float = 3.0, sentence_ends: list[str] | None = None,
                 start_id: int | None = None, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0 <= mask_ratio < 1 or poisson_lambda <= 0:
            raise ValueError(f"mask_ratio={mask_ratio}, poisson_lambda={poisson_lambda}: need 0 <= mask_ratio < 1 "
                             f"and poisson_lambda > 0")
        self.hparams.update({"mask_id": mask_id, "special_ids": list(special_ids or []), "mask_ratio": mask_ratio,
                             "poisson_lambda": poisson_lambda, "sentence_ends": list(sentence_ends or []),
                             "start_id": start_id, "seed": seed})
        self.mask_id, self.special_ids, self.start_id, self.seed = mask_id, set(special_ids or []), start_id, seed
        self.mask_ratio, self.poisson_lambda = mask_ratio, poisson_lambda
        self.sentence_ends = list(sentence_ends or [])

    @cached_property
    def sentence_end_ids(self) -> set[int]:
        """The ids of ``sentence_ends`` the run's tokenizer has."""
        return set(present_ids(self.tokenizer, self.sentence_ends).values()) if self.tokenizer is not None else set()

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        return batch  # plain text is corrupted in each step, seeded by the step (see ``noised``)

    def noise(self, tokens: list[int], generator: torch.Generator) -> list[int]:
        """One sequence -> its corruption: sentences permuted, then spans infilled; a first and
        last token among ``special_ids`` stay where they are."""
        head = 1 if tokens and tokens[0] in self.special_ids else 0
        tail = 1 if len(tokens) > head and tokens[-1] in self.special_ids else 0
        body = tokens[head: len(tokens) - tail]
        if self.sentence_end_ids:
            body = permute_sentences(body, self.sentence_end_ids, generator)
        body = infill(body, self.mask_id, self.mask_ratio, self.poisson_lambda, generator)
        return tokens[:head] + body + tokens[len(tokens) - tail:]

    def noised(self, batch: PaddedTokens | SequencePairs, stream: int, index: int) -> SequencePairs:
        """``batch`` as pairs: plain text -> (its corruption, itself); pairs as they are."""
        if isinstance(batch, SequencePairs):
            return batch
        if self.mask_id is None or self.start_id is None:
            raise ValueError("denoising plain text needs model.mask_id and model.start_id: the data gives no "
                             "mask token (data=wikitext does)")
        generator = batch_generator(self, self.seed, stream, index, "cpu")  # the noise is drawn on the host
        rows = [row[:n] for row, n in zip(batch.tokens.tolist(), batch.padding.sum(1).tolist())]
        return SequencePairs.of_lists([(self.noise(row, generator), row) for row in rows], self.start_id,
                                      batch.tokens.device)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return super().training_step(self.noised(batch, 0, self.global_step), batch_idx)

    def validation_step(self, batch, batch_idx: int) -> None:
        super().validation_step(self.noised(batch, 1, batch_idx), batch_idx)

    def test_step(self, batch, batch_idx: int) -> None:
        super().test_step(self.noised(batch, 2, batch_idx), batch_idx)

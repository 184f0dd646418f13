"""T5's span corruption: the pre-training task that turns plain text into
(source, target) pairs for a sequence-to-sequence model.

About 15% of each block's tokens, in spans of mean length 3, are cut out; the source
keeps the rest with a sentinel in each gap, the target lists each sentinel followed by
the tokens it replaced (Raffel et al. 2020, section 3.1.4; the reference
``random_spans_noise_mask`` of the T5 code).

Ids, in one of two layouts (:func:`holds_sentinels` tells them apart):

- the zoo's: the data's vocabulary is 0 .. V-1; sentinels are V .. V+n-1, then end-of-sequence
  V+n and the decoder's start token V+n+1 (so the model's vocabulary is V + n + 2);
- a Hugging Face T5 tokenizer's: it holds the sentinels itself (``<extra_id_0>`` .. at the
  top of its ids) and ``</s>``; the decoder starts from its pad token (T5's
  ``decoder_start_token_id``), so every id is below the tokenizer's size.
"""

from __future__ import annotations

import random
from functools import cached_property

from zoo.data.batches import PaddedTokens, SequencePairs
from zoo.data.tokenizers import TEXT_END, TEXT_PAD, CharTokenizer, HFTokenizer, first_token, present_ids
from zoo.data.pretrained import tokenizer_of

SENTINEL = "<extra_id_{}>"  # a Hugging Face T5 tokenizer's sentinel i


def holds_sentinels(tokenizer: HFTokenizer | CharTokenizer) -> bool:
    """Whether ``tokenizer`` holds T5's sentinels itself (a Hugging Face T5 tokenizer's layout,
    ``<extra_id_0>`` among its ids) rather than leaving them to the zoo, after its vocabulary."""
    return bool(present_ids(tokenizer, [SENTINEL.format(0)]))


def random_segmentation(rng: random.Random, num_items: int, num_segments: int) -> list[int]:
    """Split ``num_items`` into ``num_segments`` non-empty runs of random lengths."""
    cuts = sorted(rng.sample(range(1, num_items), num_segments - 1))
    bounds = [0, *cuts, num_items]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def noise_spans(rng: random.Random, length: int, noise_density: float, mean_span_length: float) -> list[tuple[int, int]]:
    """(start, end) of the noise spans in a sequence of ``length`` tokens (length >= 2).

    Like T5: round(length * density) noise tokens (at least 1, at most length - 1), in
    round(noise / mean) spans, alternating with as many non-noise runs, non-noise first.
    """
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_span_length), 1)
    num_spans = min(num_spans, num_noise, length - num_noise)
    noise = random_segmentation(rng, num_noise, num_spans)
    keep = random_segmentation(rng, length - num_noise, num_spans)
    spans, pos = [], 0
    for k, n in zip(keep, noise):
        spans.append((pos + k, pos + k + n))
        pos += k + n
    return spans


class SpanCorruption:
    """:class:`PaddedTokens` text blocks -> :class:`SequencePairs`.

    Args:
        vocab_size: the data's vocabulary size V (sentinels and specials come after it).
        noise_density: fraction of tokens corrupted (T5: 0.15).
        mean_span_length: mean length of a corrupted span (T5: 3).
        n_sentinels: how many sentinel ids exist (T5: 100); a block needs no more spans.
        seed: for the random spans.
        tokenizer_from: the checkpoint the model starts from (``model.init_from``): where its
            tokenizer holds the sentinels (:func:`holds_sentinels`), its ids are used. Read on
            the first batch, so that a checkpoint loaded for inference never reads it again.
    """

    def __init__(self, vocab_size: int, noise_density: float = 0.15, mean_span_length: float = 3.0,
                 n_sentinels: int = 100, seed: int = 0, tokenizer_from: str | None = None):
        self.vocab_size, self.noise_density, self.mean_span_length = vocab_size, noise_density, mean_span_length
        self.n_sentinels, self.tokenizer_from = n_sentinels, tokenizer_from
        self.rng = random.Random(seed)

    @cached_property
    def ids(self) -> tuple[list[int], int, int]:
        """(the sentinels' ids, end-of-sequence, the decoder's start) in the tokenizer's layout."""
        if self.tokenizer_from is not None:
            tokenizer = tokenizer_of(self.tokenizer_from)
            if holds_sentinels(tokenizer):
                names = [SENTINEL.format(i) for i in range(self.n_sentinels)]
                missing = [name for name in names if name not in present_ids(tokenizer, names)]
                if missing:
                    raise ValueError(f"the tokenizer of {self.tokenizer_from} holds {SENTINEL.format(0)} but not "
                                     f"{missing[:3]} ({len(missing)} missing): span corruption uses n_sentinels="
                                     f"{self.n_sentinels} of them")
                end = tokenizer.token_id(first_token(tokenizer, TEXT_END, "end-of-sequence", self.tokenizer_from))
                pad = tokenizer.token_id(first_token(tokenizer, TEXT_PAD, "padding", self.tokenizer_from))
                return [tokenizer.token_id(name) for name in names], end, pad
        v, n = self.vocab_size, self.n_sentinels
        return list(range(v, v + n)), v + n, v + n + 1

    @property
    def eos_id(self) -> int:
        return self.ids[1]

    @property
    def start_id(self) -> int:
        return self.ids[2]

    def sentinel(self, i: int) -> int:
        if i >= self.n_sentinels:
            raise ValueError(f"a block needs sentinel {i} but only {self.n_sentinels} exist: use shorter blocks "
                             f"or more sentinels")
        return self.ids[0][i]

    def corrupt(self, tokens: list[int]) -> tuple[list[int], list[int]]:
        """One sequence -> (source, target), each ending in eos."""
        if len(tokens) < 2:
            raise ValueError(f"span corruption needs at least 2 tokens per block, got {len(tokens)}")
        source, target, pos = [], [], 0
        for i, (start, end) in enumerate(noise_spans(self.rng, len(tokens), self.noise_density, self.mean_span_length)):
            source += [*tokens[pos:start], self.sentinel(i)]
            target += [self.sentinel(i), *tokens[start:end]]
            pos = end
        return source + tokens[pos:] + [self.eos_id], target + [self.eos_id]

    def __call__(self, batch: PaddedTokens) -> SequencePairs:
        """tokens (B, L) ids, padding (B, L) True at real tokens -> source/target pairs (no references)."""
        tokens, lengths = batch.tokens, batch.padding.sum(1).tolist()
        pairs = [self.corrupt(row[:n]) for row, n in zip(tokens.tolist(), lengths)]
        return SequencePairs.of_lists(pairs, self.start_id, tokens.device)

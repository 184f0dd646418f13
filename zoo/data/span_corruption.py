"""T5's span corruption: the pre-training task that turns plain text into
(source, target) pairs for a sequence-to-sequence model.

About 15% of each block's tokens, in spans of mean length 3, are cut out; the source
keeps the rest with a sentinel in each gap, the target lists each sentinel followed by
the tokens it replaced (Raffel et al. 2020, section 3.1.4; the reference
``random_spans_noise_mask`` of the T5 code).

Ids: the data's vocabulary is 0 .. V-1; sentinels are V .. V+n-1, then end-of-sequence
V+n and the decoder's start token V+n+1 (so the model's vocabulary is V + n + 2).
"""

from __future__ import annotations

import random

import torch

from zoo.data.batches import IGNORE, PaddedTokens, SequencePairs



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
    """

    def __init__(self, vocab_size: int, noise_density: float = 0.15, mean_span_length: float = 3.0,
                 n_sentinels: int = 100, seed: int = 0):
        self.vocab_size, self.noise_density, self.mean_span_length = vocab_size, noise_density, mean_span_length
        self.n_sentinels = n_sentinels
        self.eos_id, self.start_id = vocab_size + n_sentinels, vocab_size + n_sentinels + 1
        self.rng = random.Random(seed)

    def sentinel(self, i: int) -> int:
        if i >= self.n_sentinels:
            raise ValueError(f"a block needs sentinel {i} but only {self.n_sentinels} exist: use shorter blocks "
                             f"or more sentinels")
        return self.vocab_size + i

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
        b, s, t = len(pairs), max(len(p[0]) for p in pairs), max(len(p[1]) for p in pairs)
        source = torch.zeros(b, s, dtype=torch.long)
        source_padding = torch.zeros(b, s, dtype=torch.bool)
        target_in = torch.zeros(b, t, dtype=torch.long)
        target_out = torch.full((b, t), IGNORE, dtype=torch.long)
        for i, (src, tgt) in enumerate(pairs):
            source[i, : len(src)] = torch.tensor(src)
            source_padding[i, : len(src)] = True
            target_in[i, : len(tgt)] = torch.tensor([self.start_id, *tgt[:-1]])
            target_out[i, : len(tgt)] = torch.tensor(tgt)
        device = tokens.device
        return SequencePairs(source.to(device), source_padding.to(device), target_in.to(device), target_out.to(device))

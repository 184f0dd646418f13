"""The batch types: what a data module yields and an objective reads, by field name.

Each is a ``NamedTuple`` of tensors (and, where a metric needs them, reference texts), so
that the DataLoader's default collate stacks items of it, Lightning moves it to the device
field by field (under DDP too), and ``inputs, targets = batch`` still unpacks it. Each
knows its own ``samples`` (rows) and ``items`` (what a throughput counts: real tokens,
images, clips) for the throughput monitor.

A data module declares the types it can yield (``ZooDataModule.yields``), an objective
the types it accepts (``Objective.accepts``); train.py refuses a pair with none in common
before anything is built (:func:`zoo.train.compat.batch_type`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

IGNORE = -100  # a target that carries no loss (padding, a prompt)


class TokenWindows(NamedTuple):
    """Windows of a token stream for next-token prediction (GPT, Llama).

    inputs (B, L) int64 ids; targets (B, L) the token after each input (-100: no loss)."""

    inputs: Tensor
    targets: Tensor

    @property
    def samples(self) -> int:
        return self.inputs.shape[0]

    @property
    def items(self) -> int:
        return self.inputs.numel()


class PaddedTokens(NamedTuple):
    """Token sequences padded to one length (masked LM, span corruption).

    tokens (B, L) int64 ids; padding (B, L) bool, True at real tokens."""

    tokens: Tensor
    padding: Tensor

    @property
    def samples(self) -> int:
        return self.tokens.shape[0]

    @property
    def items(self) -> int:
        return int(self.padding.sum())


def _pair_items(source_padding: Tensor, target_out: Tensor) -> int:
    """Real encoder positions + real target tokens of a sequence-to-sequence batch."""
    return int(source_padding.sum()) + int((target_out != IGNORE).sum())


class SequencePairs(NamedTuple):
    """Source and target token sequences (translation; span corruption's output).

    source (B, S) int64 ids; source_padding (B, S) bool, True at real tokens;
    target_in (B, T) the decoder's input (start token + target[:-1]);
    target_out (B, T) what each position predicts, -100 at padding;
    references: the raw target texts (BLEU at test time), or None."""

    source: Tensor
    source_padding: Tensor
    target_in: Tensor
    target_out: Tensor
    references: list[str] | None = None

    @classmethod
    def of_lists(cls, pairs: list[tuple[list[int], list[int]]], start_id: int,
                 device: torch.device | None = None) -> SequencePairs:
        """(source ids, target ids) per row -> a batch padded right (ids 0 under the padding):
        the decoder reads ``start_id`` + the target but its last id, and predicts the target."""
        b, s, t = len(pairs), max(len(p[0]) for p in pairs), max(len(p[1]) for p in pairs)
        source = torch.zeros(b, s, dtype=torch.long)
        source_padding = torch.zeros(b, s, dtype=torch.bool)
        target_in = torch.zeros(b, t, dtype=torch.long)
        target_out = torch.full((b, t), IGNORE, dtype=torch.long)
        for i, (src, tgt) in enumerate(pairs):
            source[i, : len(src)] = torch.tensor(src)
            source_padding[i, : len(src)] = True
            target_in[i, : len(tgt)] = torch.tensor([start_id, *tgt[:-1]])
            target_out[i, : len(tgt)] = torch.tensor(tgt)
        return cls(source.to(device), source_padding.to(device), target_in.to(device), target_out.to(device))

    @property
    def samples(self) -> int:
        return self.source.shape[0]

    @property
    def items(self) -> int:
        return _pair_items(self.source_padding, self.target_out)


class AudioText(NamedTuple):
    """Utterances and their transcripts (speech recognition).

    source (B, n_mels, F) log-mel frames; source_padding (B, S) bool, True at real encoder
    positions (S: the audio embedder's output length); target_in, target_out (B, T) as in
    :class:`SequencePairs`; references: the transcripts."""

    source: Tensor
    source_padding: Tensor
    target_in: Tensor
    target_out: Tensor
    references: list[str]

    @property
    def samples(self) -> int:
        return self.source.shape[0]

    @property
    def items(self) -> int:
        return _pair_items(self.source_padding, self.target_out)


class WaveText(NamedTuple):
    """Raw utterances and their transcripts, for CTC (wav2vec 2.0, HuBERT).

    waves (B, T) float 16 kHz samples, each utterance normalised to zero mean and unit variance,
    zero-padded; wave_padding (B, T) bool, True at real samples; labels (B, S) the transcript's
    ids (IGNORE at padding); references: the transcripts."""

    waves: Tensor
    wave_padding: Tensor
    labels: Tensor
    references: list[str]

    @property
    def samples(self) -> int:
        return self.waves.shape[0]

    @property
    def items(self) -> int:
        return int(self.wave_padding.sum())


class ImageLabels(NamedTuple):
    """Images with one class each: images (B, C, H, W) float, labels (B,) int64."""

    images: Tensor
    labels: Tensor

    @property
    def samples(self) -> int:
        return self.images.shape[0]

    @property
    def items(self) -> int:
        return self.images.shape[0]


class VideoClips(NamedTuple):
    """Video clips with one class each: clips (B, T, C, H, W) float, labels (B,) int64."""

    clips: Tensor
    labels: Tensor

    @property
    def samples(self) -> int:
        return self.clips.shape[0]

    @property
    def items(self) -> int:
        return self.clips.shape[0]


class ImageBoxes(NamedTuple):
    """Images with their objects (detection): images (B, C, H, W) float; targets, one dict per
    image: ``class_labels`` (M,) int64 and ``boxes`` (M, 4) float as (cx, cy, w, h) fractions of
    the image (M may be 0)."""

    images: Tensor
    targets: list[dict[str, Tensor]]

    @property
    def samples(self) -> int:
        return self.images.shape[0]

    @property
    def items(self) -> int:
        return self.images.shape[0]


class ImageText(NamedTuple):
    """An image, a prompt holding one ``<image>`` placeholder, and the answer after it (LLaVA).

    images (B, 3, S, S) float; tokens (B, L) ids of prompt + answer (right-padded);
    targets (B, L) the next token, -100 on the prompt and the padding; prefix_len (B,) the
    prompt's length; example_ids (B,) each row's index in its split (its references)."""

    images: Tensor
    tokens: Tensor
    targets: Tensor
    prefix_len: Tensor
    example_ids: Tensor

    @property
    def samples(self) -> int:
        return self.tokens.shape[0]

    @property
    def items(self) -> int:
        return self.tokens.numel()


class ImageCaptions(NamedTuple):
    """Images and their captions, one pair per row (contrastive image-text training: CLIP, SigLIP).

    images (B, 3, S, S) float; tokens (B, L) the caption's ids then the end-of-text id, right-padded;
    padding (B, L) bool, True at real tokens; labels (B,) the image's class (an index into the
    data's ``class_names``), -1 where the data has no classes."""

    images: Tensor
    tokens: Tensor
    padding: Tensor
    labels: Tensor

    @property
    def samples(self) -> int:
        return self.images.shape[0]

    @property
    def items(self) -> int:
        return self.images.shape[0]


class TextLabels(NamedTuple):
    """Texts (one sentence or a pair) with one label each, for a sequence classifier.

    tokens (B, L) int64 ids (``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]``); padding (B, L) bool,
    True at real tokens; segments (B, L) int64, 0 for the first text and 1 for the second (BERT's
    token types); labels (B,) int64 class indices, or float scores for a regression (STS-B)."""

    tokens: Tensor
    padding: Tensor
    segments: Tensor
    labels: Tensor

    @property
    def samples(self) -> int:
        return self.tokens.shape[0]

    @property
    def items(self) -> int:
        return int(self.padding.sum())


class TextPairs(NamedTuple):
    """Pairs of texts, each encoded on its own, for sentence embeddings (``task=embed``).

    first, second (B, L1), (B, L2) int64 ids (``[CLS] text [SEP]``); first_padding, second_padding
    bool, True at real tokens; scores (B,) float, the pair's similarity (STS-B's 0-5), or None where
    the pairs carry none (each second text is its first's positive)."""

    first: Tensor
    first_padding: Tensor
    second: Tensor
    second_padding: Tensor
    scores: Tensor | None = None

    @property
    def samples(self) -> int:
        return self.first.shape[0]

    @property
    def items(self) -> int:
        return int(self.first_padding.sum()) + int(self.second_padding.sum())


class QuestionSpans(NamedTuple):
    """Windows of (question, context) pairs for extractive question answering (``task=qa``): a long
    context is cut into several overlapping windows, each a row.

    tokens (B, L) int64 ids (``[CLS] question [SEP] context window [SEP]``); padding (B, L) bool, True
    at real tokens; segments (B, L) int64, 0 for the question and 1 for the context (BERT's token
    types); starts, ends (B,) the answer's first and last token in the row, 0 (the ``[CLS]``) where the
    window does not hold it; offsets (B, L, 2) each context token's (start, end) characters in its
    context, -1 at every other position (the answer can only be read there); example (B,) the
    row's example (its index in the split: the windows of one example share it); contexts and
    answers: each row's context text and its example's gold answers (the metric's references)."""

    tokens: Tensor
    padding: Tensor
    segments: Tensor
    starts: Tensor
    ends: Tensor
    offsets: Tensor
    example: Tensor
    contexts: list[str]
    answers: list[list[str]]

    @property
    def samples(self) -> int:
        return self.tokens.shape[0]

    @property
    def items(self) -> int:
        return int(self.padding.sum())


class TokenTags(NamedTuple):
    """Sentences with one tag per word, for a token classifier (``task=tag``: named entities).

    tokens (B, L) int64 ids (``[CLS] sub-tokens [SEP]``); padding (B, L) bool, True at real tokens;
    labels (B, L) int64, each word's tag index on its first sub-token, -100 elsewhere (the special
    tokens, a word's later sub-tokens, padding: no loss, no score)."""

    tokens: Tensor
    padding: Tensor
    labels: Tensor

    @property
    def samples(self) -> int:
        return self.tokens.shape[0]

    @property
    def items(self) -> int:
        return int(self.padding.sum())

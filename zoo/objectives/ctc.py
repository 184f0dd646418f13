"""Speech recognition with CTC (wav2vec 2.0, HuBERT): an encoder over raw audio, per-position
character logits, the CTC loss, greedy decoding, WER and CER."""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics.text import CharErrorRate, WordErrorRate

from zoo.data.batches import IGNORE, WaveText
from zoo.data.tokenizers import tokenizer_from_state
from zoo.models.ctc import ctc_loss, greedy
from zoo.objectives.base import Objective


class CTCRecognition(Objective):
    """The CTC loss of the net's logits on :class:`WaveText` batches; greedy transcripts scored by
    WER and CER at validation and test (``val/wer``, ``test/wer``, ...).

    Args (besides :class:`Objective`'s):
        blank_id: the CTC blank: the vocabulary's pad id (Hugging Face's ``pad_token_id``).
        reduction: ``mean`` (each utterance's loss over its target length, the batch's mean) or
            ``sum`` (Hugging Face's ``ctc_loss_reduction``; its config's default).
        zero_infinity: a target too long for its audio costs 0 instead of inf (``ctc_zero_infinity``).
    """

    accepts = (WaveText,)

    def __init__(self, *args, blank_id: int, reduction: str = "mean", zero_infinity: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if reduction not in ("mean", "sum"):
            raise ValueError(f"model.reduction={reduction!r}: expected mean or sum")
        self.hparams.update(blank_id=blank_id, reduction=reduction, zero_infinity=zero_infinity)
        self.blank_id, self.reduction, self.zero_infinity = blank_id, reduction, zero_infinity
        self.metrics = torch.nn.ModuleDict({f"{stage}_{kind}": metric() for stage in ("val", "test")
                                            for kind, metric in (("wer", WordErrorRate), ("cer", CharErrorRate))})
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None and self.hparams.tokenizer is not None:
            self._tokenizer = tokenizer_from_state(self.hparams.tokenizer)
        return self._tokenizer

    def logits(self, waves: Tensor, wave_padding: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """waves (B, T) -> (logits (B, L, V), padding (B, L) True at real positions)."""
        if wave_padding is None:
            wave_padding = torch.ones_like(waves, dtype=torch.bool)
        padding = self.net.embedder.output_padding(wave_padding)
        return self.forward_net(waves, key_padding=padding, padding=padding), padding

    def loss(self, batch: WaveText) -> Tensor:
        logits, padding = self.logits(batch.waves, batch.wave_padding)
        return ctc_loss(logits, padding, batch.labels, self.blank_id, self.reduction, self.zero_infinity, IGNORE)

    def transcribe(self, waves: Tensor, wave_padding: Tensor | None = None) -> list[str]:
        """waves (B, T) -> the greedy CTC transcripts."""
        logits, padding = self.logits(waves, wave_padding)
        return [self.tokenizer.decode(ids) for ids in greedy(logits, padding, self.blank_id)]

    def training_step(self, batch: WaveText, batch_idx: int) -> Tensor:
        self.flops_per_batch = self.net.training_flops(batch.samples, self.net.output_length(batch.waves))
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True, batch_size=batch.samples)
        return loss

    def _score(self, batch: WaveText, stage: str) -> list[str]:
        loss = self.loss(batch)
        self.log(f"{stage}/loss", loss, prog_bar=stage == "val", sync_dist=True, batch_size=batch.samples)
        hypotheses = self.transcribe(batch.waves, batch.wave_padding)
        for kind in ("wer", "cer"):
            metric = self.metrics[f"{stage}_{kind}"]
            metric.update(hypotheses, batch.references)
            self.log(f"{stage}/{kind}", metric, prog_bar=True, batch_size=batch.samples)
        return hypotheses

    def validation_step(self, batch: WaveText, batch_idx: int) -> None:
        self._score(batch, "val")

    def test_step(self, batch: WaveText, batch_idx: int) -> None:
        hypotheses = self._score(batch, "test")
        self.show_examples([{"reference": r, "greedy": h} for r, h in zip(batch.references, hypotheses)])

"""Speech recognition: the sequence-to-sequence objective, scored by word and character
error rates (torchmetrics) of the decoded transcripts."""

from __future__ import annotations

import torch
from torchmetrics.text import CharErrorRate, WordErrorRate

from zoo.data.audio import HOP_LENGTH, SAMPLE_RATE
from zoo.data.batches import AudioText
from zoo.objectives.seq2seq import Seq2Seq


class SpeechRecognition(Seq2Seq):
    """:class:`Seq2Seq` (teacher-forced cross-entropy) on :class:`AudioText` batches, plus WER and CER:
    of greedy transcripts at validation (``val/wer``, ``val/cer``), of greedy and, with
    ``decoding.beam_size > 1``, beam-search transcripts at test (``test/wer``, ``test/cer``,
    ``test/wer_beam``, ``test/cer_beam``). BLEU is off.

    ``audio_window``: the samples every utterance was zero-padded to (``data.pad_audio``; kept
    in the checkpoint, so that ``zoo transcribe`` and an export read audio the same way), or
    None (each utterance's own frames). It must be the encoder's window: Whisper's encoder (and
    Hugging Face's, which takes exactly that many frames) reads one window.
    """

    accepts = (AudioText,)

    def __init__(self, *args, audio_window: int | None = None, **kwargs):
        kwargs["bleu"] = False
        super().__init__(*args, **kwargs)
        self.hparams["audio_window"] = self.audio_window = audio_window
        encoder = self.net.towers["encoder"].embedder.max_frames * HOP_LENGTH
        if audio_window is not None and audio_window != encoder:
            raise ValueError(f"data.pad_audio pads to data.max_seconds={audio_window / SAMPLE_RATE:g} s, but the "
                             f"encoder holds {encoder / SAMPLE_RATE:g} s (model.net.encoder_embedder.max_len="
                             f"{encoder // HOP_LENGTH // 2}): set data.max_seconds={encoder / SAMPLE_RATE:g} or "
                             f"max_len={audio_window // HOP_LENGTH // 2}")
        if audio_window is not None and audio_window % SAMPLE_RATE:
            raise ValueError(f"data.pad_audio pads to data.max_seconds={audio_window / SAMPLE_RATE:g} s: give a whole "
                             f"number of seconds (an export's WhisperFeatureExtractor pads to whole seconds; "
                             f"model.net.encoder_embedder.max_len = 50 per second)")
        self.metrics = torch.nn.ModuleDict({
            f"{stage}_{kind}": metric()
            for stage in ("val", "test", "test_beam") for kind, metric in (("wer", WordErrorRate), ("cer", CharErrorRate))
        })

    def _score(self, batch: AudioText, stage: str, beam: bool) -> list[str]:
        """Log the WER and CER of the batch's transcripts; return the transcripts."""
        hypotheses = self.decode_batch(batch, beam)
        suffix = "_beam" if beam else ""
        for kind in ("wer", "cer"):
            metric = self.metrics[f"{stage}{suffix}_{kind}"]
            metric.update(hypotheses, batch.references)
            self.log(f"{stage}/{kind}{suffix}", metric, prog_bar=not beam, batch_size=len(hypotheses))
        return hypotheses

    def validation_step(self, batch: AudioText, batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        self._score(batch, "val", beam=False)

    def test_step(self, batch: AudioText, batch_idx: int) -> None:
        loss, _ = self.loss(batch)
        self.log("test/loss", loss, sync_dist=True, batch_size=batch.samples)
        outputs = {"greedy": self._score(batch, "test", beam=False)}
        if self.decoding["beam_size"] > 1:
            outputs["beam"] = self._score(batch, "test", beam=True)
        self.show_examples([{"reference": ref, **dict(zip(outputs, hyps))}
                            for ref, *hyps in zip(batch.references, *outputs.values())])

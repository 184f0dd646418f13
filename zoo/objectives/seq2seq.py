"""Sequence-to-sequence learning (translation, span corruption; speech recognition in
:mod:`zoo.objectives.asr`): an encoder reads the source, a decoder predicts the target.

Batches are :class:`~zoo.data.batches.SequencePairs` (source, source_padding, target_in,
target_out, references). With a ``span_corruption`` configured (T5's pre-training
objective), :class:`~zoo.data.batches.PaddedTokens` of a plain text corpus (WikiText,
tiny Shakespeare) are accepted too: each is made a source/target pair first.
"""

from __future__ import annotations

from typing import Any

import hydra
import torch
import torch.nn.functional as F
from torchmetrics.text import SacreBLEUScore

from zoo.data.batches import IGNORE, AudioText, PaddedTokens, SequencePairs
from zoo.data.tokenizers import tokenizer_from_state
from zoo.models.decoding import beam_search, greedy, strip_eos
from zoo.objectives.base import Objective, plain

Pairs = SequencePairs | AudioText  # what the loss and the decoding read (the same field names)


class Seq2Seq(Objective):
    """Teacher-forced cross-entropy with label smoothing; BLEU of greedy and beam-search
    decoding at test time.

    Args (besides :class:`Objective`'s):
        label_smoothing: the paper's 0.1 by default.
        eos_id: the end-of-sequence token (needed to decode; None = no decoding).
        bos_id, pad_id: the decoder's start token and the source padding token, for
            :meth:`translate` (raw text in, text out).
        prompt_len: how many leading ``target_in`` tokens prompt the decoder when decoding
            (1: the start token; Whisper's task tokens are more).
        decoding: ``max_new_tokens``, ``beam_size``, ``length_penalty`` for test-time decoding.
        bleu: decode the test set and log ``test/bleu_greedy`` and ``test/bleu_beam``
            (sacreBLEU, 13a tokenisation, detokenized output vs raw references).
        span_corruption: config of a ``zoo.data.span_corruption.SpanCorruption``, applied
            to :class:`PaddedTokens` batches (which only it makes acceptable).
    """

    accepts = (SequencePairs, PaddedTokens)

    @classmethod
    def accepted(cls, model_cfg: Any) -> tuple[type, ...]:
        """``accepts``, less :class:`PaddedTokens` unless ``span_corruption`` is configured."""
        return tuple(t for t in cls.accepts if t is not PaddedTokens or model_cfg.get("span_corruption"))

    def __init__(self, *args, label_smoothing: float = 0.1, eos_id: int | None = None, bos_id: int | None = None,
                 pad_id: int | None = None, prompt_len: int = 1,
                 decoding: dict | None = None, bleu: bool = True, span_corruption: Any = None, **kwargs):
        super().__init__(*args, **kwargs)
        # Kept in the checkpoint so that load_from_checkpoint decodes the same way.
        self.hparams.update({"label_smoothing": label_smoothing, "eos_id": eos_id, "bos_id": bos_id,
                             "pad_id": pad_id, "prompt_len": prompt_len,
                             "decoding": plain(decoding), "bleu": bleu, "span_corruption": plain(span_corruption)})
        self.label_smoothing, self.eos_id, self.prompt_len = label_smoothing, eos_id, prompt_len
        self.bos_id, self.pad_id = bos_id, pad_id
        self.decoding = {"max_new_tokens": None, "beam_size": 4, "length_penalty": 1.0, **(decoding or {})}
        self.bleu = bleu and eos_id is not None
        self.span_corruption = hydra.utils.instantiate(span_corruption) if span_corruption else None
        self.bleu_greedy, self.bleu_beam = SacreBLEUScore(), SacreBLEUScore()
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None and self.hparams.tokenizer is not None:
            self._tokenizer = tokenizer_from_state(self.hparams.tokenizer)
        return self._tokenizer

    def on_before_batch_transfer(self, batch: Pairs | PaddedTokens, dataloader_idx: int) -> Pairs:
        if isinstance(batch, PaddedTokens):  # accepted only with a span corruption (see ``accepted``)
            return self.span_corruption(batch)
        return batch

    def loss(self, batch: Pairs) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean label-smoothed cross-entropy over real target tokens, and that count."""
        logits = self.forward_net(batch.source, batch.target_in, batch.source_padding)
        target = batch.target_out
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE,
                               label_smoothing=self.label_smoothing)
        return loss, (target != IGNORE).sum()

    def training_step(self, batch: Pairs, batch_idx: int) -> torch.Tensor:
        self.flops_per_batch = self.net.batch_flops(batch.source, batch.target_in)
        loss, n_tokens = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        self.log("train/target_tokens", n_tokens.float(), reduce_fx="sum")
        return loss

    def validation_step(self, batch: Pairs, batch_idx: int) -> None:
        loss, _ = self.loss(batch)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True, batch_size=batch.samples)

    def decode(self, source: torch.Tensor, prompt: torch.Tensor, source_padding: torch.Tensor | None = None,
               beam: bool = False) -> list[list[int]]:
        """Generated ids (eos and prompt stripped) for each row of ``source`` (B, S, ...): ``prompt``
        (B, P) starts the decoder, ``source_padding`` (B, S) is True at real positions (None: all)."""
        d = self.decoding
        if beam:
            out = beam_search(self.net, source, prompt, self.eos_id, source_padding,
                              d["beam_size"], d["length_penalty"], d["max_new_tokens"])
        else:
            out = greedy(self.net, source, prompt, self.eos_id, source_padding, d["max_new_tokens"])
        return strip_eos(out, self.eos_id)

    def decode_batch(self, batch: Pairs, beam: bool) -> list[str]:
        """The decoded texts of a batch, prompted by the first ``prompt_len`` tokens of its targets."""
        ids = self.decode(batch.source, batch.target_in[:, : self.prompt_len], batch.source_padding, beam)
        return [self.tokenizer.decode(row) for row in ids]

    def test_step(self, batch: SequencePairs, batch_idx: int) -> None:
        loss, _ = self.loss(batch)
        self.log("test/loss", loss, sync_dist=True, batch_size=batch.samples)
        if not self.bleu or batch.references is None or self.tokenizer is None:
            return
        references = [[ref] for ref in batch.references]
        outputs = {}
        for name, metric in (("greedy", self.bleu_greedy), ("beam", self.bleu_beam)):
            outputs[name] = self.decode_batch(batch, name == "beam")
            metric.update(outputs[name], references)
        wanted = self.n_examples - len(self._examples)  # decode sources only while examples are wanted
        real = batch.source_padding[:wanted].cpu()
        sources = [self.tokenizer.decode(row[keep].tolist()) for row, keep in zip(batch.source[:wanted].cpu(), real)]
        self.show_examples([{"source": s, "reference": r, "greedy": g, "beam": b}
                            for s, r, g, b in zip(sources, batch.references, outputs["greedy"], outputs["beam"])])

    def on_test_epoch_end(self) -> None:
        if self.bleu and self.bleu_greedy.update_count:
            self.log("test/bleu_greedy", self.bleu_greedy.compute() * 100)
            self.log("test/bleu_beam", self.bleu_beam.compute() * 100)
            self.bleu_greedy.reset()
            self.bleu_beam.reset()
        super().on_test_epoch_end()

    @torch.no_grad()
    def translate(self, texts: list[str], beam: bool = True) -> list[str]:
        """Raw source sentences -> detokenized outputs (text-to-text models)."""
        if self.tokenizer is None or self.bos_id is None or self.pad_id is None:
            raise ValueError("translate needs a tokenizer, bos_id and pad_id in the checkpoint (a text-to-text model)")
        rows = [self.tokenizer.encode(t)[: self.net.context] for t in texts]
        source = torch.full((len(rows), max(len(r) for r in rows)), self.pad_id, dtype=torch.long, device=self.device)
        padding = torch.zeros_like(source, dtype=torch.bool)
        for i, r in enumerate(rows):
            source[i, : len(r)] = torch.tensor(r)
            padding[i, : len(r)] = True
        prompt = torch.full((len(rows), 1), self.bos_id, dtype=torch.long, device=self.device)
        return [self.tokenizer.decode(ids) for ids in self.decode(source, prompt, padding, beam)]

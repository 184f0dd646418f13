"""Vision-language next-token modelling (LLaVA): the answer after an image and a prompt.

Same loss as :class:`~zoo.objectives.lm.NextTokenLM` (targets of -100 on the image and
the prompt), plus what a vision-language model needs around it: expanding each
prompt's ``<image>`` placeholder into the vision tower's tokens, freezing parts for
the training stages, starting parts from zoo checkpoints, and the metrics: exact-match
accuracy (and the same with the images blanked, to show the answers come from the
image) or, for captions, corpus BLEU-4 of greedy captions against all references.
"""

from __future__ import annotations

from pathlib import Path

import sacrebleu
from torch import Tensor, nn

from zoo.checkpoint import net_state
from zoo.convert.common import load_mapped
from zoo.data.batches import IGNORE, ImageText
from zoo.data.images import blank_like
from zoo.data.tokenizers import tokenizer_from_state
from zoo.models.sampling import generate
from zoo.nn.multimodal import expand_batch
from zoo.objectives.lm import NextTokenLM

PARTS = ("vision", "projector", "lm")


def exact_match(logits: Tensor, targets: Tensor) -> Tensor:
    """(B,) bool: every answer token (target != -100) is the argmax. With teacher forcing
    this is exactly "greedy decoding produces the answer and then <eos>"."""
    wrong = (logits.argmax(-1) != targets) & (targets != IGNORE)
    return ~wrong.any(dim=1)


class VisionLanguageLM(NextTokenLM):
    """Next-token loss on the answers of :class:`ImageText` batches.

    Args (besides :class:`NextTokenLM`'s):
        trainable: ``all`` or a list of parts among vision, projector, lm (stage 1:
            [projector]; stage 2: [projector, lm]); the others are frozen, in eval mode.
        vision_init: a zoo ViT checkpoint for the vision tower (its embedder and stack).
        lm_init: a zoo language-model checkpoint (same tokenizer) for the language model.
        prompt: the data's prompt template (kept so a checkpoint can be asked questions).
        metric: ``exact_match`` (VQA; also reported with blank images on test) or ``bleu``
            (captions: greedy decoding, corpus BLEU-4 against every reference).
        max_answer_tokens: generation length for ``bleu`` and for ``zoo.cli.answer``.
    """

    accepts = (ImageText,)

    def __init__(self, *args, trainable="all", vision_init: str | None = None, lm_init: str | None = None,
                 prompt: str = "<image>", metric: str = "exact_match", max_answer_tokens: int = 24, **kwargs):
        super().__init__(*args, **kwargs)
        if metric not in ("exact_match", "bleu"):
            raise ValueError(f"unknown metric {metric!r}: expected 'exact_match' or 'bleu'")
        self.metric, self.prompt, self.max_answer_tokens = metric, prompt, max_answer_tokens
        # A plain list, not Hydra's ListConfig: checkpoints are read with weights_only=True,
        # which refuses OmegaConf objects (the test after fit and zoo.cli.answer could not load them).
        trainable = trainable if isinstance(trainable, str) else [str(part) for part in trainable]
        self.save_hyperparameters({"trainable": trainable, "prompt": prompt, "metric": metric,
                                   "max_answer_tokens": max_answer_tokens})
        e = self.net.embedder
        self.parts: dict[str, list[nn.Module]] = {
            "vision": [e.vision], "projector": [e.projector], "lm": [e.text, self.net.stack, self.net.head]}
        if vision_init:
            state = net_state(vision_init)
            load_mapped(e.vision.model, {k: v for k, v in state.items() if k.startswith(("embedder.", "stack."))})
        if lm_init:
            state = net_state(lm_init)
            for prefix, module in (("embedder.", e.text), ("stack.", self.net.stack), ("head.", self.net.head)):
                load_mapped(module, {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)})
        trainable = list(PARTS) if trainable == "all" else list(trainable)
        unknown = sorted(set(trainable) - set(PARTS))
        if unknown:
            raise ValueError(f"model.trainable has unknown parts {unknown}: expected 'all' or a list of {PARTS}")
        self.frozen = [m for part in PARTS if part not in trainable for m in self.parts[part]]
        for module in self.frozen:
            module.requires_grad_(False)
        self._tokenizer = tokenizer_from_state(self.hparams.tokenizer) if self.hparams.tokenizer else None
        self._bleu: dict[str, list] = {"hyps": [], "refs": []}

    def train(self, mode: bool = True):
        super().train(mode)
        for module in self.frozen:  # frozen parts keep eval behaviour (dropout off)
            module.eval()
        return self

    def prepare(self, batch: ImageText) -> tuple[Tensor, Tensor, Tensor]:
        """(tokens (B, L'), targets (B, L'), prefix_len (B,)) of a batch with each ``<image>``
        placeholder expanded into the vision tower's tokens (L' <= the context)."""
        e = self.net.embedder
        return expand_batch(batch.tokens, batch.targets, batch.prefix_len, e.image_token_id, e.n_image_tokens,
                            pad_id=self._tokenizer.pad_id if self._tokenizer else 0, context=self.net.context)

    def training_step(self, batch: ImageText, batch_idx: int) -> Tensor:
        tokens, targets, prefix_len = self.prepare(batch)
        self.flops_per_batch = self.net.batch_flops(tokens)  # the language model's (the vision tower's not counted)
        loss = self.next_token_loss(tokens, targets, images=batch.images, prefix_len=prefix_len)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True, batch_size=batch.samples)
        return loss

    def _evaluate(self, batch: ImageText, stage: str) -> None:
        n = batch.samples
        tokens, targets, prefix_len = self.prepare(batch)
        logits, loss = self.logits_and_loss(tokens, targets, images=batch.images, prefix_len=prefix_len)
        self.log(f"{stage}/loss", loss, prog_bar=True, sync_dist=True, batch_size=n)
        if self.metric == "exact_match":
            accuracy = exact_match(logits, targets).float().mean()
            self.log(f"{stage}/accuracy", accuracy, prog_bar=True, sync_dist=True, batch_size=n)
            if stage == "test":  # the same questions without the image: near the blind baseline if it is used
                blank, _ = self.logits_and_loss(tokens, targets, images=blank_like(batch.images), prefix_len=prefix_len)
                blank_accuracy = exact_match(blank, targets).float().mean()
                self.log("test/accuracy_blank_image", blank_accuracy, sync_dist=True, batch_size=n)
                self.show_examples(self._answers(batch, self.n_examples - len(self._examples)))
        elif stage == "test":
            self._collect_captions(batch)

    def validation_step(self, batch: ImageText, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: ImageText, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def answer_tokens(self, batch: ImageText) -> list[list[int]]:
        """Greedy answers (with the KV cache) to the prompts of a batch whose prompts have one length."""
        lengths = set(batch.prefix_len.tolist())
        if len(lengths) != 1:
            raise ValueError(f"batched generation needs prompts of one length, got {sorted(lengths)}")
        tokens, _, prefix_len = self.prepare(batch)
        prompt = tokens[:, : int(prefix_len[0])]
        out = generate(self.net, prompt, self.max_answer_tokens, temperature=0, eos_id=self._tokenizer.eos_id,
                       suppress=(self.net.embedder.image_token_id,), images=batch.images)
        return out[:, prompt.shape[1]:].tolist()

    def _answers(self, batch: ImageText, n: int) -> list[dict[str, str]]:
        """Prompt, reference and greedy answer of the first ``n`` rows of a batch."""
        rows = []
        for i in range(min(n, batch.samples)):
            one = ImageText(*(field[i : i + 1] for field in batch))
            reference = batch.targets[i][batch.targets[i] != IGNORE]
            rows.append({"prompt": self._tokenizer.decode(batch.tokens[i, : batch.prefix_len[i]].tolist()),
                         "reference": self._tokenizer.decode(reference.tolist()),
                         "greedy": self._tokenizer.decode(self.answer_tokens(one)[0])})
        return rows

    def _collect_captions(self, batch: ImageText) -> None:
        examples = self.trainer.datamodule.examples["test"]
        self._bleu["hyps"] += [self._tokenizer.decode(ids) for ids in self.answer_tokens(batch)]
        self._bleu["refs"] += [examples[i].answers for i in batch.example_ids.tolist()]

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        if self.metric != "bleu" or not self._bleu["hyps"]:
            return
        hyps, refs = self._bleu["hyps"], self._bleu["refs"]
        n_refs = max(map(len, refs))
        streams = [[r[k] if k < len(r) else r[0] for r in refs] for k in range(n_refs)]
        bleu = sacrebleu.corpus_bleu(hyps, streams, lowercase=True)
        self.log("test/bleu", bleu.score)
        if self.trainer.log_dir:
            Path(self.trainer.log_dir, "captions.txt").write_text("\n".join(hyps) + "\n")
        self._bleu = {"hyps": [], "refs": []}

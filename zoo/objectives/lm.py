"""Next-token language modelling (GPT, Llama): predict token t+1 from tokens <= t."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_only, rank_zero_warn

from zoo.data.batches import IGNORE, TokenWindows
from zoo.data.instructions import chat_prompt_ids
from zoo.data.tokenizers import present_ids, tokenizer_from_state
from zoo.data.wikitext import END_OF_TEXT
from zoo.models.sampling import generate
from zoo.nn.heads import LMHead
from zoo.nn.moe import RouterLogits
from zoo.objectives.base import Objective


def sample_prompt_ids(tokenizer, prompt: str | None) -> list[int]:
    """The ids a run's sample continues: ``prompt``'s; for None, a newline where it is a token (a
    character tokenizer: tiny Shakespeare), else the end-of-text token the data puts between
    documents (a WordPiece or BPE tokenizer, which has no newline: data=wikitext; a character
    tokenizer of a text without one: data=text), else none."""
    if prompt is not None:
        return tokenizer.encode(prompt)
    try:
        newline = tokenizer.encode("\n")
    except ValueError:  # a character tokenizer refuses a character its text never had
        newline = []
    return newline or list(present_ids(tokenizer, END_OF_TEXT).values())[:1]


class NextTokenLM(Objective):
    """Cross-entropy of the next token. Batches are :class:`TokenWindows` (inputs, targets (B, L) ids).

    Args (besides :class:`Objective`'s):
        sample_prompt / sample_tokens: at the end of training, a sample of this many
            tokens after this prompt is printed and saved to ``samples.txt`` (None: the
            tokenizer's start of a text, see :func:`sample_prompt_ids`).
        sample_chat: the sample answers ``sample_prompt`` as a user turn in the chat template
            the data trained with (``task=sft``), stopping at the end of the response; a
            tokenizer without one (data that are not prompt / response rows) is refused.
        aux_loss_coef: a net with mixture-of-experts layers (Mixtral, Qwen3-MoE) trains on the
            cross-entropy plus this times their load-balancing loss (Hugging Face's
            ``router_aux_loss_coef``), logged as ``train/aux_loss``; ``train/loss`` stays the
            cross-entropy, as ``val/loss``.
        loss_chunk: compute the loss ``loss_chunk`` positions at a time from the final hidden states
            and the LM head's matrix, forward and backward, without the (B, L, V) logits
            (:mod:`zoo.nn.chunked_loss`: the same loss and gradients up to fp32 rounding, a fraction
            of the memory where the vocabulary is large: Qwen, Gemma, Llama 3); None: the full logits.
    """

    accepts = (TokenWindows,)

    def __init__(self, *args, sample_prompt: str | None = None, sample_tokens: int = 300, sample_chat: bool = False,
                 aux_loss_coef: float = 0.001, loss_chunk: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.sample_prompt, self.sample_tokens, self.aux_loss_coef = sample_prompt, sample_tokens, aux_loss_coef
        self.sample_chat, self.loss_chunk = sample_chat, loss_chunk
        if sample_chat and self.hparams.tokenizer is not None and not self.hparams.tokenizer.get("chat_template"):
            raise ValueError("task=sft trains on prompt / response rows, and this data's tokenizer has no chat "
                             "template to format them: use data=instructions (your rows), gsm8k or gpteacher_codegen")
        if loss_chunk is not None:
            self._check_loss_chunk()
        self.routed = RouterLogits(self.net)

    def logits_and_loss(self, inputs: torch.Tensor, targets: torch.Tensor,
                        **net_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs, targets (B, L) ids -> (logits (B, L, V), mean loss); ``net_inputs``: the network's
        other inputs (e.g. images). Targets of -100 carry no loss (e.g. a prompt)."""
        logits = self.forward_net(inputs, **net_inputs)
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)

    def _check_loss_chunk(self) -> None:
        """Refuse ``loss_chunk`` where the chunked loss cannot stand in for the head (one line each)."""
        if isinstance(self.loss_chunk, bool) or not isinstance(self.loss_chunk, int) or self.loss_chunk < 1:
            raise ValueError(f"model.loss_chunk={self.loss_chunk!r}: give a positive number of positions "
                             f"(e.g. 1024), or null for the full logits")
        head = getattr(self.net, "head", None)
        if type(head) is not LMHead:
            raise ValueError(f"model.loss_chunk: the chunked loss reads an LMHead's matrix, and this net's head is "
                             f"{type(head).__name__}: set model.loss_chunk=null")
        if self.forward_net is not self.net:
            raise ValueError("model.loss_chunk with compile=true: the chunked loss runs the net uncompiled; "
                             "set one of them off (compile=false or model.loss_chunk=null)")

    def next_token_loss(self, inputs: torch.Tensor, targets: torch.Tensor, **net_inputs: torch.Tensor) -> torch.Tensor:
        """The mean loss of :meth:`logits_and_loss`; with ``loss_chunk``, from the net's final hidden
        states and its head's matrix by chunks of positions, the logits never whole."""
        if self.loss_chunk is None:
            return self.logits_and_loss(inputs, targets, **net_inputs)[1]
        return self.net.head.chunked_loss(self.net.hidden(inputs, **net_inputs), targets, self.loss_chunk)

    def loss(self, batch: TokenWindows) -> torch.Tensor:
        return self.next_token_loss(batch.inputs, batch.targets)

    def training_step(self, batch: TokenWindows, batch_idx: int) -> torch.Tensor:
        self.flops_per_batch = self.net.batch_flops(batch.inputs)
        with self.routed:
            loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)  # the global batch's loss
        if not self.routed:
            return loss
        aux = self.routed.loss()
        self.log("train/aux_loss", aux, sync_dist=True)
        return loss + self.aux_loss_coef * aux

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # nats, predicted tokens

    def validation_step(self, batch: TokenWindows, batch_idx: int) -> None:
        loss = self.loss(batch)
        self.log("val/loss", loss, prog_bar=True, sync_dist=True)
        self.log("val/ppl", loss.exp(), sync_dist=True)
        self._val_sums += summed(loss, batch)

    def on_validation_epoch_end(self) -> None:
        """``val/bpb`` (bits per byte), as the test stage's ``test/bpb``, where the validation data
        counts its bytes and every target of the split was evaluated (not in the sanity check)."""
        super().on_validation_epoch_end()
        if not self.trainer.sanity_checking:
            nats, tokens = self.trainer.strategy.reduce(self._val_sums, reduce_op="sum").tolist()
            self.log_bits_per_byte("val", nats, tokens, getattr(self.trainer.val_dataloaders, "dataset", None))

    def on_test_epoch_start(self) -> None:
        self._test_sums = torch.zeros(2, dtype=torch.float64, device=self.device)  # nats, predicted tokens

    def test_step(self, batch: TokenWindows, batch_idx: int) -> None:
        """Sums the loss over every predicted token (targets -100 carry none), for
        :meth:`on_test_epoch_end`: the split's loss is per token, whatever the batches' padding."""
        self._test_sums += summed(self.loss(batch), batch)

    def on_test_epoch_end(self) -> None:
        """``test/loss``: the split's mean loss per predicted token (nats); ``test/ppl``: its exp;
        ``test/bpb`` (bits per byte), where the test data says how many bytes of text its targets
        hold (:class:`zoo.data.text.DocumentWindows`) and every one of its targets was evaluated:
        the summed nats / ln 2 / those bytes, a number that compares across tokenizers."""
        super().on_test_epoch_end()
        nats, tokens = self.trainer.strategy.reduce(self._test_sums, reduce_op="sum").tolist()
        if not tokens:  # a subclass's own test_step (vlm) logs its own
            return
        self.log("test/loss", nats / tokens)
        self.log("test/ppl", math.exp(nats / tokens))
        self.log_bits_per_byte("test", nats, tokens, getattr(self.trainer.test_dataloaders, "dataset", None))

    def log_bits_per_byte(self, stage: str, nats: float, tokens: float, data: object) -> None:
        """``STAGE/bpb``: the split's summed ``nats`` / ln 2 / its UTF-8 bytes, where ``data`` counts
        them (``text_bytes``, :class:`zoo.data.text.DocumentWindows`) and the ``tokens`` evaluated
        (over every process) are every one of its targets."""
        text_bytes = getattr(data, "text_bytes", None)
        if not text_bytes or not tokens:
            return
        if tokens != data.predicted_tokens:
            rank_zero_warn(f"no {stage}/bpb: the {stage} stage evaluated {tokens:.0f} of the split's "
                           f"{data.predicted_tokens} tokens (trainer.limit_{stage}_batches, quick=true, or a sampler "
                           f"that repeats items over processes)")
            return
        self.log(f"{stage}/bpb", nats / math.log(2) / text_bytes)

    @rank_zero_only
    def on_train_end(self) -> None:
        if not self.sample_tokens or self.hparams.tokenizer is None:
            return
        tokenizer = tokenizer_from_state(self.hparams.tokenizer)
        chat = self.sample_chat and self.sample_prompt is not None
        prompt_ids = chat_prompt_ids if chat else sample_prompt_ids
        ids = prompt_ids(tokenizer, self.sample_prompt)
        if not ids:  # e.g. a prompt of spaces under a WordPiece tokenizer (data=wikitext)
            rank_zero_warn(f"model.sample_prompt={self.sample_prompt!r} is no token for this tokenizer: no sample "
                           f"is written (give a prompt of words)")
            return
        prompt = torch.tensor([ids], device=self.device)
        out = generate(self.net, prompt, self.sample_tokens, temperature=0.8, top_k=200,
                       generator=torch.Generator(device=self.device).manual_seed(0),
                       eos_id=tokenizer.eos_id if chat else None)
        text = tokenizer.decode(out[0].tolist())
        print(f"\n--- sample ---\n{text}\n--------------")
        # default_root_dir is the run directory; (trainer.log_dir would be a collective call)
        Path(self.trainer.default_root_dir, "samples.txt").write_text(text)


def summed(loss: torch.Tensor, batch: TokenWindows) -> torch.Tensor:
    """(the batch's summed nats, its predicted tokens): ``loss`` is their mean over the targets
    that are not -100."""
    tokens = (batch.targets != IGNORE).sum()
    return torch.stack([loss.detach().double() * tokens, tokens.double()])

"""Length extrapolation: at the end of training, the val loss at contexts longer than the model's.

``eval_contexts=[512,1024]`` (conf/train.yaml) evaluates the trained next-token model, once it has
finished training, on the validation's windows (the same val text, the same offsets drawn) made
that many tokens long, through :func:`~zoo.models.longer.longer_context` (the sinusoidal and rotary
tables computed further; ALiBi and no positions as they are). Each is logged as ``val/loss@N`` and
written, with the reason of any that cannot run (a learned position table ends at its length:
``n/a``), to ``contexts.json`` in the run directory, which a study's report reads.

A context is refused before training starts where the validation text is too short for it, or
where its evaluation would need more memory than the device has free (:func:`eval_bytes`, an
estimate). The evaluation prints its progress (a line every few seconds), and stops at SIGTERM within the
module being run, as training does (the run then exits 143).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn
from torch.utils.data import DataLoader, Dataset

from zoo.data.batches import IGNORE
from zoo.models.longer import longer_context
from zoo.models.model import Model
from zoo.nn.attention import MultiHeadAttention
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.positions import LearnedPositions, TableEnd
from zoo.objectives.lm import NextTokenLM


@torch.no_grad()
def val_loss(net: nn.Module, windows: Dataset, batch_size: int, device: torch.device,
             forward_context: Callable[[], AbstractContextManager] = torch.enable_grad,
             done: Callable[[int, int], None] = lambda batch, batches: None) -> float:
    """The mean next-token cross-entropy of ``net`` over every target of ``windows`` (TokenWindows
    items: inputs, targets (L,)), as the LM objective's loss computes it, in eval mode;
    ``forward_context``: the trainer's precision (its autocast) around each forward; ``done``
    (batch, batches) is called after each batch (the progress line)."""
    net.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    loader = DataLoader(windows, batch_size=batch_size)  # (the default collate stacks TokenWindows)
    for i, batch in enumerate(loader, 1):
        inputs, targets = batch.inputs.to(device), batch.targets.to(device)
        with forward_context():
            logits = net(inputs)
        total += F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        count += int((targets != IGNORE).sum())
        done(i, len(loader))
    return float(total / count)


# Measured (peak resident memory of a CPU evaluation, model=llama's CPU shape, 2,000 to 16,000 tokens):
# a window takes about 3 times the float32 outputs of a Block's projections and its residual copies a
# token (what the allocator keeps beside what is alive), and 1.5 bytes a (context x context) cell
# even under the fused causal kernel. The estimate rounds both up. A dense mask (model=mistral's
# window) takes SDPA's unfused path on a CPU: float32 scores, a (context x context) matrix a head.
HELD = 4
CELL_BYTES = 2
PROGRESS_EVERY = 2.0  # seconds between two progress lines of an evaluation


def eval_bytes(net: Model, context: int, batch_size: int, device: torch.device = torch.device("cpu")) -> int:
    """An estimate of the memory the evaluation of ``net`` at ``context`` tokens takes on ``device``,
    in float32 without gradients: the weights twice (the model and its copy at the longer context);
    for each of the ``batch_size`` windows' tokens :data:`HELD` x (the outputs of one Block's
    projections and 6 x the width of residual copies), and the logits with their log-softmax and
    the loss (3 x the vocabulary); and per (context x context) cell of a window, where a layer's
    mask is dense, the scores of every head (4 bytes each), else on a CPU :data:`CELL_BYTES` (on a
    GPU the fused causal kernel keeps none)."""
    weights = sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))
    width, vocab = net.embedder.tokens.embedding_dim, net.embedder.tokens.num_embeddings
    head = {id(m) for m in net.head.modules()}
    projections = sum(m.out_features for m in net.modules() if isinstance(m, nn.Linear) and id(m) not in head)
    per_token = 4 * (HELD * (projections // net.n_layers + 6 * width) + 3 * vocab)
    heads = max((m.n_heads for m in net.modules() if isinstance(m, MultiHeadAttention)), default=1)
    dense = not all(m.fused_causal(context, context, None) for m in net.layer_masks)
    per_cell = 4 * heads if dense else CELL_BYTES if device.type == "cpu" else 0
    return 2 * weights + batch_size * context * (per_token + per_cell * context)


def free_memory(device: torch.device) -> tuple[int, str]:
    """(bytes free on ``device``, what that number is): a GPU's free memory, else the memory the
    system has available (Linux's MemAvailable: free memory and the caches it can drop)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0], f"free on {device}"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024, "available memory"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), "free memory"


def progress(what: str, every: float = PROGRESS_EVERY) -> Callable[[int, int], None]:
    """A ``done(batch, batches)`` for :func:`val_loss` that prints "WHAT, batch i/n (s)" once
    ``every`` seconds have passed since the last line (or the start), and after the last batch."""
    started = last = time.monotonic()

    def done(batch: int, batches: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every or batch == batches:
            print(f"{what}, batch {batch}/{batches} ({now - started:.0f} s)", flush=True)
            last = now

    return done


@contextmanager
def stop_on_sigterm(trainer: L.Trainer) -> Iterator[None]:
    """While inside: SIGTERM (Lightning's handler notes it) stops the evaluation at the next module
    to run, with Lightning's ``SIGTERMException``, as the training loop stops between batches: one
    window at a long context can take minutes."""

    def check(module: nn.Module, inputs: object) -> None:
        if trainer.received_sigterm:
            raise SIGTERMException

    hook = nn.modules.module.register_module_forward_pre_hook(check)
    try:
        yield
    finally:
        hook.remove()


class LongerContexts(L.Callback):
    """At the end of fitting: ``val/loss@N`` for each of ``contexts`` (see the module's docstring)."""

    def __init__(self, contexts: Iterable[int]):
        contexts = list(contexts)
        if not contexts or not all(isinstance(c, int) and c > 0 for c in contexts):
            raise ValueError(f"eval_contexts={contexts}: a list of positive numbers of tokens, e.g. [512,1024]")
        self.contexts = sorted(set(contexts))

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, NextTokenLM):
            raise ValueError(f"eval_contexts={self.contexts}: the val loss at a longer context is a next-token "
                             f"language model's (model=gpt, llama, ...), not {type(pl_module).__name__}'s")
        if not hasattr(trainer.datamodule, "val_windows"):
            raise ValueError(f"eval_contexts={self.contexts}: {type(trainer.datamodule).__name__} cuts no validation "
                             f"windows of another length (data=tinyshakespeare does: val_windows)")
        self.check_contexts(trainer, pl_module.net)

    def check_contexts(self, trainer: L.Trainer, net: nn.Module) -> None:
        """Before training, what the end could not do: a context longer than the validation text, or
        whose evaluation would not fit in the device's free memory (:func:`eval_bytes`)."""
        if not isinstance(net, Model) or not isinstance(net.embedder, TokenEmbedder):
            return  # (longer_context says why at the end: n/a)
        batch_size, device = trainer.datamodule.batch_size, trainer.strategy.root_device
        for context in self.contexts:
            if context > net.context and isinstance(net.embedder.positions, LearnedPositions):
                continue  # n/a at the end: a learned table ends at its length
            needed, (free, what) = eval_bytes(net, context, batch_size, device), free_memory(device)
            if needed > free:
                raise ValueError(f"eval_contexts={self.contexts}: the evaluation at {context} tokens would take about "
                                 f"{needed / 1e9:,.1f} GB, more than the {free / 1e9:,.1f} GB {what}: evaluate at "
                                 f"shorter contexts, or with a smaller data.batch_size (now {batch_size})")
            try:
                trainer.datamodule.val_windows(context)
            except ValueError as err:
                raise ValueError(f"eval_contexts={self.contexts}: the validation text is too short for {context} "
                                 f"tokens ({err})") from None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:  # (one process evaluates every window: no collective call)
            return
        results: dict[str, dict[str, float | str]] = {}
        for context in self.contexts:
            try:
                net = longer_context(pl_module.net, context)
            except TableEnd as end:
                results[str(context)] = {"n/a": str(end)}
                continue
            with stop_on_sigterm(trainer):
                loss = val_loss(net, trainer.datamodule.val_windows(context), trainer.datamodule.batch_size,
                                pl_module.device, trainer.strategy.precision_plugin.forward_context,
                                progress(f"eval_contexts: {context} tokens"))
            results[str(context)] = {"val/loss": loss}
            for logger in trainer.loggers:
                logger.log_metrics({f"val/loss@{context}": loss}, step=trainer.global_step)
        for logger in trainer.loggers:
            logger.save()
        said = ", ".join(f"{c}: {r['val/loss']:.4f}" if "val/loss" in r else f"{c}: n/a ({r['n/a']})"
                         for c, r in results.items())
        print(f"val/loss at longer contexts (trained at {pl_module.net.context}): {said}", flush=True)
        Path(trainer.default_root_dir, "contexts.json").write_text(
            json.dumps({"context": pl_module.net.context, "eval": results}, indent=1) + "\n")

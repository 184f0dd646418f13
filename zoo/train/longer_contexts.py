"""Length extrapolation: at the end of training, the val loss at contexts longer than the model's.

``eval_contexts=[512,1024]`` (conf/train.yaml) evaluates the trained next-token model, once it has
finished training, on the validation's windows (the same val text, the same offsets drawn) made
that many tokens long, through :func:`~zoo.models.longer.longer_context` (the sinusoidal and rotary
tables computed further; ALiBi and no positions as they are). Each is logged as ``val/loss@N`` and
written, with the reason of any that cannot run (a learned position table ends at its length:
``n/a``), to ``contexts.json`` in the run directory, which a study's report reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from zoo.data.batches import IGNORE
from zoo.models.longer import longer_context
from zoo.nn.positions import TableEnd
from zoo.objectives.lm import NextTokenLM


@torch.no_grad()
def val_loss(net: nn.Module, windows: Dataset, batch_size: int, device: torch.device,
             forward_context: Callable[[], AbstractContextManager] = torch.enable_grad) -> float:
    """The mean next-token cross-entropy of ``net`` over every target of ``windows`` (TokenWindows
    items: inputs, targets (L,)), as the LM objective's loss computes it, in eval mode;
    ``forward_context``: the trainer's precision (its autocast) around each forward."""
    net.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for batch in DataLoader(windows, batch_size=batch_size):  # (the default collate stacks TokenWindows)
        inputs, targets = batch.inputs.to(device), batch.targets.to(device)
        with forward_context():
            logits = net(inputs)
        total += F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        count += int((targets != IGNORE).sum())
    return float(total / count)


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
            windows = trainer.datamodule.val_windows(context)
            loss = val_loss(net, windows, trainer.datamodule.batch_size, pl_module.device,
                            trainer.strategy.precision_plugin.forward_context)
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

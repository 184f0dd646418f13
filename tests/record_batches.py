"""A callback a DDP test adds (``+callbacks.record._target_=tests.record_batches.RecordBatches``): each
process writes the inputs of every training batch it reads to ``folder/rank{r}-step{s}.pt``, so the
test sees which windows each rank read."""

from pathlib import Path

import lightning as L
import torch


class RecordBatches(L.Callback):
    def __init__(self, folder: str):
        self.folder = Path(folder)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(batch[0].cpu(), self.folder / f"rank{trainer.global_rank}-step{trainer.global_step}.pt")

"""A callback the resume tests add (``+callbacks.sample_log._target_=tests.sample_log.SampleLog``):
each rank appends, per training step, the token windows of its batch to ``path.rank<R>``."""

from pathlib import Path

import lightning as L


class SampleLog(L.Callback):
    def __init__(self, path: str):
        self.path = path

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        inputs, _ = batch  # (B, T) token windows (RandomWindows)
        with Path(f"{self.path}.rank{trainer.global_rank}").open("a") as f:
            for window in inputs.tolist():
                f.write(f"{trainer.global_step} {' '.join(map(str, window))}\n")

"""A callback the SIGTERM resume test adds (``+callbacks.sigterm._target_=tests.sigterm_at.SigtermAt``):
the process sends itself SIGTERM, as SLURM or Kubernetes would, once it has trained ``step`` steps.
A fixed step, whatever the machine's speed (a test that signals from outside raced a 5 ms step)."""

import os
import signal

import lightning as L


class SigtermAt(L.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)

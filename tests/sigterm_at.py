"""A callback the SIGTERM resume test adds (``+callbacks.sigterm._target_=tests.sigterm_at.SigtermAt``):
the process sends itself SIGTERM, as SLURM or Kubernetes would, once it has trained ``step`` steps.
A fixed step, whatever the machine's speed (a test that signals from outside raced a 5 ms step)."""

import os
import signal
import time
from pathlib import Path

import lightning as L


class SigtermAt(L.Callback):
    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class PauseAt(L.Callback):
    """Holds the run whose folder ends with ``run`` at ``step`` until a SIGTERM reaches it (at most
    ``seconds``), once: it first writes its PID to ``marker``, and a run that finds the marker goes
    on. A study's test signals ``zoo compare`` while one of its runs is surely mid-way."""

    def __init__(self, step: int, run: str, marker: str, seconds: float = 120):
        self.step, self.run, self.marker, self.seconds = step, run, Path(marker), seconds

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step != self.step or not trainer.default_root_dir.endswith(self.run) or self.marker.exists():
            return
        self.marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + self.seconds
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.05)

"""What a run prints: the zoo's lines, progress bars on a terminal, the result, and real warnings.

The warnings and lines of Lightning, torch and torchdata known to be harmless in this project are
filtered here, each by its message and category (nothing else is hidden); every other warning is
also logged, so that it reaches the run's ``train.log`` beside the zoo's own lines. Off a terminal
(a log file, a pipe) the training bar is one log line per tenth of the run, not ``\\r``-joined bars.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.callbacks import RichModelSummary as LightningRichModelSummary
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from zoo import terminal

log = logging.getLogger(__name__)

# (message regex, category): warnings that say nothing a user of the zoo can act on.
HARMLESS_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    # torchdata's StatefulDataLoader calls torch.set_vital on every iterator.
    (r"'set_vital' is deprecated", UserWarning),
    # Lightning's own pytree helper builds torch's deprecated LeafSpec.
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    # The seq2seq objective's span corruption is its own hook; no zoo data module has one.
    (r"You have overridden `on_before_batch_transfer` in `LightningModule` but have passed in a "
     r"`LightningDataModule`", UserWarning),
)
# Lightning's info lines that advertise, or repeat a setting of the zoo's.
HARMLESS_LINES: tuple[str, ...] = (r"💡 Tip: For seamless cloud logging",
                                   r"Trainer already configured with model summary callbacks")


class _DropLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(re.match(pattern, str(record.msg)) for pattern in HARMLESS_LINES)


def install(output_dir: str | Path) -> None:
    """Filter the harmless warnings and lines, log every other warning, and send Lightning's lines
    through the run's log handlers (the console and ``train.log``, configured by Hydra) rather than
    Lightning's own stderr handler. ``output_dir``: the run directory, which the CSV logger writes
    into (it holds ``.hydra/`` and ``train.log`` already; zoo.train.run_dir decides whether a run
    may reuse it, so Lightning's "exists and is not empty" warning about it is never news)."""
    for message, category in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    run = re.escape(str(Path(output_dir)).rstrip("/"))
    warnings.filterwarnings("ignore", message=rf"Experiment logs directory {run}/? exists and is not empty",
                            category=UserWarning)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropLines) for f in logger.filters):  # once, however many runs a process makes
            logger.addFilter(_DropLines())
    if HydraConfig.initialized():  # a command line's run: Hydra's handlers write the console and train.log
        logging.captureWarnings(True)
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            logger = logging.getLogger(name)
            for handler in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
                logger.removeHandler(handler)
            logger.propagate = True


class ProgressBar(TQDMProgressBar):
    """Lightning's tqdm bars on a terminal; elsewhere one log line per ``1/lines`` of the run."""

    def __init__(self, refresh_rate: int = 10, lines: int = 10, **kwargs: Any):
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self.lines, self._logged = lines, -1
        if not terminal.on_terminal():
            self.disable()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        step, total = trainer.global_step, trainer.max_steps
        if self.is_enabled or step == self._logged or (step % max(1, total // self.lines) and step != total):
            return
        self._logged = step
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        log.info("step %d/%d %s", step, total, " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                       for k, v in metrics.items()))


class ModelSummary(LightningModelSummary):
    """Lightning's model summary without its FLOPs column and total, which count only a forward on an
    ``example_input_array`` (none here: they read 0); the analytic FLOPs are in the MFU the
    Throughput callback logs."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        columns = dict(summary_data)
        for name, kind, params in zip(columns["Name"], columns["Type"], columns["Params"]):
            if params.strip() != "0":  # metrics (BLEU, WER) are modules too
                log.info("%s: %s, %s parameters", name, kind, params.strip())
        log.info("%s parameters (%s trainable), %.1f MB", get_human_readable_count(total_parameters),
                 get_human_readable_count(trainable_parameters), model_size)


class RichModelSummary(LightningRichModelSummary):
    """Rich's model table (``callbacks=rich``) without the FLOPs column and total, for the same reason
    as :class:`ModelSummary`."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, justify="right" if name.startswith("Params") else "left", no_wrap=name == "Name")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        console.print(f"[bold]Params[/]: {get_human_readable_count(trainable_parameters)} trainable, "
                      f"{get_human_readable_count(total_parameters - trainable_parameters)} non-trainable, "
                      f"{model_size:.1f} MB")

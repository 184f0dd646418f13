"""What train.py does, as a function tests can call."""

from __future__ import annotations

import re
from pathlib import Path

import hydra
import lightning as L
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from zoo.train import compat, run_dir
from zoo.train.callbacks import StopOnNonFinite
from zoo.train.checkpoint import check_resumable
from zoo.viz.plots import plot_curves


def _choice(group: str, default: str) -> str:
    """The name the user picked for a config group (for error messages)."""
    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices.get(group, default)
    return default


def build(cfg: DictConfig):
    """Instantiate (datamodule, model) from a composed config, filling ``cfg.dims`` from the data."""
    # The batch types first: a pair that cannot work is refused before any data is read.
    batch_type = compat.batch_type(cfg.model, cfg.data, _choice("model", "?"), _choice("data", "?"))
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.serve(batch_type)
    datamodule.prepare_data()
    datamodule.setup("fit")
    # The model config reads facts about the data as ${dims.NAME}: all of them must be there.
    needed = set(re.findall(r"\$\{dims\.(\w+)", OmegaConf.to_yaml(cfg.model)))
    if needed - datamodule.dims.keys():
        raise ValueError(
            f"model={_choice('model', '?')} needs {sorted(needed - datamodule.dims.keys())} from the data, but "
            f"data={_choice('data', '?')} provides only {sorted(datamodule.dims)}: pick a matching pair"
        )
    with open_dict(cfg):
        cfg.dims = datamodule.dims
    tokenizer = datamodule.tokenizer.state() if datamodule.tokenizer is not None else None
    model = hydra.utils.instantiate(cfg.model, tokenizer=tokenizer)
    return datamodule, model


def train(cfg: DictConfig) -> dict[str, float]:
    run_dir.claim(Path(cfg.paths.output_dir), cfg.ckpt_path, cfg.overwrite)
    L.seed_everything(cfg.seed, workers=True)
    datamodule, model = build(cfg)
    callbacks = [hydra.utils.instantiate(c) for c in cfg.get("callbacks", {}).values()]
    if cfg.detect_nan:
        callbacks.append(StopOnNonFinite())
    loggers = [hydra.utils.instantiate(c) for c in cfg.get("logger", {}).values()]
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    for logger in trainer.loggers:  # the whole resolved config, not only the objective's arguments
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    if trainer.is_global_zero:
        out = Path(cfg.paths.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    check_resumable(cfg.ckpt_path, model)
    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if cfg.get("test"):
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        results = trainer.test(model, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
        metrics.update({k: float(v) for r in results for k, v in r.items()})
    log = Path(cfg.paths.output_dir) / "metrics.csv"
    if trainer.is_global_zero and log.exists():
        plot_curves(log, Path(cfg.paths.output_dir) / "curves.png")
    return metrics


def optimized_metric(cfg: DictConfig, metrics: dict[str, float]) -> float | None:
    """The value of ``cfg.optimized_metric`` (set by an ``hparams_search`` config) among the
    run's final metrics, for the sweeper; None when no metric is to be optimised."""
    name = cfg.get("optimized_metric")
    if not name:
        return None
    if name not in metrics:
        raise KeyError(f"optimized_metric={name} was not logged by this run; it logged {sorted(metrics)}")
    return metrics[name]

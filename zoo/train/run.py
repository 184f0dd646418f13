"""What train.py does, as a function tests can call."""

from __future__ import annotations

import copy
import csv
import inspect
import re
import warnings
from pathlib import Path
from typing import Iterable

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf, open_dict

from zoo.train import compat, run_dir
from zoo.train.budget import Budget
from zoo.train.callbacks import SaveOnSigterm, StopOnNonFinite
from zoo.train.longer_contexts import LongerContexts
from zoo.objectives.loading import check_resumable
from zoo.train.checkpoint_io import NamedCheckpointIO
from zoo.plots import plot_curves


def _choice(group: str, default: str) -> str:
    """The name the user picked for a config group (for error messages)."""
    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices.get(group, default)
    return default


def check_reads(cfg: DictConfig, reader: str, key: str, given: Iterable[str], giver: str) -> None:
    """Refuse a pair where the ``reader`` group's config reads ``${key.NAME}`` for a NAME that the
    ``giver`` group does not give: the model reads the data's facts as ``${dims.*}``, the data
    reads the model's as ``${inputs.*}``; the error names both sides and the missing keys."""
    missing = sorted(set(re.findall(rf"\$\{{{key}\.(\w+)", OmegaConf.to_yaml(cfg[reader]))) - set(given))
    if missing:
        raise ValueError(
            f"{reader}={_choice(reader, '?')} needs {missing} from the {giver}, but "
            f"{giver}={_choice(giver, '?')} provides only {sorted(given)}: pick a matching pair"
        )


def check_vocabulary(model: DictConfig, data_vocab: int | None, at: str = "model") -> None:
    """Refuse a model whose vocabulary (a ``vocab_size`` key anywhere in its config, e.g. an override
    of ``model.net.embedder.vocab_size``) is smaller than the data's (its tokenizer's, or a token
    shard folder's meta.json): an id past the table would stop training with an IndexError. Larger
    is allowed (a table padded to a round size)."""
    if data_vocab is None:
        return
    for key, value in model.items():
        where = f"{at}.{key}"
        if isinstance(value, DictConfig):
            check_vocabulary(value, data_vocab, where)
        elif key == "vocab_size" and isinstance(value, int) and value < data_vocab:
            raise ValueError(f"{where}={value} is smaller than the data's vocabulary of {data_vocab} ids "
                             f"(data={_choice('data', '?')}: its tokenizer or token shards): drop the override, "
                             f"or prepare the data with a tokenizer of at most {value} ids")


def objective(cfg: DictConfig, tokenizer: dict | None = None) -> L.LightningModule:
    """The objective of ``cfg.model``, built as train.py does (``cfg.dims`` filled). ``model.inputs``
    is what the model tells the data (read through ``cfg.inputs``), not an argument of it."""
    arguments = copy.deepcopy(cfg)  # the whole config: the model's keys read ${optim}, ${dims.*}, ${seed}
    with open_dict(arguments):
        arguments.model.pop("inputs", None)
        for key in family_settings_not_taken(arguments.model):
            arguments.model.pop(key)
    return hydra.utils.instantiate(arguments.model, tokenizer=tokenizer)


def accepted(target: type) -> set[str]:
    """The keyword arguments ``target``'s constructor takes, those it hands its bases (``**kwargs``) included."""
    names: set[str] = set()
    for cls in target.__mro__:
        if "__init__" not in vars(cls):
            continue
        parameters = inspect.signature(cls.__init__).parameters.values()
        names |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def family_settings_not_taken(model: DictConfig) -> list[str]:
    """The keys of a decoder family's own objective (the next-token LM: its end-of-training sample,
    its chunked loss) that a task's objective does not take (task=classify of model=gpt, EmbeddingGemma's
    task=embed over Gemma 3): left out where they hold the LM's defaults, the family's and not the
    user's; a value of the user's is refused in one line, naming the key and the objective."""
    from hydra.utils import get_class

    from zoo.objectives.lm import NextTokenLM

    target = get_class(model._target_)
    if issubclass(target, NextTokenLM):
        return []
    taken = accepted(target) | {"_target_", "_recursive_", "_partial_"}
    defaults = {p.name: p.default for p in inspect.signature(NextTokenLM.__init__).parameters.values()
                if p.default is not inspect.Parameter.empty}
    left = []
    for key in [k for k in model if k not in taken and k in defaults]:
        if model[key] != defaults[key]:
            raise ValueError(f"model.{key}={model[key]} is a setting of the next-token LM, which "
                             f"{target.__name__} (this task's objective) does not take: drop it")
        left.append(key)
    return left


def build(cfg: DictConfig):
    """Instantiate (datamodule, model) from a composed config, filling ``cfg.dims`` from the data."""
    # The batch types first: a pair that cannot work is refused before any data is read.
    batch_type = compat.batch_type(cfg.model, cfg.data, _choice("model", "?"), _choice("data", "?"))
    # The data config reads what it needs from the model as ${inputs.NAME} (cfg.inputs is model.inputs).
    check_reads(cfg, "data", "inputs", cfg.model.get("inputs") or {}, "model")
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.serve(batch_type)
    datamodule.prepare_data()
    datamodule.setup("fit")
    # The model config reads facts about the data as ${dims.NAME}: all of them must be there.
    check_reads(cfg, "model", "dims", datamodule.dims, "data")
    with open_dict(cfg):
        cfg.dims = datamodule.dims
    check_vocabulary(cfg.model, datamodule.dims.get("vocab_size"))
    tokenizer = datamodule.tokenizer.state() if datamodule.tokenizer is not None else None
    return datamodule, objective(cfg, tokenizer)


def keep_earlier_rows(loggers: Iterable[Logger], ckpt_path: str | None) -> None:
    """A run resumed into its own directory continues its ``metrics.csv``: Lightning's CSVLogger
    deletes the file when it starts (its first ``experiment`` call), so its rows of the steps
    before the one the run resumes at are read first and written back at once. The rows from that
    step on are dropped: those steps are trained again, and logged anew. Call on global rank 0,
    before anything calls a logger."""
    logs = [(logger, Path(logger.log_dir) / "metrics.csv") for logger in loggers if isinstance(logger, CSVLogger)]
    logs = [(logger, path) for logger, path in logs if path.is_file()]
    if not ckpt_path or not logs:
        return
    # check_resumable has read this file already; mmap reads only the entries, not the weights.
    step = int(torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True).get("global_step", 0))
    for logger, path in logs:
        with path.open(newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get("step", "").isdigit() and int(row["step"]) < step]
        with warnings.catch_warnings():  # "Previous log files ... will be deleted": they are written back
            warnings.filterwarnings("ignore", "Experiment logs directory")
            writer = logger.experiment  # deletes metrics.csv
        writer.metrics = rows
        writer.save()


def train(cfg: DictConfig) -> dict[str, float]:
    callbacks = [hydra.utils.instantiate(c) for c in cfg.get("callbacks", {}).values()]
    if cfg.detect_nan:
        callbacks.append(StopOnNonFinite(cfg.model.get("init_from")))
    callbacks.append(SaveOnSigterm())
    budget = Budget.from_config(cfg.get("budget"))
    if budget is not None:  # budget.flops=... (or tokens, samples, seconds): stop once it is spent
        callbacks.append(budget)
    if cfg.get("eval_contexts"):  # eval_contexts=[512,1024]: the val loss at longer contexts, at the end
        callbacks.append(LongerContexts(cfg.eval_contexts))
    loggers = [hydra.utils.instantiate(c) for c in cfg.get("logger", {}).values()]
    trainer: L.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers,
                                                 plugins=[NamedCheckpointIO()])
    # The trainer's strategy knows this process's global rank (not a stray SLURM_PROCID or RANK).
    run_dir.claim(Path(cfg.paths.output_dir), cfg.ckpt_path, cfg.overwrite, trainer.global_rank)
    L.seed_everything(cfg.seed, workers=True)
    datamodule, model = build(cfg)
    # Before anything is written: the logger's first call deletes metrics.csv, config.yaml is rewritten.
    check_resumable(cfg.ckpt_path, model)
    if trainer.is_global_zero:
        keep_earlier_rows(trainer.loggers, cfg.ckpt_path)
    for logger in trainer.loggers:  # the whole resolved config, not only the objective's arguments
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    if trainer.is_global_zero:
        out = Path(cfg.paths.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        if cfg.get("test"):
            best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
            results = trainer.test(model, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
            metrics.update({k: float(v) for r in results for k, v in r.items()})
    except SIGTERMException:  # Lightning's is a SystemExit with code 0: a killed run must not read as done
        print(f"SIGTERM at step {trainer.global_step}: stopped; "
              f"{run_dir.resume_hint(Path(cfg.paths.output_dir) / 'checkpoints')}", flush=True)
        raise SystemExit(143) from None
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

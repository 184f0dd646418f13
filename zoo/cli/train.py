"""``zoo train`` / ``python train.py``: compose conf/train.yaml, build data, model and Trainer, fit, test."""

from __future__ import annotations

from omegaconf import DictConfig

from zoo.train.run import optimized_metric, train


def main(cfg: DictConfig) -> float | None:
    # A sweeper (hparams_search=...) reads the value this returns: the run's optimized_metric.
    return optimized_metric(cfg, train(cfg))

"""Train any zoo model: compose the config, build data, model and Trainer, fit, test.

    python train.py                                  # GPT on tiny Shakespeare (CPU-sized)
    python train.py model=bert data=wikitext
    python train.py experiment=gpt_shakespeare_char_cpu
    python train.py ckpt_path=outputs/train/<run>/checkpoints/last.ckpt   # resume
    python train.py -m hparams_search=gpt_optuna     # an Optuna sweep (conf/hparams_search/)
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from zoo.train.run import optimized_metric, train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    # A sweeper (hparams_search=...) reads the value this returns: the run's optimized_metric.
    return optimized_metric(cfg, train(cfg))


if __name__ == "__main__":
    main()

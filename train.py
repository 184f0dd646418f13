"""Train any zoo model: compose the config, build data, model and Trainer, fit, test.

    python train.py                                  # GPT on tiny Shakespeare (CPU-sized)
    python train.py model=bert data=wikitext
    python train.py experiment=gpt_shakespeare_char_cpu
    python train.py ckpt_path=outputs/train/<run>/checkpoints/last.ckpt   # resume
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from zoo.training import train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> dict[str, float]:
    return train(cfg)


if __name__ == "__main__":
    main()

"""Train any zoo model: compose the config, build data, model and Trainer, fit, test
(the same as ``python -m zoo train``; the code is zoo/cli/train.py).

    python train.py                                  # GPT on tiny Shakespeare (CPU-sized)
    python train.py model=bert data=wikitext
    python train.py experiment=gpt_shakespeare_char_cpu
    python train.py ckpt_path=outputs/train/<run>/checkpoints/last.ckpt   # resume
    python train.py -m hparams_search=gpt_optuna     # an Optuna sweep (conf/hparams_search/)
"""

from zoo.cli.commands import hydra_main

main = hydra_main("train")

if __name__ == "__main__":
    main()

"""``zoo eval ckpt=PATH data=... [split=test] [out=FILE.json]``: a checkpoint's metrics on a split of
any data config, without training: the run's own test stage (the objective's ``test_step``), on the
split as the data module cuts it, with the checkpoint's tokenizer; so the numbers are those a run's
test stage reports on the same data (a language model: ``loss``, ``ppl`` and, on ``data=text``,
``bpb``, bits per byte: :meth:`zoo.objectives.lm.NextTokenLM.on_test_epoch_end`).

    python -m zoo eval ckpt=outputs/gpt/checkpoints/last.ckpt data=text data.source=notes/ out=eval.json
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import hydra
import lightning as L
from omegaconf import DictConfig, open_dict

from zoo.cli.train import set_threads
from zoo.inference.device import check_device
from zoo.objectives.loading import load
from zoo.terminal import on_terminal

SPLITS = ("val", "test")


def main(cfg: DictConfig) -> dict[str, float]:
    """Print (and write to ``out``) the test metrics of ``cfg.ckpt`` on split ``cfg.split`` of ``cfg.data``."""
    if cfg.split not in SPLITS:
        raise ValueError(f"split={cfg.split}: expected one of {', '.join(SPLITS)}")
    device = check_device(cfg.device)
    set_threads(cfg.threads)  # another count of threads sums in another order: the last digits move
    objective = load(cfg.ckpt, "cpu", command="zoo eval")
    context = (objective.hparams.net or {}).get("context")
    with open_dict(cfg):  # what the data config reads of a model, from the checkpoint
        cfg.inputs = {"tokenizer_from": str(cfg.ckpt), **({"context": context} if context else {})}
    datamodule = hydra.utils.instantiate(cfg.data)
    accepted = type(objective).accepted(objective.hparams)
    shared = [t for t in datamodule.yields if t in accepted]
    if not shared:
        raise ValueError(f"{cfg.ckpt} holds a {type(objective).__name__}, which reads "
                         f"{' or '.join(t.__name__ for t in accepted)} batches, but data={cfg.data._target_} yields "
                         f"{' or '.join(t.__name__ for t in datamodule.yields)}")
    datamodule.serve(shared[0])
    L.seed_everything(cfg.seed, verbose=False)
    datamodule.prepare_data()
    datamodule.setup("test")
    # The test stage's files (a seq2seq model's examples.txt) go to a folder dropped after: only out= is written.
    with tempfile.TemporaryDirectory() as scratch:
        trainer = L.Trainer(accelerator=device.type, devices=[device.index] if device.index is not None else 1,
                            precision=cfg.precision, logger=False, enable_checkpointing=False, default_root_dir=scratch,
                            enable_model_summary=False, enable_progress_bar=on_terminal(), use_distributed_sampler=False)
        results = trainer.test(objective, dataloaders=datamodule.split_loader(cfg.split), verbose=False)
    metrics = {name.split("/", 1)[-1]: float(value) for r in results for name, value in r.items()}
    for name, value in metrics.items():
        print(f"{cfg.split}/{name}: {value:.6g}")
    if cfg.out:
        out = Path(cfg.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"ckpt": str(cfg.ckpt), "split": cfg.split, **metrics}, indent=1) + "\n")
    return metrics

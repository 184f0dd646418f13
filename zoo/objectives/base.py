"""What every objective shares: building the network from its config, the optimizer,
the LR schedule, ``torch.compile`` and the bookkeeping for checkpoints."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import hydra
import lightning as L
import torch
from torch import nn
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.checkpoint import net_state
from zoo.convert.common import convert_folder, load_mapped
from zoo.convert.hub import resolve
from zoo.models.compiling import compile_net
from zoo.models.size import check as check_size
from zoo.nn.lora import apply as apply_lora, counts as lora_counts, settings as lora_settings
from zoo.objectives.loading import load
from zoo.objectives.optim import adamw, check_optim, warmup_cosine, warmup_inverse_sqrt
from zoo.registry import OBJECTIVES, name_of, objective_class


def plain(cfg: Any) -> Any:
    """A resolved plain-Python copy of a config (what checkpoints store)."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, (DictConfig, ListConfig)) else cfg


def _without_forward_net(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    """Drop a stored ``forward_net.*`` before a state dict is loaded: checkpoints written while the
    compiled wrapper was part of the module tree hold the net a second time under it
    (``forward_net._orig_mod.*`` under compile=true), the same tensors as ``net.*``."""
    for key in [k for k in state_dict if k.startswith(f"{prefix}forward_net.")]:
        del state_dict[key]


class Objective(L.LightningModule):
    """Base Lightning module: owns ``self.net`` (built from its config), the optimizer
    and the schedule. Subclasses implement ``training_step`` / ``validation_step`` and say
    in ``accepts`` which batch types of :mod:`zoo.data.batches` they read (train.py refuses
    data that yields none of them).

    Args:
        net: the network's config (a Hydra ``_target_`` tree); stored in the checkpoint
            so that ``zoo.objectives.loading.load`` rebuilds the same network (every ``_target_`` in it
            must be in :data:`zoo.registry.ALLOWED_TARGETS`).
        optim: AdamW + schedule settings (conf/optim).
        compile: apply ``torch.compile`` to the network.
        tokenizer: the data's tokenizer state, stored so that a checkpoint can decode.
        init_from: what the network starts from (fine-tuning): a zoo checkpoint (a .ckpt
            file, e.g. a pre-training run's; every weight must match in name and shape), or
            a directory in another library's format (e.g. a Hugging Face checkpoint), read
            by ``converter``, or ``hf:<repo id>[@revision]`` (``zoo.convert.hub``). The data modules take their tokenizer from the same place
            (``zoo.data.pretrained.tokenizer_of``), so that token ids mean the same thing.
        converter: ``module.function(net_cfg, init_from) -> (net_cfg, net)`` that reads a
            directory: the net config reshaped to the checkpoint, and the net holding its
            weights. The reshaped config is what the checkpoint stores (``init_from`` is
            not: the weights are in the checkpoint, so reloading never reads it again).
        input_kind: read from checkpoints written before the batch types, which stored the
            kind of input here; unused (``accepts`` says it now).
        lora: ``{r, alpha, dropout, targets}``: train LoRA adapters on the Block's linear layers
            named in ``targets`` (q, k, v, out, gate, fc_in, fc_out), the rest frozen
            (``zoo.nn.lora``); stored, so that a checkpoint rebuilds the same adapters.
    """

    accepts: ClassVar[tuple[type, ...]] = ()

    @classmethod
    def accepted(cls, model_cfg: Any) -> tuple[type, ...]:
        """The batch types this objective reads when configured by ``model_cfg`` (the model
        config: an objective may need a part configured to read a type; by default ``accepts``)."""
        return cls.accepts

    def __init__(self, net: Any, optim: Any, compile: bool = False, tokenizer: dict | None = None,
                 init_from: str | None = None, converter: str | None = None, lora: dict | None = None,
                 input_kind: Any = None):
        super().__init__()
        check_optim(plain(optim))
        net_cfg = plain(net)
        init_from = resolve(init_from)  # hf:<repo> -> its snapshot folder in the Hub cache
        if init_from and Path(init_from).is_dir():
            if not converter:
                raise ValueError(f"model.init_from={init_from} is a directory, and this model has no "
                                 f"model.converter to read it (a zoo .ckpt file needs none)")
            net_cfg, self.net = convert_folder(converter, net_cfg, init_from)
        else:
            check_size(net_cfg, "model.net")  # before anything is allocated
            self.net = hydra.utils.instantiate(net_cfg)
        if init_from and not Path(init_from).is_dir():
            load_mapped(self.net, net_state(init_from), f"model.init_from={init_from}")
            rank_zero_info(f"initialised the network from {init_from}")
        lora = lora_settings(plain(lora))
        if lora is not None:
            apply_lora(self.net, **lora)
            trainable, total = lora_counts(self.net)
            rank_zero_info(f"LoRA {lora}: {trainable:,} of {total:,} parameters train ({trainable / total:.2%})")
        self.save_hyperparameters({"net": net_cfg, "optim": plain(optim), "compile": compile,
                                   "tokenizer": plain(tokenizer), "converter": converter, "lora": lora})
        # What the steps call: the net, or its compiled wrapper. Kept out of the module tree (the
        # wrapper's weights are the net's), so that the state dict, and a checkpoint's keys, are
        # ``net.*`` alone whether compile is on or off: no ``forward_net._orig_mod.*``.
        object.__setattr__(self, "forward_net", compile_net(self.net) if compile else self.net)
        self.register_load_state_dict_pre_hook(_without_forward_net)
        self._examples: list[dict[str, str]] = []

    # Set by each training_step (analytic, see zoo.nn.flops) for the throughput monitor's MFU.
    flops_per_batch: int | None = None
    # How many test examples (input, reference, output) end up in the run's examples.txt.
    n_examples: int = 8

    def show_examples(self, rows: list[dict[str, str]]) -> None:
        """Keep the first test examples, each ``{"source": ..., "reference": ..., "greedy": ...}``,
        for ``examples.txt`` in the run directory (written when the test pass ends)."""
        self._examples += rows[: self.n_examples - len(self._examples)]

    def on_test_epoch_end(self) -> None:
        shown, self._examples = self._examples, []
        if shown and self.trainer.is_global_zero:
            # default_root_dir is the run directory (trainer.log_dir would be a collective call)
            text = "\n\n".join("\n".join(f"{key:>10}: {value}" for key, value in row.items()) for row in shown)
            Path(self.trainer.default_root_dir, "examples.txt").write_text(text + "\n")

    def batch_counts(self, batch) -> tuple[int, int]:
        """(samples, items) in a batch for the throughput monitor, as its type counts them
        (:mod:`zoo.data.batches`: real tokens, images, clips)."""
        return batch.samples, batch.items

    def configure_optimizers(self):
        o = self.hparams.optim
        # Under FSDP the wrapped model's parameters are the ones to optimise.
        model = self.trainer.model if self.trainer is not None and self.trainer.model is not None else self
        optimizer = adamw(model, o["lr"], o["betas"], o["weight_decay"])
        kind = o.get("schedule", "cosine")
        if kind == "inverse_sqrt":  # open-ended: needs no length
            schedule = partial(warmup_inverse_sqrt, warmup_steps=max(1, o["warmup_steps"]))
        else:  # cosine (check_optim knows no other)
            fixed = o.get("decay_steps")
            if not fixed and not (self.trainer and self.trainer.max_steps > 0):
                raise ValueError("optim.decay_steps is unset and trainer.max_steps is not positive: "
                                 "the learning-rate schedule needs a length")

            def schedule(step: int) -> float:
                # trainer.max_steps read at each step: a budget (zoo.train.budget) moves it to where it ends
                return warmup_cosine(step, o["warmup_steps"], fixed or self.trainer.max_steps, o["lr"], o["min_lr"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | Path, map_location: str | torch.device | None = None,
                             **kwargs: Any):
        """Lightning's loader goes through :func:`zoo.objectives.loading.load` (what a checkpoint names is
        checked against :mod:`zoo.registry` first); ``weights_only`` is always on."""
        unsupported = sorted(set(kwargs) - {"weights_only", "strict"})
        if unsupported or kwargs.get("weights_only") is False or kwargs.get("strict") is False:
            raise TypeError(f"{cls.__name__}.load_from_checkpoint reads a checkpoint as it was saved "
                            f"(weights_only, strict, no overrides); got {sorted(kwargs)}")
        accepts = [name for name in OBJECTIVES if issubclass(objective_class(name), cls)]
        return load(checkpoint_path, map_location or "cpu", accepts, f"{cls.__name__}.load_from_checkpoint")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Which objective wrote this, by its registered short name (stable when modules move), so
        # that zoo.objectives.loading.load can rebuild it from the file alone.
        checkpoint["zoo_objective"] = name_of(type(self))

"""The training step of ``experiment=gpt_local_shakespeare_cpu`` (a causal window of 64 in 3 of
4 layers at context 512, the block backend) against the same model dense (a causal mask in every
layer, SDPA's fused causal kernel): forward + backward + AdamW, timed alternately in one process,
peak memory of each in a fresh subprocess.

    python benchmarks/local_recipe.py              # the recipe's shape: batch 2 x 512, 4 layers, 128 wide
    python benchmarks/local_recipe.py --batch 8

Both nets are built from the recipe's own config (conf/experiment/gpt_local_shakespeare_cpu.yaml),
the dense one with the override its docs give; 65 ids stand in for the character vocabulary.
"""

from __future__ import annotations

import argparse

import hydra
import torch
import torch.nn.functional as F
from omegaconf import open_dict

from common import add_run_args, compare, make_step
from zoo.convert.common import compose_config

DENSE = ["model.net.mask.masks=[{_target_:zoo.nn.masks.CausalMask}]", "model.net.attention_backend=sdpa"]
VOCAB = 65  # tiny Shakespeare's characters


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2)
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)

    def step(overrides: list[str]):
        cfg = compose_config(["experiment=gpt_local_shakespeare_cpu", *overrides])
        with open_dict(cfg):
            cfg.dims = {"vocab_size": VOCAB}
        net = hydra.utils.instantiate(cfg.model.net).to(a.device).train()
        context = cfg.model.net.context
        x = torch.randint(0, VOCAB, (a.batch, context + 1), device=a.device)
        return make_step(net, lambda: F.cross_entropy(net(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()), a.dtype, compile=a.compile)

    compare("gpt_local_recipe", f"4 layers, 128 wide, context 512, batch {a.batch}", "window 64 x 3 + causal, blocks",
            lambda: step([]), {"dense causal, sdpa": lambda: step(DENSE)}, a)


if __name__ == "__main__":
    main()

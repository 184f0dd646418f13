"""``zoo export``: a zoo checkpoint as a folder that ``transformers`` loads:

    python -m zoo export ckpt=outputs/train/<run>/checkpoints/last.ckpt out=hf_gpt
    python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('hf_gpt')"

What it writes and how it checks it: :mod:`zoo.convert.export`.
"""

from __future__ import annotations

from omegaconf import DictConfig

from zoo.convert.export import export


def main(cfg: DictConfig) -> None:
    """Write ``ckpt`` into ``out`` (conf/export.yaml) and say what has no zoo counterpart."""
    untouched = export(cfg.ckpt, cfg.out, merge_lora=cfg.merge_lora)
    print(f"wrote {cfg.out}" + (f" (left at their initialisation, no zoo counterpart: {untouched})" if untouched else ""))

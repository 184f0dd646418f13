"""``zoo export``: a zoo checkpoint as a folder that ``transformers`` loads:

    python -m zoo export ckpt=outputs/train/<run>/checkpoints/last.ckpt out=hf_gpt
    python -c "from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained('hf_gpt')"

A checkpoint whose converter names no class (a headless ViTDet; GPT-Neo and YOLOS checkpoints
written before their converters) names it: ``hf_class=VitDetModel``. A net no ``transformers``
class holds (the original Transformer, a ViTDet classifier) is written in the zoo's own format (``model.safetensors`` + ``zoo_config.json``), and the command
says so. What it writes and how it checks it: :mod:`zoo.convert.export`.
"""

from __future__ import annotations

from omegaconf import DictConfig

from zoo.convert.export import FAMILIES, ZOO_CONFIG, export


def main(cfg: DictConfig) -> None:
    """Write ``ckpt`` into ``out`` (conf/export.yaml) and say what was written."""
    written, untouched = export(cfg.ckpt, cfg.out, merge_lora=cfg.merge_lora, hf_class=cfg.hf_class,
                                 overwrite=cfg.overwrite, sentence_transformer=cfg.sentence_transformer)
    if written is None:
        print(f"wrote {cfg.out} in the zoo's format (model.safetensors + {ZOO_CONFIG}): this network has no "
              f"transformers class (export writes {sorted(FAMILIES)}; name one with hf_class= for a family "
              f"whose checkpoints name no converter); read it back with zoo.convert.export.read_zoo")
        return
    print(f"wrote {cfg.out} ({written})"
          + (f" (left at their initialisation, no zoo counterpart: {untouched})" if untouched else ""))

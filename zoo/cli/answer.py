"""``zoo answer``: answer a question about an image with a LLaVA checkpoint (greedy decoding, KV cache).

    python -m zoo answer ckpt=outputs/llava_shapes_cpu/<run>/checkpoints/last.ckpt \\
        image=picture.png question="what color is the circle?"
"""

from __future__ import annotations

from omegaconf import DictConfig

from zoo.data.images import load_image
from zoo.inference.answering import Answerer


def main(cfg: DictConfig) -> None:
    """Print the answer to ``question`` about ``image`` (conf/answer.yaml)."""
    print(Answerer(cfg.ckpt)(load_image(cfg.image), str(cfg.question)))

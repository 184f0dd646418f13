"""``zoo attention-maps``: PNG heatmaps of a checkpoint's attention weights for one input
(the pictures and what each shows: :mod:`zoo.viz.attention_maps`).

    python -m zoo attention-maps ckpt=GPT.ckpt text="ROMEO: But soft" out=attention
    python -m zoo attention-maps ckpt=WHISPER.ckpt audio=clip.wav
    python -m zoo attention-maps ckpt=VIT.ckpt image=cat.png
    python -m zoo attention-maps ckpt=YOLOS.ckpt image=shapes.png
    python -m zoo attention-maps ckpt=LLAVA.ckpt image=shapes.png question="what color is the circle?"
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from zoo.data.batches import AudioText, ImageBoxes, ImageLabels, ImageText, PaddedTokens, SequencePairs, TokenWindows
from zoo.objectives.loading import load
from zoo.viz.attention_maps import attention_maps, run_title

# The input that shows the attention of a model trained on each batch type.
INPUT_OF_BATCH = {TokenWindows: "text", PaddedTokens: "text", SequencePairs: "text", AudioText: "audio",
                  ImageLabels: "image", ImageBoxes: "image", ImageText: "image_text"}
INPUTS = ("text", "audio", "image")


def main(cfg: DictConfig) -> None:
    """Write the maps of ``ckpt`` for the one input given (conf/attention_maps.yaml) into ``out``."""
    given = [key for key in INPUTS if cfg[key] is not None]
    if len(given) != 1:
        raise ValueError(f"zoo attention-maps draws one input: give exactly one of text=, audio=, image= "
                         f"(given: {', '.join(given) or 'none'})")
    if cfg.question is not None and given != ["image"]:
        raise ValueError(f"question={cfg.question!r} asks about an image: give it with image= (a LLaVA checkpoint)")
    kind = "image_text" if cfg.question is not None else given[0]
    objective = load(cfg.ckpt)
    accepted = sorted({INPUT_OF_BATCH[t] for t in type(objective).accepts if t in INPUT_OF_BATCH})
    if kind not in accepted:
        raise ValueError(f"{cfg.ckpt} holds a model for {' or '.join(accepted) or 'no shown'} input "
                         f"({type(objective).__name__}), but {kind} input was given")
    out, title = Path(cfg.out), run_title(cfg.ckpt)
    out.mkdir(parents=True, exist_ok=True)
    question = None if cfg.question is None else str(cfg.question)
    for path in attention_maps(objective, cfg.ckpt, given[0], str(cfg[given[0]]), question, out, title):
        print(f"wrote {path}")

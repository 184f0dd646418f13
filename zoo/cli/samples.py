"""``zoo samples out=DIR``: one small input for each command of the README's Commands block, drawn
from the zoo's own data: a test utterance of a speech set (``clip.wav``, for ``transcribe``), a test
image of shapes_vqa about ``question`` (``shapes_vqa.png``, for ``answer``) and one of
shapes_detection (``shapes_detection.png``, for ``detect``). The same seed writes the same files."""

from __future__ import annotations

from pathlib import Path

import hydra
import soundfile
from omegaconf import DictConfig
from PIL import Image

from zoo.config import compose_config
from zoo.data.audio import SAMPLE_RATE
from zoo.data.shapes_vqa import PROMPT, ShapesExamples

# Test examples searched for one asked ``question`` (about 1 in 60 asks a given one).
SEARCHED = 10_000


def data_config(model: str, data: str, cfg: DictConfig) -> DictConfig:
    """The ``data`` config as a run of ``model`` on it composes it (its sizes follow the model's)."""
    return compose_config([f"model={model}", f"data={data}", f"seed={cfg.seed}", f"paths.data_dir={cfg.paths.data_dir}",
                           f"paths.cache_dir={cfg.paths.cache_dir}"]).data


def speech_clip(cfg: DictConfig, path: Path) -> str:
    """Write the first test utterance of ``cfg.speech`` (16 kHz) to ``path``; returns its transcript."""
    data = hydra.utils.instantiate(data_config("whisper", cfg.speech, cfg))
    data.prepare_data()  # downloads the set into paths.data_dir if it is not there
    example = data.make_splits()["test"][0]
    soundfile.write(path, example.load().numpy(), SAMPLE_RATE, subtype="PCM_16")
    return example.text


def vqa_image(cfg: DictConfig, path: Path) -> str:
    """Write the first shapes_vqa test image that ``cfg.question`` is asked about; returns its answer."""
    data = data_config("llava", "shapes_vqa", cfg)
    examples = ShapesExamples("test", SEARCHED, cfg.seed, data.image_size, data.jitter)
    prompt = PROMPT.format(question=cfg.question)
    example = next((e for e in examples if e.prompt == prompt), None)
    if example is None:
        raise ValueError(f"question={cfg.question!r} is not one shapes_vqa asks (e.g. 'what color is the circle?', "
                         f"'how many squares are there?', 'is there a red triangle?')")
    example.image().save(path)
    return example.answers[0]


def detection_image(cfg: DictConfig, path: Path) -> int:
    """Write the first shapes_detection test image to ``path``; returns how many shapes it holds."""
    image, target = hydra.utils.instantiate(data_config("yolos", "shapes_detection", cfg)).dataset("test").raw(0)
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(path)
    return len(target["class_labels"])


def main(cfg: DictConfig) -> None:
    """``zoo samples`` (conf/samples.yaml): write the three files into ``out`` and say what each holds."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    answer = vqa_image(cfg, out / "shapes_vqa.png")  # first: a bad question= is refused before any download
    print(f"wrote {out / 'shapes_vqa.png'} (zoo answer; {cfg.question} {answer})")
    print(f"wrote {out / 'shapes_detection.png'} (zoo detect; {detection_image(cfg, out / 'shapes_detection.png')} shapes)")
    print(f"wrote {out / 'clip.wav'} (zoo transcribe; {cfg.speech} says {speech_clip(cfg, out / 'clip.wav')!r})")

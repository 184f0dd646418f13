"""The pictures: the committed ones have the structure the code draws now (panel titles and size;
issue 28 item 8), curves show every logged metric but counters, mask pictures draw padding only
where the inputs have it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from zoo.models.presets import build
from zoo.viz.mask_pictures import families_picture, family_panels, legend, mask_picture
from zoo.plots import plot_curves

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"


def structure(path: Path) -> tuple[tuple[int, int], list[str] | None]:
    """A PNG's size and the panel titles it was drawn with (its ``panels`` text field)."""
    with Image.open(path) as image:
        panels = image.text.get("panels")
        return image.size, None if panels is None else json.loads(panels)


@pytest.mark.parametrize("name", sorted(p.name for p in IMG.glob("mask_*.png")))
def test_a_committed_mask_picture_is_what_the_code_draws(name, tmp_path):
    """Regenerate it (``python -m zoo describe masks=DIR``, or the functions below) and compare."""
    model = name.removeprefix("mask_").removesuffix(".png")
    fresh = families_picture(tmp_path) if model == "families" else mask_picture(model, tmp_path)
    assert structure(IMG / name) == structure(fresh), f"docs/img/{name} is stale: copy {fresh.name} from " \
                                                      f"`python -m zoo describe masks=outputs/masks`"


def test_images_have_no_padding_and_bigbird_counts_are_in_the_legend():
    llava = family_panels(build("llava")[1])
    assert [(p.title, p.padded) for p in llava] == [("decoder (CausalMask())", 3), ("vision (NoMask())", 0)]
    assert "red: padding" not in legend(family_panels(build("vit")[1]))
    assert "a key counted 1 to 4 times" in legend(family_panels(build("bigbird")[1]))


def test_curves_show_a_one_point_metric_and_no_counter(tmp_path):
    log = tmp_path / "metrics.csv"
    rows = ["step,train/loss,train/target_tokens,val/loss,val/wer"]
    rows += [f"{s},{3 - s / 10},{100 + s},," for s in range(0, 40, 10)] + ["39,,,2.5,0.7"]  # one validation
    log.write_text("\n".join(rows) + "\n")
    assert structure(plot_curves(log, tmp_path / "curves.png"))[1] == ["loss", "wer"]


def test_an_alignment_of_a_degenerate_output_stays_a_readable_size(tmp_path):
    """A translation that never ends writes hundreds of tokens: the picture is capped, not 600x3945."""
    import torch

    from zoo.viz.attention_maps import MAX_HEIGHT, MAX_WIDTH, plot_alignment

    rows, cols = [f"t{i}" for i in range(300)], [f"s{j}" for j in range(12)]
    cross = [torch.rand(1, 2, len(rows), len(cols)).softmax(-1) for _ in range(3)]
    (width, height), _ = structure(plot_alignment(cross, rows, cols, tmp_path / "a.png", "run"))
    assert width <= 1.1 * MAX_WIDTH * 100 and height <= 1.1 * MAX_HEIGHT * 100


def test_titles_name_the_run_not_the_checkpoint_file():
    from zoo.viz.attention_maps import run_title

    assert run_title("outputs/train/2026-12-01_10-00-00/checkpoints/last.ckpt") == \
        "train/2026-12-01_10-00-00 (last.ckpt)"
    assert run_title("/somewhere/model.ckpt") == "model.ckpt"

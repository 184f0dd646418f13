"""Issue 27, runs and inference: a full disk while a checkpoint is written names the file and keeps
the earlier one; a run that starts from non-finite weights says so; a data folder that is a file
is named; generate, detect and answer refuse what they cannot do, by name (all in this process:
tiny models, a step or two)."""

from __future__ import annotations

import csv
import errno
import os
import re
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict
from PIL import Image

from conftest import TINY_GPT, write_shakespeare
from test_bad_input_checkpoints import save_objective
from zoo.cli.commands import call
from zoo.config import compose_config
from zoo.data.tokenizers import WordTokenizer
from zoo.inference.answering import Answerer
from zoo.train.run import objective, train

QUICK = [*TINY_GPT, "test=false", "model.sample_tokens=0", "trainer.val_check_interval=1", "optim.decay_steps=4",
         "+trainer.enable_progress_bar=false", "~callbacks.progress_bar", "+trainer.enable_model_summary=false"]


def gpt_config(root: Path, out: Path, *overrides: str):
    """The tiny GPT run of conftest.TINY_GPT on the generated Shakespeare in ``root``, into ``out``."""
    cfg = compose_config([*QUICK, f"paths.data_dir={root / 'data'}", f"paths.cache_dir={root / 'cache'}", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(out)
    return cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A run directory that trained 1 step (checkpoints/last.ckpt at step 1); treat as read-only."""
    root = tmp_path_factory.mktemp("gpt")
    write_shakespeare(root / "data")
    train(gpt_config(root, root / "run", "trainer.max_steps=1"))
    return root / "run"


def with_nan(ckpt: Path, path: Path) -> tuple[Path, str]:
    """A copy of ``ckpt`` at ``path`` whose first weight matrix holds a NaN; (path, that weight's name)."""
    state = torch.load(ckpt, weights_only=True)
    name = next(k for k, v in state["state_dict"].items() if v.is_floating_point() and v.dim() == 2)
    state["state_dict"][name][0, 0] = float("nan")
    torch.save(state, path)
    return path, name


# --- training -----------------------------------------------------------------------------------

def disk_full(monkeypatch, folder: Path, files_written: int = 0) -> list[Path]:
    """From the ``files_written + 1``-th file on, writing into ``folder`` fails with ENOSPC after half its
    bytes, as a full disk would (every other write goes through); returns the files it cut short."""
    write, started, cut = os.write, set(), []

    def full(fd: int, data) -> int:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.parent != folder.resolve():
            return write(fd, data)
        started.add(path)
        if len(started) <= files_written:
            return write(fd, data)
        cut.append(path)
        write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    return cut


def test_a_full_disk_names_the_checkpoint_being_written_and_keeps_the_earlier_one(run, tmp_path, monkeypatch):
    out = tmp_path / "run"
    # a copy of the 1-step run, resumed in its own directory for a second step
    (out / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "metrics.csv", "checkpoints/last.ckpt"):
        (out / name).write_bytes((run / name).read_bytes())
    before = (out / "checkpoints" / "last.ckpt").read_bytes()
    cut = disk_full(monkeypatch, out / "checkpoints")
    root = run.parent
    with pytest.raises(OSError, match=r"could not write the checkpoint .*checkpoints/\S+\.ckpt: No space left on "
                                      r"device; the checkpoints already in .* are unchanged") as err:
        train(gpt_config(root, out, "trainer.max_steps=2", f"ckpt_path={out / 'checkpoints' / 'last.ckpt'}"))
    assert cut and err.value.errno == errno.ENOSPC
    assert f"resume with ckpt_path={out / 'checkpoints' / 'last.ckpt'}" in str(err.value)
    assert (out / "checkpoints" / "last.ckpt").read_bytes() == before  # whole, and still the step-1 one
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["last.ckpt"]  # no half-written file


@pytest.mark.parametrize("start", ["init_from", "ckpt_path"])
def test_a_run_that_starts_from_non_finite_weights_names_them(run, tmp_path, start):
    out = tmp_path / "run"
    if start == "init_from":
        bad, name = with_nan(run / "checkpoints" / "last.ckpt", tmp_path / "nan.ckpt")  # a net.* name
        overrides, source = [f"model.init_from={bad}"], f"model.init_from={bad}"
    else:  # resumed in its own directory from a checkpoint that holds a NaN (written with detect_nan=false)
        (out / "checkpoints").mkdir(parents=True)
        bad, name = with_nan(run / "checkpoints" / "last.ckpt", out / "checkpoints" / "last.ckpt")
        overrides, source = [f"ckpt_path={bad}"], f"ckpt_path={bad}"
    # model.init_from is refused as it is read (every weight a reader copies must be finite); a resumed
    # checkpoint is restored by Lightning, and refused when training starts
    with pytest.raises(Exception) as err:
        train(gpt_config(run.parent, out, "trainer.max_steps=2", *overrides))
    message = str(err.value)
    if start == "init_from":
        assert f"{source}: weight {name.removeprefix('net.')!r} holds 1 NaN or infinite values" in message
    else:
        assert err.type is FloatingPointError
        assert f"the weights this run starts from ({source}) are not finite" in message
        assert f"NaN or inf in 1 tensor(s), e.g. {name};" in message
    assert "lower optim.lr" not in message
    assert not (out / "metrics.csv").exists()  # refused before the run logged anything


def test_a_data_folder_that_is_a_file_names_paths_data_dir(tmp_path, monkeypatch):
    from zoo.cli.train import main

    text = tmp_path / "input.txt"
    text.write_text("not a folder")
    monkeypatch.setenv("ZOO_DATA_DIR", str(text))
    cfg = compose_config(["trainer.max_steps=2"])
    with pytest.raises(NotADirectoryError, match=rf"paths.data_dir={re.escape(str(text))} \(from \$ZOO_DATA_DIR\) "
                                                 rf"is a file, not a folder: point ZOO_DATA_DIR"):
        main(cfg)
    assert text.read_text() == "not a folder"


# --- generate -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("setting", "message"), [
    ("max_new_tokens=-1", r"max_new_tokens=-1: expected a whole number >= 1"),
    ("num_samples=0", r"num_samples=0: expected a whole number >= 1"),
    ("num_samples=-1", r"num_samples=-1: expected a whole number >= 1"),
    ("device=gpu0", r"device='gpu0' is not a device the zoo runs on: use cpu, cuda, cuda:N or mps"),
])
def test_generate_refuses_what_it_cannot_do_before_reading_the_checkpoint(setting, message, tmp_path, capsys):
    with pytest.raises(ValueError, match=message):
        call("generate", [f"ckpt={tmp_path / 'never-read.ckpt'}", setting])
    assert capsys.readouterr().out == ""


def test_generate_names_a_device_this_machine_has_not(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device=cuda:1: this machine has no cuda device \(use device=cpu\)"):
        call("generate", [f"ckpt={tmp_path / 'never-read.ckpt'}", "device=cuda:1"])


def test_generate_bounds_max_new_tokens_by_the_context(run, capsys):
    ckpt = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ValueError, match=r"max_new_tokens=1000000000 is more than 100 times the model's context of "
                                         r"32 tokens .* generate at most 3200"):
        call("generate", [f"ckpt={ckpt}", "max_new_tokens=1000000000"])
    assert capsys.readouterr().out == ""
    call("generate", [f"ckpt={ckpt}", "max_new_tokens=40", "prompt=CITIZEN"])  # past the context: fine
    assert len(capsys.readouterr().out.split("\n---")[0]) == len("CITIZEN") + 40


def test_generate_names_non_finite_weights(run, tmp_path, capsys):
    bad, name = with_nan(run / "checkpoints" / "last.ckpt", tmp_path / "nan.ckpt")
    with pytest.raises(ValueError, match=rf"nan.ckpt holds weights that are not finite: NaN or inf in 1 tensor\(s\), "
                                         rf"e\.g\. {re.escape(name)}, so nothing can be sampled from it"):
        call("generate", [f"ckpt={bad}", "max_new_tokens=3"])
    assert capsys.readouterr().out == ""


# --- detect and answer --------------------------------------------------------------------------

def tiny_checkpoint(path: Path, model: str, dims: dict, *overrides: str, tokenizer: dict | None = None) -> Path:
    """An untrained ``model=<model>`` checkpoint at ``path``, built as train.py builds it from the data's ``dims``."""
    cfg = compose_config([f"model={model}", "model.net.n_layers=1", "model.net.block.d_model=32",
                          "model.net.block.n_heads=4", "model.net.block.d_ff=64", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
    return save_objective(objective(cfg, tokenizer), path)


def test_detect_refuses_to_draw_over_its_input_image(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "yolos.ckpt", "yolos", {
        "num_classes": 2, "image_size": 32, "channels": 3, "class_names": ["a", "b"], "max_objects": 3,
        "pixel_mean": [0.5] * 3, "pixel_std": [0.5] * 3}, "model.net.embedder.patch_size=8")
    image = tmp_path / "x.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(image)
    before = image.read_bytes()
    (tmp_path / "also.png").symlink_to(image)
    for out in (image, tmp_path / "also.png", tmp_path / "." / "x.png"):
        with pytest.raises(ValueError, match=rf"out={re.escape(str(out))} is the input image: the boxes would be "
                                             r"drawn over it; pass another out="):
            call("detect", [f"ckpt={ckpt}", f"image={image}", f"out={out}"])
    assert image.read_bytes() == before
    call("detect", [f"ckpt={ckpt}", f"image={image}", f"out={tmp_path / 'boxes.png'}"])  # another file: drawn
    assert (tmp_path / "boxes.png").is_file() and image.read_bytes() == before


def llava_ckpt(path: Path, prompt: str) -> Path:
    """A tiny untrained LLaVA checkpoint with a word vocabulary and the prompt template ``prompt``."""
    words = WordTokenizer([*WordTokenizer.SPECIALS, "question", "answer", ":", "what", "color", "is", "the",
                           "circle", "?", "red"])
    dims = {"vocab_size": words.vocab_size, "image_token_id": words.image_id, "prompt": prompt, "metric": "exact_match"}
    return tiny_checkpoint(path, "llava", dims, "model.net.embedder.vision.model.block.d_model=32",
                           "model.net.embedder.vision.model.n_layers=1",
                           "model.net.embedder.vision.model.embedder.patch_size=16", tokenizer=words.state())


def test_answer_refuses_an_empty_question_and_unknown_words(tmp_path, capsys):
    ckpt = llava_ckpt(tmp_path / "vqa.ckpt", "<image>\nquestion: {question}\nanswer:")
    image = tmp_path / "x.png"
    Image.new("RGB", (32, 32), (200, 10, 10)).save(image)
    for question in ("''", "'  '"):
        with pytest.raises(ValueError, match=r"question='\s*' is empty: .*vqa.ckpt answers a question about the "
                                             r"image .*; ask one"):
            call("answer", [f"ckpt={ckpt}", f"image={image}", f"question={question}"])
    with pytest.raises(ValueError, match=r"words not in the vocabulary of .*vqa.ckpt: \['colour', 'square'\] \(each "
                                         r"would read as <unk>\)"):
        call("answer", [f"ckpt={ckpt}", f"image={image}", "question='what colour is the square?'"])
    assert capsys.readouterr().out == ""
    Answerer(ckpt).check_question("What color is the circle?")  # known words (lower-cased as in training)


def test_answer_refuses_a_question_to_a_checkpoint_that_asks_none(tmp_path):
    ckpt = llava_ckpt(tmp_path / "captions.ckpt", "<image>")
    with pytest.raises(ValueError, match=r"captions.ckpt was trained on prompts without a question \('<image>': it "
                                         r"describes the image\): leave question= out"):
        Answerer(ckpt).check_question("what color is the circle?")
    Answerer(ckpt).check_question("")  # a caption: no question

"""Every line of the README's Commands block runs as written (issue 28 item 3): parsed from between
the ``<!-- commands -->`` markers and run in order in a fresh folder, on generated data. The ``train``
lines get a few extra overrides (two steps, small sizes: tiny checkpoints); every other line runs
unchanged and must leave a non-empty output (its ``out=`` file or folder, or its stdout)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, write_shakespeare
from test_bad_input_data import cifar10_folder
from test_transformer_multi30k import write_corpus
from test_whisper_data import write_fsdd

BLOCK = re.compile(r"<!-- commands -->\n(.*?)<!-- /commands -->", re.S)
SHORT = ["trainer.max_steps=2", "quick=true", "trainer.limit_val_batches=1", "trainer.log_every_n_steps=1"]
# The train lines' tiny checkpoints: sizes per model= (the defaults are CPU-sized, a few million parameters).
TINY = {
    "gpt": ["data.check=false", "model.net.n_layers=1", "model.net.block.d_model=32", "data.batch_size=4"],
    "transformer": ["data.vocab_size=120", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
                    "model.net.block.d_model=32", "data.batch_size=4"],
    "whisper": ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=32",
                "model.net.block.n_heads=2", "data.batch_size=4", "data.val_takes=2", "model.decoding.max_new_tokens=8"],
    "llava": ["model.net.n_layers=1", "model.net.block.d_model=32", "data.batch_size=4", "data.val_size=8"],
    "clip": ["model.net.n_layers=1", "model.net.block.d_model=32", "model.net.vision.n_layers=1",
             "model.net.vision.block.d_model=32", "data.batch_size=4"],
    "yolos": ["model.net.n_layers=1", "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.batch_size=4",
              "data.val_size=8"],
}


def commands_block() -> list[list[str]]:
    """The block's lines as argument lists (as the shell splits them; ``# ...`` comments dropped)."""
    block = BLOCK.search((ROOT / "README.md").read_text())
    assert block, "README.md has no <!-- commands --> block"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def test_the_block_trains_every_checkpoint_it_reads_and_writes_inside_outputs_or_its_out():
    """Each ckpt= names a checkpoint a train line before it writes (hydra.run.dir=...), so the block
    runs top to bottom as written; describe's pictures go under outputs/, not into the repository."""
    trained: set[str] = set()
    for argv in commands_block():
        assert argv[:3] == ["python", "-m", "zoo"], argv
        keys = dict(a.split("=", 1) for a in argv[4:] if "=" in a)
        if argv[3] == "train":
            trained.add(f"{keys['hydra.run.dir']}/checkpoints/last.ckpt")
        if "ckpt" in keys:
            assert keys["ckpt"] in trained, f"{' '.join(argv)}: no train line before it writes {keys['ckpt']}"
        if argv[3] == "describe":
            assert keys["masks"].startswith("outputs/")


def not_empty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0 or path.is_dir() and any(p.stat().st_size for p in path.rglob("*"))


@pytest.mark.slow
def test_every_line_of_the_commands_block_runs_and_writes_something(tmp_path):
    data = tmp_path / "data"
    with (write_shakespeare(data) / "tinyshakespeare" / "input.txt").open("a") as text:
        text.write("ROMEO:\nBut soft, what light through yonder window breaks?\n")  # the block's prompts' letters
    write_corpus(data)
    write_fsdd(data, speakers=("alice",), takes=range(8))
    cifar10_folder(data)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, ZOO_DATA_DIR=str(data), ZOO_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    for argv in commands_block():
        args = argv[3:]
        if args[0] == "train":
            model = dict(a.split("=", 1) for a in args if "=" in a)["model"]
            args = [*args, *SHORT, *TINY[model]]
        if args[0] == "compare":  # the generated data is not the official file its checksum names
            args = [*args, "overrides=['data.check=false']"]
        if args[0] == "eval":  # likewise
            args = [*args, "data.check=false"]
        out = subprocess.run([sys.executable, "-m", "zoo", *args], cwd=work, env=env, capture_output=True, text=True,
                             timeout=600)
        line = " ".join(argv)
        assert out.returncode == 0, f"{line}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        keys = dict(a.split("=", 1) for a in args if "=" in a)
        if args[0] == "train":
            assert not_empty(work / keys["hydra.run.dir"] / "checkpoints" / "last.ckpt"), line
        elif "out" in keys:
            assert not_empty(work / keys["out"]), line
        elif "masks" in keys:
            assert not_empty(work / keys["masks"]), line
        else:
            assert out.stdout.strip(), line
    assert not_empty(work / "samples" / "clip.wav") and not_empty(work / "samples" / "shapes_vqa.png")


@pytest.mark.slow  # ~20 s: composes three training configs
def test_samples_writes_each_input_and_refuses_a_question_shapes_vqa_never_asks(tmp_path):
    import soundfile
    from PIL import Image

    from zoo.cli.commands import call

    write_fsdd(tmp_path / "data", speakers=("alice",), digits=range(3), takes=range(6))
    paths = [f"paths.data_dir={tmp_path / 'data'}", f"paths.cache_dir={tmp_path / 'cache'}"]
    with pytest.raises(ValueError, match="question='what is the meaning' is not one shapes_vqa asks"):
        call("samples", [f"out={tmp_path / 'none'}", "question=what is the meaning", *paths])
    call("samples", [f"out={tmp_path / 'samples'}", *paths])
    assert soundfile.info(str(tmp_path / "samples" / "clip.wav")).duration > 0.1
    for name in ("shapes_vqa.png", "shapes_detection.png"):
        with Image.open(tmp_path / "samples" / name) as image:
            assert image.getbbox() is not None  # something drawn on the black

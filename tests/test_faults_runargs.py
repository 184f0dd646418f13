"""Issue 44, a run's arguments, its disk and its caches: values of the wrong kind or out of range are
refused in one line before anything is built; a constructor's refusal is one line naming the full
key, out of Hydra's wrapper; threads past the cores are lowered; a full disk leaves no half-written
checkpoint and names only checkpoints that exist; eval_contexts are bounded by the memory, show
their progress and stop on SIGTERM; caches are checked by their content and rebuilt."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from bert_wikitext_files import write_wikitext
from conftest import ROOT, TINY_GPT, write_shakespeare
from test_bert_data import datamodule as wikitext
from test_faults_runs2 import disk_full, gpt_config
from test_vit_data import make_image_folder
from zoo.cli.commands import one_line_refusals
from zoo.cli.precheck import Refused, check
from zoo.cli.train import set_threads
from zoo.config import compose_config
from zoo.data.cifar10 import CIFAR10, CLASSES
from zoo.data.images import decode_image_folder
from zoo.train.run import build, train


# --- values refused before anything is built ------------------------------------------------------

@pytest.mark.parametrize("argument, said", [
    ("threads=abc", "threads='abc': expected a whole number of CPU threads >= 1, or null"),
    ("threads=0", "threads=0: expected a whole number of CPU threads >= 1"),
    ("seed=-1", "seed=-1: expected a whole number from 0 to 4294967295"),
    ("seed=99999999999", "seed=99999999999: expected a whole number from 0 to 4294967295"),
    ("seed=abc", "seed='abc': expected a whole number"),
    ("model.net.context=big", "model.net.context='big': expected a whole number (the default is 64)"),
    ("budget.flops=inf", "budget.flops=inf: expected a finite number > 0"),
    ("budget.flops=lots", "budget.flops='lots': expected a finite number > 0"),
    ("budget.tokens=-5", "budget.tokens=-5: expected a finite number > 0"),
    ("optim.lr=fast", "optim.lr='fast': expected a number"),
    ("data.batch_size=abc", "data.batch_size='abc': expected a whole number"),
    ("eval_contexts=[big]", "eval_contexts=['big']: expected a list of whole numbers of tokens > 0"),
    ("eval_contexts=[0]", "eval_contexts=[0]: expected a list of whole numbers of tokens > 0"),
])
def test_a_value_of_the_wrong_kind_is_refused_in_one_line_naming_the_key(argument, said):
    with pytest.raises(Refused) as refusal:
        check("train", "train", [argument])
    assert said in str(refusal.value) and "\n" not in str(refusal.value)


def test_values_of_the_right_kind_pass():
    check("train", "train", ["threads=2", "seed=0", "budget.flops=1e15", "optim.lr=3e-4", "eval_contexts=[128,256]",
                             "model.net.context=${data.batch_size}", "trainer.precision=bf16-mixed",
                             "trainer.devices=auto", "hydra.run.dir=/nonexistent/run"])


def test_threads_past_the_cores_run_on_the_cores_with_a_warning():
    cores = len(os.sched_getaffinity(0))
    before = torch.get_num_threads()
    try:
        with pytest.warns(UserWarning, match=rf"threads={cores + 997} is more than the {cores} cores .*: running on "
                                             rf"{cores} threads"):
            assert set_threads(cores + 997) == cores
        assert torch.get_num_threads() == cores
    finally:
        torch.set_num_threads(before)


# --- a constructor's refusal, out of Hydra's InstantiationException --------------------------------

@pytest.mark.parametrize("overrides, said", [
    (["model=mixtral", "model.net.block.top_k=9"], "error: model.net.block.top_k=9 must be between 1 and "
                                                    "block.n_experts=8"),
    (["model=gemma2", "model.net.mask.masks.0.window=1000"], "error: LocalMask model.net.mask.masks.0.window=1000 is "
                                                             "larger than the model's context=64"),
    ([*TINY_GPT, "data.batch_size=0"], "error: data.batch_size=0: expected a whole number >= 1"),
])
def test_a_constructors_refusal_is_one_line_naming_the_full_key(overrides, said, tmp_path, capsys):
    write_shakespeare(tmp_path / "data")
    cfg = compose_config([*overrides, "data.check=false", f"paths.data_dir={tmp_path / 'data'}",
                          f"paths.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(SystemExit) as stop:
        one_line_refusals(build)(cfg)  # as every command runs
    err = capsys.readouterr().err
    assert stop.value.code == 1 and err.startswith(said) and err.count("\n") == 1, err


# --- a full disk ---------------------------------------------------------------------------------

def checkpoints_of(out: Path) -> dict[str, int]:
    """``{name: global_step}`` of the checkpoints in ``out``/checkpoints (each must load whole)."""
    return {p.name: torch.load(p, weights_only=True)["global_step"] for p in (out / "checkpoints").iterdir()}


@pytest.mark.parametrize("files_written, left", [(0, {}), (2, {"best-step=1.ckpt": 1, "last.ckpt": 1})])
def test_a_full_disk_leaves_whole_checkpoints_and_names_only_those(tmp_path, monkeypatch, files_written, left):
    write_shakespeare(tmp_path / "data")
    out = tmp_path / "run"
    cut = disk_full(monkeypatch, out / "checkpoints", files_written)
    with pytest.raises(OSError, match=r"could not write the checkpoint .*checkpoints/\S+\.ckpt: No space left") as err:
        train(gpt_config(tmp_path, out, "trainer.max_steps=3"))
    assert cut  # the disk did fill up while a checkpoint was written
    assert checkpoints_of(out) == left  # whole checkpoints only, no half-written file and no temporary one
    said = str(err.value)
    if left:
        assert f"resume with ckpt_path={out / 'checkpoints' / 'last.ckpt'}" in said
    else:
        assert "ckpt_path=" not in said and f"no checkpoint in {out / 'checkpoints'} yet" in said


# --- caches checked by their content --------------------------------------------------------------

def rebuilt_whole(cache: Path) -> bool:
    from zoo.data.cache import read

    return read(cache) is not None  # (the checksum holds)


def cifar(root: Path) -> CIFAR10:
    dm = CIFAR10(str(root / "data"), str(root / "cache"), batch_size=4, val_size=8)
    dm.setup("fit")
    return dm


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def relabel(path: Path, labels: torch.Tensor) -> None:
    """Rewrite ``labels`` (as stored: int64, in order) where the cache at ``path`` holds them, to other classes."""
    data = path.read_bytes()
    stored = labels.numpy().tobytes()
    assert data.count(stored) == 1
    path.write_bytes(data.replace(stored, ((labels + 1) % 10).numpy().tobytes()))


@pytest.mark.parametrize("damage", ["truncated", "relabelled"])
def test_a_damaged_image_cache_is_rebuilt_naming_it(tmp_path, damage):
    make_image_folder(tmp_path / "data", {"train": 4, "test": 2})
    first = cifar(tmp_path)
    root = tmp_path / "data" / "cifar10" / "train"
    cache = next(p for p in (tmp_path / "cache" / "cifar10").glob("train-*.pt"))
    if damage == "truncated":
        cut_in_half(cache)
    else:
        relabel(cache, decode_image_folder(root, CLASSES)[1])
    with pytest.warns(UserWarning, match=rf"the cache {re.escape(str(cache))} is damaged .*: rebuilding it"):
        again = cifar(tmp_path)
    for split in ("train", "val", "test"):
        assert all(torch.equal(a, b) for a, b in zip(again.splits[split], first.splits[split]))
    assert rebuilt_whole(cache)


def test_a_replaced_image_of_the_same_size_gets_a_new_cache(tmp_path):
    make_image_folder(tmp_path / "data", {"train": 4, "test": 2})
    first = cifar(tmp_path)
    image = tmp_path / "data" / "cifar10" / "train" / "cat" / "0000.png"
    other = tmp_path / "data" / "cifar10" / "train" / "dog" / "0000.png"
    stat = image.stat()
    image.write_bytes(other.read_bytes())  # (random 32x32 PNGs of the same size and time)
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    again = cifar(tmp_path)
    assert len(list((tmp_path / "cache" / "cifar10").glob("train-*.pt"))) == 2
    assert not torch.equal(again.splits["train"][0], first.splits["train"][0]) or \
        not torch.equal(again.splits["val"][0], first.splits["val"][0])


def test_a_truncated_wordpiece_cache_is_rebuilt_naming_it(tmp_path):
    write_wikitext(tmp_path / "data")
    first = wikitext(tmp_path)
    cache = next((tmp_path / "cache" / "wikitext").glob("*.json"))
    cut_in_half(cache)
    with pytest.warns(UserWarning, match=rf"the cache {re.escape(str(cache))} is damaged .*: rebuilding it"):
        again = wikitext(tmp_path)
    # trained again (the trainer breaks ties its own way) and cached whole
    assert again.tokenizer.vocab_size == first.tokenizer.vocab_size
    assert rebuilt_whole(cache) and again.tokenizer.tokenizer.to_str() in cache.read_text()


# --- eval_contexts: bounded, with progress, stopped by SIGTERM -------------------------------------

ROTARY = ["+model.net.rotary=true", "model.net.embedder.positions=none"]


@pytest.mark.parametrize("context, said", [
    (10**9, r"eval_contexts=\[1000000000\]: the evaluation at 1000000000 tokens would take about [\d,.]+ GB, more "
            r"than the [\d,.]+ GB available memory: evaluate at shorter contexts, or with a smaller data.batch_size"),
    (5000, r"eval_contexts=\[5000\]: the validation text is too short for 5000 tokens"),
])
def test_an_eval_context_the_run_cannot_evaluate_is_refused_before_training(tmp_path, context, said):
    write_shakespeare(tmp_path / "data")
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=said):
        train(gpt_config(tmp_path, out, *ROTARY, "trainer.max_steps=2", f"eval_contexts=[{context}]"))
    assert not (out / "checkpoints").exists()  # not a step trained


@pytest.mark.parametrize("model, cell", [("llama", 2), ("mistral", 4 * 4)])  # CPU causal; 4 heads' float scores
def test_the_estimate_grows_with_the_tokens_and_with_the_cells(model, cell):
    from zoo.train.longer_contexts import eval_bytes
    from zoo.train.run import objective

    cfg = compose_config([f"model={model}", "model.net.n_layers=2"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": 65}
    net = objective(cfg).net
    weights = 2 * sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))
    one = eval_bytes(net, 10_000, 1) - weights  # a window of 10,000 tokens
    assert one >= 10_000 * 4 * 5 * 128 + cell * 10_000**2  # the residual stream's copies and a projection, in float32
    assert eval_bytes(net, 10_000, 12) - weights == 12 * one
    assert eval_bytes(net, 20_000, 1) - weights == 2 * one + 2 * cell * 10_000**2  # (2L)^2 = 4 L^2
    on_a_gpu = eval_bytes(net, 10_000, 1, torch.device("cuda")) - weights
    assert on_a_gpu == (one - cell * 10_000**2 if model == "llama" else one)  # the fused causal kernel keeps no cells


@pytest.mark.slow  # a tiny rotary run, then an evaluation of 20 windows of 8,000 tokens, stopped (~30 s)
def test_a_long_evaluation_shows_its_progress_and_stops_at_sigterm(tmp_path):
    stanza = "CITIZEN:\nWe are accounted poor citizens, the patricians good.\n\n"
    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text(stanza * 2000)  # 10% of it: 12,000 for val
    out = tmp_path / "run"
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONUNBUFFERED="1")
    command = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={out}", *TINY_GPT, *ROTARY, "threads=1",
               "trainer.max_steps=2", "test=false", "model.sample_tokens=0", "data.val_batches=20",
               "eval_contexts=[8000]"]
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in process.stdout:  # (until the first progress line, or the end of the run)
            lines.append(line)
            if re.match(r"eval_contexts: 8000 tokens, batch \d+/20 \(\d+ s\)", line):
                break
        assert lines and lines[-1].startswith("eval_contexts: 8000 tokens, batch "), "".join(lines[-30:])
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        rest, _ = process.communicate(timeout=120)
        stopped = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 143 and stopped < 15, (stopped, rest)
    assert "batch 20/20" not in rest  # stopped within the evaluation, not after it
    assert f"SIGTERM at step 2: stopped; resume with ckpt_path={out / 'checkpoints' / 'last.ckpt'}" in rest, rest
    assert (out / "checkpoints" / "last.ckpt").is_file()

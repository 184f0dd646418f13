"""``python -m zoo eval ckpt=PATH data=... [split=test] out=FILE.json``: a checkpoint's metrics on a
data config's split, the same numbers the run's own test stage reported."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_train
from test_data_text import TINY, final_test_metrics, write_corpus
from zoo.cli.commands import call


def test_a_split_other_than_val_or_test_is_refused_before_the_checkpoint_is_read(tmp_path):
    with pytest.raises(ValueError, match="split=train: expected one of val, test"):
        call("eval", [f"ckpt={tmp_path / 'absent.ckpt'}", "split=train", "data.source=x"])


def _eval(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path), ZOO_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "zoo", "eval", *overrides], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_eval_reports_the_loss_perplexity_and_bits_per_byte_the_runs_test_stage_reported(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", files=10)
    run = tmp_path / "run"
    run_train(run, tmp_path, "model=gpt", "data=text", f"data.source={corpus}", "model.sample_tokens=0",
              *[o for o in TINY if not o.startswith("trainer.max_steps")], "trainer.max_steps=15")
    tested = final_test_metrics(run)
    best = next((run / "checkpoints").glob("best-*.ckpt"))  # the weights the test stage read
    out = tmp_path / "eval.json"
    done = _eval(tmp_path, f"ckpt='{best}'", "data=text", f"data.source={corpus}", f"out={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["split"] == "test" and set(report) >= {"loss", "ppl", "bpb"}
    # the same numbers: the same windows and weights, summed in float64 (in another process, the last
    # bits of a float32 may differ)
    assert {f"test/{k}": report[k] for k in ("loss", "ppl", "bpb")} == pytest.approx(tested, rel=1e-6)
    assert report["ppl"] == pytest.approx(math.exp(report["loss"]), rel=1e-6)
    assert f"test/bpb: {report['bpb']:.6g}" in done.stdout
    val = _eval(tmp_path, f"ckpt='{best}'", "data=text", f"data.source={corpus}", "split=val", f"out={out}")
    assert val.returncode == 0, val.stderr[-3000:]
    assert json.loads(out.read_text())["split"] == "val" and json.loads(out.read_text())["loss"] != report["loss"]


@pytest.mark.slow
def test_eval_of_a_checkpoint_whose_tokenizer_has_no_end_of_document_refuses_in_one_line(tmp_path, shakespeare_dir):
    """A character model of tiny Shakespeare has no end-of-document token: data=text cannot cut documents
    with its tokenizer, and says so (naming the checkpoint) rather than failing inside a batch."""
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, "model=gpt", "data=tinyshakespeare", "data.check=false", "data.val_batches=1",
              "model.sample_tokens=0", *[o for o in TINY if not o.startswith("trainer.max_steps")],
              "trainer.max_steps=2", "test=false")
    corpus = write_corpus(tmp_path / "corpus", files=4)
    done = _eval(tmp_path, f"ckpt={run / 'checkpoints' / 'last.ckpt'}", "data=text", f"data.source={corpus}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the tokenizer of ") and "last.ckpt has no end-of-document token" in last

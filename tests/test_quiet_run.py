"""A clean run prints the zoo's lines, the bars and the result: no warning a user cannot act on
(issue 28 item 7). Each warning a short run prints is checked against an explicit allow-list;
``train.log`` holds the zoo's lines, and off a terminal there are no ``\\r``-joined bars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_train

# Warnings a user can act on, each naming its fix (the only ones allowed in a clean run).
ALLOWED = (
    # trainer.max_steps=40 under the default 250-step interval: the warning names the fix.
    r"trainer\.val_check_interval=250 is longer than the run \(40 batches\).*pass trainer\.val_check_interval=40",
)
# How a warning reaches the screen: through logging (console.install), or warnings' own format
# (``path.py:LINE: Category: message``; Lightning's drops the category).
WARNING_LINE = re.compile(r"\[WARNING\]|^\S+\.py:\d+: |Warning: |warn", re.IGNORECASE)


def warnings_in(output: str) -> list[str]:
    return [line for line in output.splitlines() if WARNING_LINE.search(line)]


def unexpected(output: str) -> list[str]:
    return [line for line in warnings_in(output) if not any(re.search(a, line) for a in ALLOWED)]


def test_warning_lines_are_recognised() -> None:
    """The counter sees each form a warning takes (else the slow tests below could not fail)."""
    printed = ("/x/csv_logs.py:268: Experiment logs directory /r/ exists and is not empty.\n"
               "/x/sd.py:379: UserWarning: 'set_vital' is deprecated, please do not call\n"
               "[2026-12-03 07:40:17,306][py.warnings][WARNING] - /w/a.py:1: UserWarning: something\n"
               "[2026-12-03 07:40:17,306][zoo.cli.train][INFO] - threads=1\n")
    assert len(unexpected(printed)) == 3


@pytest.mark.slow
def test_clean_gpt_run_prints_no_warning_but_the_allowed(tmp_path: Path, shakespeare_dir: Path) -> None:
    run = tmp_path / "run"
    out = run_train(run, shakespeare_dir, "trainer.max_steps=40", "data.check=false", "data.val_batches=4")
    printed = out.stdout + out.stderr
    assert unexpected(printed) == [], printed[-4000:]
    assert len(warnings_in(printed)) >= 1  # the allowed one is there: the counter saw the output
    assert "Total FLOPs" not in printed and "litlogger" not in printed
    log = (run / "train.log").read_text()
    assert "threads=" in log and "step 40/40" in log and "GPU available" in log  # zoo's and Lightning's lines
    assert "\r" not in printed  # not a terminal: log lines, not bars


@pytest.mark.slow
def test_quick_seq2seq_run_prints_no_warning(tmp_path: Path, shakespeare_dir: Path) -> None:
    """T5 on text (its span corruption is the objective's on_before_batch_transfer), quick=true."""
    out = run_train(tmp_path / "run", shakespeare_dir, "model=t5", "quick=true", "trainer.max_steps=10",
                    "data.check=false", "data.batch_size=4", "model.net.context=32", "model.net.block.d_model=32",
                    "model.net.block.d_ff=64", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1")
    printed = out.stdout + out.stderr
    assert warnings_in(printed) == [], printed[-4000:]


def test_progress_bars_only_on_a_terminal(monkeypatch, capsys) -> None:
    from zoo import terminal

    monkeypatch.setattr(terminal, "on_terminal", lambda: True)
    assert list(terminal.progress(range(3), "decoding images")) == [0, 1, 2]
    assert "decoding images" in capsys.readouterr().err
    monkeypatch.setattr(terminal, "on_terminal", lambda: False)
    assert list(terminal.progress(range(3), "decoding images")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_the_default_sample_prompt_follows_the_tokenizer() -> None:
    """A newline for characters (tiny Shakespeare); WordPiece has none (model=llama data=wikitext
    warned that the default prompt was no token): its end of text, which precedes every article."""
    from zoo.data.tokenizers import CharTokenizer, HFTokenizer
    from zoo.data.wikitext import SPECIAL_TOKENS
    from zoo.objectives.lm import sample_prompt_ids

    chars = CharTokenizer(sorted(set("ROMEO:\nbut soft")))
    assert sample_prompt_ids(chars, None) == chars.encode("\n") != []
    words = HFTokenizer.train_wordpiece(["the cat sat on the mat"] * 4, 60, SPECIAL_TOKENS)
    assert words.encode("\n") == [] and sample_prompt_ids(words, None) == [words.token_id("[SEP]")]
    assert sample_prompt_ids(words, "the cat") == words.encode("the cat")
    # characters of a text without a newline (data=text on one-line documents): its end of text
    flat = CharTokenizer("".join(sorted(set("the cat sat"))), ["<|endoftext|>"])
    assert sample_prompt_ids(flat, None) == [flat.token_id("<|endoftext|>")]

"""Issue 44, studies and reports: a value name is a name (never a path out of ``out=``); the whole
study is checked before its first run; a report is of one study at one budget and lists every run
(finished, failed and why, stopped, missing), its final values being those the runs recorded at
their end; ``compare`` holds its ``out=``, always ends with a report, passes a signal on to its runs
and resumes with the same command; each run's peak memory is its own. The report's tests read
folders made here (no training); the slow ones start real studies of tiny models."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, TINY_GPT, write_shakespeare
from zoo.cli import commands
from zoo.cli.commands import call, raised_by_zoo
from zoo.cli.precheck import Refused, check, check_study
from zoo.config import compose_config

TOKENS = 5 * 4 * 32  # five steps of TINY_GPT (4 windows of 32 tokens)
BASE = ["model=gpt", "trainer=cpu", *TINY_GPT, "trainer.max_steps=50", "trainer.val_check_interval=2", "test=false",
        "model.sample_tokens=0", "+trainer.enable_progress_bar=false", "~callbacks.progress_bar"]
LOCAL = "++model.net.mask={_target_:zoo.nn.masks.LocalMask,window:8,causal:true}"


def tiny_study(**changes) -> dict:
    """A study of two masks of the tiny GPT, one seed, five steps' tokens."""
    return {"name": "tiny", "axis": "mask", "seeds": [1], "budget": {"tokens": TOKENS}, "metric": "val/loss",
            "base": BASE, "values": {"causal": [], "local": [LOCAL]}, **changes}


def study_file(tmp_path: Path, study: dict) -> list[str]:
    """``study`` as conf/study/NAME.yaml under ``tmp_path``: the overrides that pick it."""
    (tmp_path / "conf" / "study").mkdir(parents=True, exist_ok=True)
    (tmp_path / "conf" / "study" / f"{study['name']}.yaml").write_text(OmegaConf.to_yaml(study))
    return [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"study={study['name']}"]


def composed(tmp_path: Path, study: dict):
    return compose_config(study_file(tmp_path, study), "compare").study


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """Empty data and cache folders: a run that starts (it should not) fails at once, not downloads."""
    for name, variable in (("data", "ZOO_DATA_DIR"), ("cache", "ZOO_CACHE_DIR")):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(variable, str(tmp_path / name))


# --- the study's check, before anything runs ---------------------------------------------------

@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", "a,b", "a b", "/abs"])
def test_a_value_that_is_not_a_name_is_refused(tmp_path, name):
    study = composed(tmp_path, tiny_study(values={"causal": [], name: [LOCAL]}))
    with pytest.raises(Refused, match=r"study tiny: value .* is not a name: a name is letters, digits, _ \. - "
                                      r"\(it names a folder of out=\), not \. or \.\.; rename it") as refused:
        check_study(study)
    assert repr(name) in str(refused.value)


def test_a_study_named_as_a_path_is_refused(tmp_path):
    study = composed(tmp_path, tiny_study())
    study.name = "../../up"  # (its out= defaults to outputs/studies/NAME)
    with pytest.raises(Refused, match=r"study \.\./\.\./up: name '\.\./\.\./up' is not a name"):
        check_study(study)


def test_compare_writes_nothing_outside_out_for_a_value_named_as_a_path(tmp_path, no_data):
    out = tmp_path / "studies" / "tiny"
    picked = study_file(tmp_path, tiny_study(values={"causal": [], "../../escaped": [LOCAL]}))
    with pytest.raises(ValueError, match=r"value '\.\./\.\./escaped' is not a name"):
        call("compare", [*picked, f"out={out}"])
    assert not out.exists() and not (tmp_path / "escaped").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "conf", "data"]


@pytest.mark.parametrize("change, said", [
    ({"seeds": []}, r"seeds=\[\]: a study names one or more whole-number seeds"),
    ({"seeds": [1, 1]}, r"seeds=\[1, 1\]: seed 1 twice; each seed once"),
    ({"budget": {"flops": 0}}, r"budget\.flops=0: a budget is a positive amount"),
    ({"budget": {"tokens": -640}}, r"budget\.tokens=-640: a budget is a positive amount"),
    ({"axsi": "mask"}, r"unknown key axsi \(did you mean axis\?\); a study's keys are name, base, axis"),
    ({"seeds": "1"}, r"seeds=1: a study names one or more whole-number seeds"),
])
def test_a_study_file_that_is_not_a_study_is_refused_in_one_line(tmp_path, change, said):
    study = tiny_study(**change)
    if "axsi" in change:
        del study["axis"]
    with pytest.raises(Refused, match=said):
        check_study(composed(tmp_path, study))


def test_an_unknown_target_in_the_last_value_is_found_before_the_first_run(tmp_path, no_data):
    out = tmp_path / "out"
    values = {"causal": [], "local": [LOCAL], "nosuch": ["++model.net.mask={_target_:zoo.nn.masks.NoSuchMask}"]}
    with pytest.raises(ValueError, match=r"study tiny, value nosuch: model\.net\.mask\._target_=zoo\.nn\.masks\."
                                         r"NoSuchMask: no such class or function"):
        call("compare", [*study_file(tmp_path, tiny_study(values=values)), f"out={out}"])
    assert not out.exists()


def test_a_second_compare_into_the_same_out_is_refused_naming_the_first(tmp_path, no_data):
    out = tmp_path / "out"
    holder = subprocess.Popen(  # a compare that holds out= (the lock zoo.train.run_dir gives a run)
        [sys.executable, "-c", f"from pathlib import Path; from zoo.train import run_dir; run_dir.lock(Path({str(out)!r}));"
                               f" print('held', flush=True); import time; time.sleep(60)"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FileExistsError, match=rf"{out} is in use by a run still going \(PID {holder.pid} on "
                                                  rf".*\): wait for it to end, or pick another out="):
            call("compare", [*study_file(tmp_path, tiny_study()), f"out={out}"])
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


# --- zoo diff's sides --------------------------------------------------------------------------

@pytest.mark.parametrize("sides", [["a=", "b=gpt"], ["a=gpt", "b=''"]])
def test_an_empty_diff_side_is_refused(sides):
    with pytest.raises(Refused, match=r"=: a side of zoo diff is empty \(''\): give a family \(gpt\) or overrides"):
        check("diff", "diff", sides)


def test_a_diff_side_of_several_words_quoted_for_the_shell_alone_is_one_side(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["zoo", "diff", "a=gpt model.net.n_layers=2", "b=gpt"])
    commands.main()
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["container", "  model.net.n_layers  2                         4"]


def test_an_override_hydra_cannot_parse_is_refused_naming_it():
    with pytest.raises(Refused, match=r"'b=x=y z': not one key=value .*quoted for Hydra too: key='a b'"):
        check("report", "report", ["dir=.", "b=x=y z"])


# --- the report, from folders made here --------------------------------------------------------

def fake_run(out: Path, value: str, seed: int, final: float | None = 2.0, study: str = "tiny",
             tokens: int = TOKENS, losses: tuple[float, ...] = (3.0, 2.5), budget: bool = True) -> Path:
    """A run folder as a finished study run leaves it: config.yaml, metrics.csv (a validation at
    steps 2, 4, ... with ``losses``), budget.json (its last validation ``final``)."""
    run = out / value / f"seed_{seed}"
    run.mkdir(parents=True)
    cfg = {"study": {"name": study, "axis": "mask", "value": value}, "seed": seed,
           "budget": {"flops": None, "tokens": tokens, "samples": None, "seconds": None}, "model": {"net": {"context": 32}}}
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    rows = "".join(f"{2 * (i + 1)},0,{loss},{1e6 * (i + 1)},{0.5 * (i + 1)}\n" for i, loss in enumerate(losses))
    (run / "metrics.csv").write_text("step,epoch,val/loss,val/flops_spent,val/seconds_spent\n" + rows)
    if budget:
        spent = {"kind": "tokens", "limit": tokens, "spent": {"flops": 2e6, "tokens": tokens, "samples": 20, "seconds": 1.0},
                 "steps": 5, "parameters": 30_000, "peak_memory_mb": {"cpu_rss": 500.0},
                 "final": {} if final is None else {"step": 2 * len(losses), "val/loss": final}}
        (run / "budget.json").write_text(json.dumps(spent))
    return run


def fake_study(out: Path, values: tuple[str, ...] = ("causal", "local"), seeds: tuple[int, ...] = (1, 2)) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.yaml").write_text(OmegaConf.to_yaml(tiny_study(values={v: [] for v in values}, seeds=list(seeds))))


def report(out: Path) -> str:
    call("report", [f"dir={out}"])
    return (out / "report.md").read_text()


def row(text: str, value: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {value} |"))


def test_a_folder_of_two_studies_is_refused_naming_both(tmp_path):
    fake_run(tmp_path, "causal", 1, study="masks")
    fake_run(tmp_path, "rotary", 1, study="positions")
    with pytest.raises(ValueError, match=r"holds the runs of study masks at budget tokens=640 \(causal/seed_1\) and "
                                         r"study positions at budget tokens=640 \(rotary/seed_1\): a report is of one "
                                         r"study at one budget"):
        report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_a_folder_of_one_study_at_two_budgets_is_refused_naming_both(tmp_path):
    fake_study(tmp_path, seeds=(1,))
    fake_run(tmp_path, "causal", 1)
    fake_run(tmp_path, "local", 1, tokens=2 * TOKENS)
    with pytest.raises(ValueError, match=r"study tiny at budget tokens=640 \(study\.yaml, causal/seed_1\) and study "
                                         r"tiny at budget tokens=1280 \(local/seed_1\)"):
        report(tmp_path)


def test_the_report_lists_every_value_and_seed_with_its_state_and_averages_the_finished(tmp_path):
    fake_study(tmp_path, values=("causal", "local", "strided"))
    fake_run(tmp_path, "causal", 1, final=2.0)
    fake_run(tmp_path, "causal", 2, final=3.0)
    failed = fake_run(tmp_path, "local", 1, budget=False)
    (failed / "error.txt").write_text("FloatingPointError: val/loss=nan at step 3\n")
    stopped = fake_run(tmp_path, "local", 2, budget=False)
    (stopped / "checkpoints").mkdir()
    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"saved")
    text = report(tmp_path)
    assert " | 2.0000 / 2.5000 / 3.0000 | " in row(text, "causal") and row(text, "causal").endswith(" | 1, 2 |")
    assert row(text, "local").endswith("| no finished run | none |") and row(text, "strided").endswith(" | none |")
    assert "2 of 6 runs finished." in text
    for said in ("- causal/seed_1: finished: final val/loss 2.0000 at step 4",
                 "- local/seed_1: failed: FloatingPointError: val/loss=nan at step 3",
                 "- local/seed_2: stopped: checkpoints/last.ckpt saved, not at its end: the same zoo compare resumes it",
                 "- strided/seed_1: missing: never started", "- strided/seed_2: missing: never started"):
        assert said in text.splitlines()


def test_the_final_value_is_the_one_recorded_at_the_run_s_end_whatever_metrics_csv_holds(tmp_path):
    fake_study(tmp_path, values=("causal",))
    cut = fake_run(tmp_path, "causal", 1, final=2.1234, losses=(3.0, 2.1234))
    (cut / "metrics.csv").write_text((cut / "metrics.csv").read_text()[:-12])  # cut short mid-row: "4,0,2.1"
    emptied = fake_run(tmp_path, "causal", 2, final=1.8766)
    (emptied / "metrics.csv").write_text("")
    text = report(tmp_path)
    assert " | 1.8766 / 2.0000 / 2.1234 | " in row(text, "causal") and row(text, "causal").endswith(" | 1, 2 |")
    assert "- causal/seed_2: finished: final val/loss 1.8766 at step 4; metrics.csv holds no rows: left out of the " \
           "pictures" in text
    assert "- causal/seed_1: finished: final val/loss 2.1234 at step 4\n" in text


@pytest.mark.parametrize("damage, said", [
    (lambda run: (run / "budget.json").write_text('{"kind": "tokens", "spent": {"flo'), "budget.json is damaged"),
    (lambda run: (run / "budget.json").write_bytes(b"\xff\xfe\x00garbage"), "budget.json is damaged"),
    (lambda run: (run / "budget.json").unlink(), "ended with no budget.json, no error and no checkpoint"),
    (lambda run: (run / "budget.json").write_text('{"spent": {}, "peak_memory_mb": {}}'), "budget.json records no final"),
])
def test_a_damaged_run_is_named_and_left_out_of_the_mean(tmp_path, damage, said):
    fake_study(tmp_path, values=("causal",))
    fake_run(tmp_path, "causal", 1, final=2.0)
    damage(fake_run(tmp_path, "causal", 2, final=9.0))
    text = report(tmp_path)
    assert " | 2.0000 / 2.0000 / 2.0000 | " in row(text, "causal") and row(text, "causal").endswith(" | 1 |")
    assert f"- causal/seed_2: failed: {said}" in text


def test_a_run_that_never_validated_is_finished_but_not_averaged(tmp_path):
    fake_study(tmp_path, values=("causal",))
    fake_run(tmp_path, "causal", 1, final=2.0)
    fake_run(tmp_path, "causal", 2, final=None)
    text = report(tmp_path)
    assert row(text, "causal").endswith(" | 1 |")
    assert "- causal/seed_2: finished: its last validation recorded no val/loss (it never validated?)" in text


def read_only(folder: Path) -> Path:
    """A study's folder holding a finished run, made read-only (which root may still write into)."""
    fake_study(folder, values=("causal",), seeds=(1,))
    fake_run(folder, "causal", 1)
    folder.chmod(0o555)
    return folder


def binary(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "budget.json", "metrics.csv"):
        (folder / name).write_bytes(bytes(range(256)) * 4)
    return folder.parent


@pytest.mark.parametrize("folder, said", [
    (lambda tmp: tmp / "nowhere", r"dir=.*/nowhere: no such folder; dir= is the out= of a zoo compare"),
    (lambda tmp: (tmp / "file.txt", (tmp / "file.txt").write_text("x"))[0], r"file\.txt is a file, not a study's folder"),
    (lambda tmp: read_only(tmp / "study"), r"is read-only: the report writes report\.md and two pictures there"),
    (lambda tmp: binary(tmp / "run"), r"holds no study: no study\.yaml and no run whose config\.yaml names a study"),
    (lambda tmp: (tmp, (tmp / "notes.txt").write_text("hello"), (tmp / "budget.json").write_text("[1]"))[0],
     r"holds no study"),
    (lambda tmp: (tmp, (tmp / "study.yaml").write_bytes(b"\x00\x01 \xff"))[0], r"study\.yaml is not a study"),
])
def test_report_refuses_what_is_not_a_study_s_folder_in_one_line(tmp_path, folder, said):
    given = folder(tmp_path)
    try:
        with pytest.raises((ValueError, OSError), match=said) as error:
            report(given)
        assert raised_by_zoo(error.value) and "\n" not in str(error.value)  # the command prints it as one line
    finally:
        for folder in (tmp_path, tmp_path / "study"):
            if folder.exists():
                folder.chmod(0o755)
    assert not list(tmp_path.rglob("report.md"))


def test_each_run_s_peak_memory_is_its_own_not_an_earlier_run_s_in_the_process():
    from zoo.train.budget import peak_memory_mb, reset_peak_memory

    cpu = __import__("torch").device("cpu")
    big = bytearray(400 * 2**20)  # an earlier run's 400 MiB, freed before the next run starts
    big[:: 4096] = b"x" * len(big[:: 4096])
    after_big = peak_memory_mb(cpu, since_reset=True)["cpu_rss"]
    del big
    assert reset_peak_memory(cpu)
    small = bytearray(20 * 2**20)
    small[:: 4096] = b"x" * len(small[:: 4096])
    own = peak_memory_mb(cpu, since_reset=True)["cpu_rss"]
    assert own < after_big - 300, (own, after_big)


# --- real studies (tiny models) ----------------------------------------------------------------

def compare_command(tmp_path: Path, study: dict, *more: str) -> list[str]:
    return [sys.executable, "-m", "zoo", "compare", *study_file(tmp_path, study), f"out={tmp_path / 'out'}", *more]


def environment(tmp_path: Path) -> dict:
    if not (tmp_path / "data").exists():
        write_shakespeare(tmp_path / "data")
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", ZOO_DATA_DIR=str(tmp_path / "data"),
                ZOO_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")


@pytest.mark.slow  # two tiny runs, one of which fails (~30 s)
def test_a_failed_run_is_named_in_the_report_that_compare_writes_and_the_final_is_the_last_validation(tmp_path):
    study = tiny_study(axis="block", values={"bad": ["model.net.block.n_heads=3"], "ok": []})  # 32 wide: 3 heads fail
    done = subprocess.run(compare_command(tmp_path, study), cwd=ROOT, env=environment(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    assert ("error: 1 of 2 runs finished (ok/seed_1); not finished: bad/seed_1 (failed); the report: "
            f"{tmp_path / 'out' / 'report.md'}; the same command resumes the study") in done.stderr
    text = (tmp_path / "out" / "report.md").read_text()
    failed = next(line for line in text.splitlines() if line.startswith("- bad/seed_1: failed: "))
    assert "n_heads" in failed or "divisible" in failed, failed
    ok = tmp_path / "out" / "ok" / "seed_1"
    final = json.loads((ok / "budget.json").read_text())["final"]
    with (ok / "metrics.csv").open() as f:
        last = [(int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(f) if r["val/loss"]][-1]
    assert (final["step"], final["val/loss"]) == (5, pytest.approx(last[1])) and last[0] == 4  # step 5: after 5 steps
    assert f" | {final['val/loss']:.4f} / " in row(text, "ok")


@pytest.mark.slow  # three tiny runs and a quarter (~90 s)
@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_compare_stops_every_run_and_the_same_command_resumes(tmp_path, sent):
    study = tiny_study(seeds=[1, 2], values={"causal": [], "local": [LOCAL]})
    marker = tmp_path / "paused"
    pause = ["+callbacks.pause._target_=tests.sigterm_at.PauseAt", "+callbacks.pause.step=3",
             "+callbacks.pause.run=causal/seed_2", f"+callbacks.pause.marker={marker}"]
    command = compare_command(tmp_path, study, "overrides=[" + ",".join(f"'{o}'" for o in pause) + "]")
    env, out = environment(tmp_path), tmp_path / "out"
    compare = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 400
    while not marker.exists() and compare.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), compare.communicate(timeout=60)
    time.sleep(0.2)  # (the PID is written before the pause)
    compare.send_signal(sent)
    stdout, stderr = compare.communicate(timeout=300)
    assert compare.returncode == 128 + sent, stderr[-3000:]
    assert (f"{signal.Signals(sent).name}: the runs were stopped; 1 of 4 runs finished (causal/seed_1); not finished: "
            f"causal/seed_2 (stopped); local/seed_1 (missing); local/seed_2 (missing)") in stderr, stderr[-2000:]
    with pytest.raises(ProcessLookupError):  # the paused run is gone with compare, no orphan trains on
        os.kill(int(marker.read_text()), 0)
    assert "KeyboardInterrupt" not in stderr and "- causal/seed_2: stopped" in (out / "report.md").read_text()
    stopped = out / "causal" / "seed_2"
    assert (stopped / "checkpoints" / "last.ckpt").is_file() and not (stopped / "budget.json").exists()

    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 of 4 runs into" in done.stdout
    text = (out / "report.md").read_text()
    assert "4 of 4 runs finished." in text and row(text, "causal").endswith(" | 1, 2 |")
    resumed = OmegaConf.load(stopped / "config.yaml")
    assert resumed.ckpt_path == str((stopped / "checkpoints" / "last.ckpt").resolve())
    spent = json.loads((stopped / "budget.json").read_text())
    assert spent["steps"] == 5 and spent["spent"]["tokens"] == TOKENS  # from step 3 on, not again from 0
    # Nothing lost, nothing twice: the rows before the checkpoint kept, those after it logged once, as
    # the run that was never stopped logged its own.
    assert logged(stopped) == logged(out / "causal" / "seed_1")


def logged(run: Path) -> list[tuple[int, list[str]]]:
    """(step, the metrics it holds) of each row of a run's metrics.csv."""
    with (run / "metrics.csv").open() as f:
        return [(int(r["step"]), sorted(k for k, v in r.items() if v and k != "step")) for r in csv.DictReader(f)]


@pytest.mark.slow  # two tiny trainings in this process (~30 s)
def test_a_small_run_after_a_large_one_in_one_process_reports_its_own_peak(tmp_path):
    from test_faults_runs2 import gpt_config
    from zoo.train.run import train

    write_shakespeare(tmp_path / "data")
    peaks = {}
    for name, width in (("large", 512), ("small", 32)):  # the sweep's one process: the large run first
        out = tmp_path / name
        train(gpt_config(tmp_path, out, "trainer.max_steps=2", f"budget.tokens={2 * 4 * 32}",
                         f"model.net.block.d_model={width}", "model.net.n_layers=4"))
        peaks[name] = json.loads((out / "budget.json").read_text())["peak_memory_mb"]["cpu_rss"]
    assert peaks["small"] < peaks["large"] - 100, peaks

"""benchmarks/gpu.sh's Python parts, on made-up logs: the compile / training time split of a run's
metrics.csv (benchmarks/gpu_recipe.py) and the benchmarks' --compile option (benchmarks/common.py)."""

from __future__ import annotations

import argparse
import ast
import csv
import importlib.util
import sys
from pathlib import Path

import pytest

from zoo.plots import read_metrics

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    """benchmarks/<name>.py as a module, by its path: that folder is never put on sys.path here,
    since its whisper.py (and t5.py, ...) would shadow the libraries of those names for other tests."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (dataclasses look it up there)
    spec.loader.exec_module(module)
    return module


add_run_args = load("common").add_run_args
recipe = load("gpu_recipe")
recipe_times, recipe_main = recipe.recipe_times, recipe.main


def write_log(path: Path, compile_s: float, per_step: float, steps: int, every: int, val_every: int,
              slow: dict[int, float] | None = None) -> Path:
    """A metrics.csv as Lightning's CSVLogger writes it (one row per logging call): train/time
    after every ``every`` batches, the first interval ``compile_s`` longer, the intervals ending at
    the batch counts in ``slow`` longer by their value; val/loss after every ``val_every``."""
    rows, extra = [], compile_s
    for batches in range(every, steps + 1, every):
        extra += (slow or {}).get(batches, 0.0)
        rows.append({"step": batches - 1, "train/batches": batches, "train/time": extra + batches * per_step})
        if batches % val_every == 0:
            rows.append({"step": batches - 1, "val/loss": 4.0 / (1 + batches / 100)})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, ["epoch", "step", "train/batches", "train/time", "val/loss"])
        writer.writeheader()
        writer.writerows({"epoch": 0, **row} for row in rows)
    return path


def test_recipe_times_split_compile_from_the_steady_rate(tmp_path):
    # One slow interval (a checkpoint save, say) must not move the steady rate: it is the median.
    log = write_log(tmp_path / "metrics.csv", compile_s=25.0, per_step=0.02, steps=500, every=10, val_every=100,
                    slow={250: 3.0})
    times = recipe_times(read_metrics(log))
    assert times.steps == 500
    assert times.per_step == pytest.approx(0.02)
    assert times.compile == pytest.approx(25.0)
    assert times.steady == pytest.approx(500 * 0.02 + 3.0)
    assert [n for n, _, _ in times.val] == [100, 200, 300, 400, 500]
    # the training seconds at each evaluation leave the compile out (and hold the slow interval after step 250)
    assert [s for _, s, _ in times.val] == pytest.approx([2.0, 4.0, 9.0, 11.0, 13.0])


def test_recipe_times_needs_the_throughput_log(tmp_path):
    log = tmp_path / "metrics.csv"
    log.write_text("epoch,step,val/loss\n0,9,3.5\n")
    with pytest.raises(ValueError, match="no train/time"):
        recipe_times(read_metrics(log))
    write_log(log, compile_s=1.0, per_step=0.1, steps=10, every=10, val_every=10)
    with pytest.raises(ValueError, match="logged at 1 step"):
        recipe_times(read_metrics(log))


@pytest.mark.parametrize("goal_seconds, verdict", [(60, "met"), (5, "missed")])
def test_recipe_goal_verdict(tmp_path, monkeypatch, capsys, goal_seconds, verdict):
    # val loss 4 / (1 + n/100) reaches 1.47 first at n = 200 (1.333), after 200 * 0.1 = 20 s of training
    log = write_log(tmp_path / "metrics.csv", compile_s=40.0, per_step=0.1, steps=400, every=10, val_every=100)
    monkeypatch.setattr(sys, "argv", ["gpu_recipe.py", str(log), "--goal-seconds", str(goal_seconds)])
    recipe_main()
    out = capsys.readouterr().out
    assert f"goal: val loss <= 1.47 within {goal_seconds} s of training: {verdict}: 1.47 reached at step 200, 20.0 s" in out
    assert "compile time 40.0 s" in out and f"final val loss {4 / 5:.4f}" in out


def test_every_benchmark_compiles_each_of_its_models_with_compile():
    """``--compile`` is every benchmark's option, and each training step a benchmark builds passes
    it on (the zoo's and the peers' alike: compiled against compiled). A script that built one
    model's step without it would time eager against compiled."""
    p = argparse.ArgumentParser()
    add_run_args(p)
    assert p.parse_args(["--compile"]).compile is True and p.parse_args([]).compile is False
    calls = {}
    for script in sorted(BENCHMARKS.glob("*.py")):
        tree = ast.parse(script.read_text())
        found = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", None) == "make_step"]
        if script.name != "common.py" and found:
            calls[script.stem] = [any(k.arg == "compile" and ast.unparse(k.value) == "a.compile" for k in node.keywords)
                                  for node in found]
    assert len(calls) >= 10, sorted(calls)
    assert {name: flags for name, flags in calls.items() if not all(flags)} == {}

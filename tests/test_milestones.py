"""zoo.train.milestones: a recipe's validation milestones, and one warning when a run falls behind."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import hydra
import pytest
import torch
from hydra import compose, initialize_config_dir

from tests.conftest import ROOT
from zoo.train.milestones import RecipeMilestones, parse


def validate(callback: RecipeMilestones, step: int, sanity: bool = False, **metrics: float) -> None:
    """One validation's end at ``step`` with these metrics (names use __ for /)."""
    trainer = SimpleNamespace(global_step=step, sanity_checking=sanity,
                              callback_metrics={k.replace("__", "/"): torch.tensor(v) for k, v in metrics.items()})
    callback.on_validation_end(trainer, None)


def warnings_in(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "zoo.train.milestones"]


def test_an_on_track_run_gets_no_warning(caplog):
    cb = RecipeMilestones({2000: {"val/accuracy": 0.5}, 4000: {"val/loss": {"at_most": 1.0}}})
    with caplog.at_level(logging.INFO):
        for step, acc, loss in ((1000, 0.1, 3.0), (2000, 0.6, 2.0), (3000, 0.7, 1.5), (4000, 0.8, 0.9)):
            validate(cb, step, val__accuracy=acc, val__loss=loss)
    assert warnings_in(caplog) == []
    assert cb.pending == []  # both were checked


def test_falling_behind_warns_once_naming_the_milestone(caplog):
    cb = RecipeMilestones({2000: {"val/accuracy": 0.5}, 3000: {"val/accuracy": 0.9}})
    with caplog.at_level(logging.INFO):
        validate(cb, 1000, val__accuracy=0.2)  # before the milestone: nothing to check yet
        assert warnings_in(caplog) == []
        validate(cb, 2000, val__accuracy=0.45)
        validate(cb, 3000, val__accuracy=0.46)
        validate(cb, 4000, val__accuracy=0.47)
    [warning] = warnings_in(caplog)
    assert "val/accuracy = 0.45 at step 2,000" in warning and ">= 0.5 by step 2,000" in warning


def test_at_most_bounds_and_milestones_checked_at_the_first_validation_past_them(caplog):
    cb = RecipeMilestones({1500: {"val/wer": {"at_most": 0.4}}})
    with caplog.at_level(logging.INFO):
        validate(cb, 1000, val__wer=0.9)
        assert warnings_in(caplog) == []
        validate(cb, 2000, val__wer=0.41)  # the first validation after step 1,500
    [warning] = warnings_in(caplog)
    assert "val/wer <= 0.4 by step 1,500" in warning


def test_sanity_check_validation_is_not_a_milestone(caplog):
    cb = RecipeMilestones({1: {"val/accuracy": 0.9}})
    validate(cb, 0, sanity=True, val__accuracy=0.0)
    validate(cb, 5, sanity=True, val__accuracy=0.0)
    assert warnings_in(caplog) == [] and len(cb.pending) == 1


def test_a_metric_that_is_not_logged_fails_with_the_logged_names():
    cb = RecipeMilestones({1000: {"val/acc": 0.5}})
    with pytest.raises(ValueError, match=r"val/acc >= 0.5 by step 1,000.*not logged.*'val/accuracy'"):
        validate(cb, 1000, val__accuracy=0.6)


@pytest.mark.parametrize("milestones, message", [
    ({"soon": {"val/accuracy": 0.5}}, "step 'soon' is not an integer"),
    ({0: {"val/accuracy": 0.5}}, "step 0 must be >= 1"),
    ({100: 0.5}, "must map metric names to bounds"),
    ({100: {"val/loss": {"below": 1.0}}}, "at_least: x.*at_most: x"),
    ({100: {"val/loss": "low"}}, "bound 'low' is not a number"),
])
def test_bad_milestones_fail_naming_the_entry(milestones, message):
    with pytest.raises(ValueError, match=message):
        parse(milestones)


def test_recipe_milestones_config_keeps_the_default_callbacks_and_llava_recipe_turns_it_on():
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        default = compose("train")
        chosen = compose("train", overrides=["callbacks=recipe_milestones"])
        llava = compose("train", overrides=["experiment=llava_shapes_cpu"])
    assert set(default.callbacks) | {"recipe_milestones"} == set(chosen.callbacks)
    callback = hydra.utils.instantiate(llava.callbacks.recipe_milestones)
    assert isinstance(callback, RecipeMilestones)
    assert any(m.metric == "val/accuracy" and m.bound == "at_least" for m in callback.milestones)


@pytest.mark.parametrize("recipe", sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*_cpu.yaml")))
def test_every_cpu_recipe_states_milestones_inside_its_run(recipe):
    """Issue 20: each CPU recipe says which validation milestones a run on track passes, each
    at a step the run reaches, on a validation metric."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={recipe}"])
    assert "recipe_milestones" in cfg.callbacks, f"experiment={recipe} does not turn on callbacks=recipe_milestones"
    milestones = hydra.utils.instantiate(cfg.callbacks.recipe_milestones).milestones
    assert milestones, f"experiment={recipe} states no milestone"
    for m in milestones:
        assert m.step <= cfg.trainer.max_steps and m.metric.startswith("val/"), f"experiment={recipe}: {m}"

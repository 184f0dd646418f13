"""Studies (conf/study/*.yaml, ``python -m zoo compare study=NAME``): a study whose runs differ in
more than its axis is refused naming both; a tiny study runs end to end as one Hydra multirun and
its report (``python -m zoo report``) holds every run."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf, open_dict

from conftest import ROOT, TINY_GPT
from zoo.cli.commands import call
from zoo.cli.precheck import Refused, check, check_study
from zoo.cli.report import averaged, study_runs
from zoo.cli.study import check_one_axis, run_overrides, runs as study_runs_of, sweep
from zoo.config import compose_config
from zoo.train.run import objective


def shipped(name: str = "masks_shakespeare_cpu"):
    return compose_config([f"study={name}"], "compare").study


def test_the_shipped_masks_study_varies_its_mask_only():
    study = shipped()
    assert study.axis == "mask" and len(study.seeds) >= 2 and list(study["values"]) == [
        "causal", "local", "local_global", "strided"]
    check("compare", "compare", ["study=masks_shakespeare_cpu"])  # the precheck passes it


def test_the_shipped_knobs_study_varies_the_block_only_each_value_s_budget_ending_with_its_schedule():
    study = shipped("knobs_shakespeare_cpu")
    assert study.axis == "block" and len(study.seeds) >= 2 and list(study["values"]) == [
        "baseline", "post_ln", "swiglu", "rmsnorm"]
    check("compare", "compare", ["study=knobs_shakespeare_cpu"])  # one axis: the precheck passes it
    for value in study["values"]:  # SwiGLU's d_ff=341: its steps cost what GELU's 512 do, within 0.1%
        cfg = compose_config(run_overrides(study, value))
        with open_dict(cfg):
            cfg.dims = {"vocab_size": 65}  # tinyshakespeare's characters
        flops = objective(cfg).net.training_flops(cfg.data.batch_size, cfg.model.net.context)
        assert round(study.budget.flops / flops) == cfg.trainer.max_steps, value
        assert abs(study.budget.flops / flops / cfg.trainer.max_steps - 1) < 1e-3, value


def test_a_study_whose_runs_differ_in_two_axes_is_refused_naming_both():
    study = shipped()
    with open_dict(study):  # GPT-Neo's whole family, not only its mask: its Block has no q/k/v biases
        study["values"]["local_global"].append("model.net.block.bias_q=false")
    with pytest.raises(ValueError, match=r"values causal and local_global differ in mask and block, not only in "
                                         r"its axis mask: .*block \(model\.net\.block\.bias_q\)"):
        check_one_axis(study)
    with pytest.raises(Refused, match="differ in mask and block"):  # the command's precheck: exit 2, one line
        check_study(study)


def test_a_study_value_that_chooses_a_config_group_is_refused():
    study = shipped()
    with open_dict(study):
        study["values"]["local"] = ["model=gpt_neo"]
    with pytest.raises(ValueError, match="value local sets model=gpt_neo: a value sets keys"):
        check_one_axis(study)


@pytest.mark.slow  # 4 tiny runs, one Hydra multirun (~20 s)
def test_a_tiny_study_runs_end_to_end_and_its_report_holds_every_run(tmp_path, shakespeare_dir, monkeypatch):
    (tmp_path / "conf" / "study").mkdir(parents=True)
    study = {"name": "tiny", "axis": "mask", "seeds": [1, 2], "budget": {"tokens": 5 * 4 * 32}, "metric": "val/loss",
             "base": ["model=gpt", "trainer=cpu", *TINY_GPT, "trainer.max_steps=50", "trainer.val_check_interval=2",
                      "test=false", "model.sample_tokens=0"],
             "values": {"causal": [], "local": ["++model.net.mask={_target_:zoo.nn.masks.LocalMask,window:8,causal:true}"]}}
    (tmp_path / "conf" / "study" / "tiny.yaml").write_text(OmegaConf.to_yaml(study))
    monkeypatch.setenv("ZOO_DATA_DIR", str(shakespeare_dir))
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    call("compare", [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "study=tiny", f"out={out}"])
    found = averaged(study_runs(out)[1])
    assert list(found) == ["causal", "local"] and all(sorted(r.seed for r in found[v]) == [1, 2] for v in found)
    for group in found.values():
        for run in group:
            spent = json.loads((run.dir / "budget.json").read_text())
            assert spent["steps"] == 5 and spent["spent"]["tokens"] == 5 * 4 * 32
            assert OmegaConf.load(run.dir / "config.yaml").model.net.mask._target_.endswith(
                "CausalMask" if run.dir.parent.name == "causal" else "LocalMask")
    report = (out / "report.md").read_text()
    first_table = report[:report.index("## Against the baseline")]  # then each value paired with causal
    rows = [line for line in first_table.splitlines() if line.startswith("| causal") or line.startswith("| local")]
    assert len(rows) == 2 and all(" | 1, 2 |" in row for row in rows)
    assert "| local | 1, 2 | " in report[report.index("## Against the baseline, causal"):]
    for row, value in zip(rows, found):
        finals = sorted(r.series["val/loss"][-1][1] for r in found[value])  # the last validation, as logged
        assert f"{finals[0]:.4f} / " in row and f" / {finals[-1]:.4f}" in row
    for picture in ("val_vs_flops.png", "val_vs_seconds.png"):
        assert (out / picture).stat().st_size > 1000


def test_compare_without_a_study_is_refused_naming_the_choices():
    with pytest.raises(Refused, match="no study; name one: study=NAME, NAME one of conf/study/.*masks_shakespeare_cpu"):
        check("compare", "compare", [])


@pytest.mark.slow
@pytest.mark.parametrize("arguments, said", [
    (["diff", "gtp", "mistral"], "a=gtp: model=gtp: no such model (did you mean gpt?)"),
    (["compare", "study=masks_shakspeare_cpu"], "no such study (did you mean masks_shakespeare_cpu?)"),
    (["report", "dri=outputs/masks"], "dri: unknown key (did you mean dir?)"),
])
def test_the_new_commands_refuse_a_misspelling_within_5_s(tmp_path, arguments, said):
    import os
    import subprocess
    import sys
    import time

    from conftest import ROOT

    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "zoo", *arguments], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))
    assert out.returncode in (1, 2) and said in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert time.monotonic() - started < 5 and not any(tmp_path.iterdir())


def test_a_launcher_hydra_does_not_have_is_refused_before_the_study_folder_exists():
    with pytest.raises(Refused, match="launcher=jobllib: Hydra has no such launcher here"):
        check("compare", "compare", ["study=masks_shakespeare_cpu", "launcher=jobllib"])
    check("compare", "compare", ["study=masks_shakespeare_cpu", "launcher=basic"])  # Hydra's own


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "conf" / "study").glob("*.yaml")))
def test_each_shipped_study_s_runs_are_the_configs_its_check_compares(name, tmp_path):
    # The sweep gives each value as a config-group option and the base on the command line, which
    # Hydra applies last: a key both set (vision_patch's patch size) must still be the value's.
    study = shipped(name)
    command = sweep(study, tmp_path, {run: {} for run in study_runs_of(study)})
    line = [a for a in command[command.index("--multirun") + 1:] if not a.startswith(("+study_run=", "hydra."))]
    for value, seed in study_runs_of(study):
        run = compose_config([f"hydra.searchpath=[file://{tmp_path / 'configs'}]", f"+study_run={value}/seed_{seed}",
                              *line])
        checked = compose_config([*run_overrides(study, value), f"seed={seed}"])
        with open_dict(run):
            del run["study"]
        assert OmegaConf.to_container(run) == OmegaConf.to_container(checked), value

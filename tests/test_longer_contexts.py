"""Length extrapolation (``eval_contexts``): a model trained at context L evaluated at 2L equals, for
rotary, ALiBi, sinusoidal and no positions, the same weights in a model built at 2L, whose val loss
over the windows is computed here by hand; learned positions are refused (n/a) in one line; a tiny
study's report holds ``val/loss@N`` (at the training context: its final val/loss) and learned's n/a."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from conftest import TINY_GPT
from exactness import randomise
from zoo.cli.commands import call
from zoo.cli.report import averaged, study_runs
from zoo.data.windows import RandomWindows
from zoo.models.longer import longer_context
from zoo.models.model import Model
from zoo.nn.alibi import ALiBi
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import CausalMask
from zoo.nn.positions import TableEnd
from zoo.train.longer_contexts import val_loss

V, D, H, L = 29, 32, 2, 16
KINDS = {  # positions added to the tokens, and the model's knobs
    "rotary": ("none", lambda: {"rotary": True}),
    "rotary per layer": ("none", lambda: {"rotary": True, "rotary_base": [500.0, 10000.0], "rotary_fraction": 0.5}),
    "alibi": ("none", lambda: {"bias": ALiBi(H)}),
    "sinusoidal": ("sinusoidal", dict),
    "none": ("none", dict),
}


def gpt(kind: str, context: int) -> Model:
    positions, knobs = KINDS.get(kind, (kind, dict))
    return Model(TokenEmbedder(V, D, context, positions=positions), CausalMask(),
                 BlockConfig(d_model=D, n_heads=H, d_ff=2 * D), 2, LMHead(D, V), context, **knobs())


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_model_at_twice_its_context_is_the_same_weights_built_at_that_context(kind):
    trained = randomise(gpt(kind, L), seed=1)
    windows = RandomWindows(torch.randint(V, (400,), generator=torch.Generator().manual_seed(0)), 2 * L, 6, seed=3)
    longer = longer_context(trained, 2 * L)
    # By hand: the same weights in a model built at 2L (its tables made there), every window's every target.
    built = gpt(kind, 2 * L)
    missing, unexpected = built.load_state_dict(
        {k: v for k, v in trained.state_dict().items() if k != "embedder.positions.weight"}, strict=False)
    assert not unexpected and set(missing) <= {"embedder.positions.weight"}
    inputs, targets = (torch.stack(column) for column in zip(*(windows[i] for i in range(len(windows)))))
    by_hand = F.cross_entropy(built.eval()(inputs).flatten(0, 1), targets.flatten()).item()
    assert val_loss(longer, windows, batch_size=4, device=torch.device("cpu")) == pytest.approx(by_hand, rel=1e-5)
    # The first L positions are the trained model's own, and the trained model is unchanged (still refuses 2L).
    torch.testing.assert_close(longer(inputs[:, :L]), trained.eval()(inputs[:, :L]), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=f"longer than the model's context of {L}"):
        trained(inputs)


def test_learned_positions_are_refused_past_their_table_in_one_line():
    with pytest.raises(TableEnd, match=f"^a learned table of {L}$"):
        longer_context(gpt("learned", L), 2 * L)
    model = gpt("learned", L)
    assert longer_context(model, L) is model  # a context it reads already: the model itself


@pytest.mark.slow  # one tiny run through zoo compare (~10 s unloaded)
def test_a_tiny_study_reports_the_val_loss_at_longer_contexts_and_learned_as_na(tmp_path, shakespeare_dir,
                                                                                monkeypatch):
    (tmp_path / "conf" / "study").mkdir(parents=True)
    study = {"name": "tiny", "axis": "positions", "seeds": [1], "budget": {"tokens": 4 * 4 * 32}, "metric": "val/loss",
             "base": ["model=gpt", "trainer=cpu", *TINY_GPT, "trainer.max_steps=4", "trainer.val_check_interval=2",
                      "test=false", "model.sample_tokens=0", "eval_contexts=[64,32]"],
             "values": {"learned": []}}
    (tmp_path / "conf" / "study" / "tiny.yaml").write_text(OmegaConf.to_yaml(study))
    monkeypatch.setenv("ZOO_DATA_DIR", str(shakespeare_dir))
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    call("compare", [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "study=tiny", f"out={out}"])
    (run,) = averaged(study_runs(out)[1])["learned"]
    measured = json.loads((run.dir / "contexts.json").read_text())
    assert measured["context"] == 32 and measured["eval"]["64"] == {"n/a": "a learned table of 32"}
    # At the training context: the validation's own windows and loss (Lightning's last val/loss), logged.
    at_32 = measured["eval"]["32"]["val/loss"]
    assert at_32 == pytest.approx(run.series["val/loss"][-1][1], rel=1e-5)
    assert run.series["val/loss@32"][-1][1] == pytest.approx(at_32) and "val/loss@64" not in run.series
    report = (out / "report.md").read_text()
    assert "| val/loss@32 min / mean / max | val/loss@64 min / mean / max |" in report
    assert f"| {at_32:.4f} / {at_32:.4f} / {at_32:.4f} | n/a (a learned table of 32) |" in report

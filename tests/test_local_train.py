"""``python train.py model=mistral|gpt_neo data=tinyshakespeare`` trains: a few steps each,
run as a user would, through sliding-window layers and their sample decoded with the rolling cache."""

from __future__ import annotations

import pytest

from conftest import run_train


@pytest.mark.slow  # two train.py runs, ~20 s each
@pytest.mark.parametrize("model", ["mistral", "gpt_neo"])
def test_train_a_windowed_family_on_shakespeare_few_steps(tmp_path, shakespeare_dir, model):
    run = tmp_path / "run"
    out = run_train(run, shakespeare_dir, f"model={model}", "data=tinyshakespeare", "data.check=false",
                    "model.net.n_layers=2", "data.batch_size=2", "data.val_batches=1", "trainer.max_steps=3",
                    "trainer.val_check_interval=3", "++model.sample_tokens=40")
    assert (run / "checkpoints" / "last.ckpt").is_file(), out.stdout[-2000:]

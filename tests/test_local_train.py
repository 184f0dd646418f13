"""``python train.py model=mistral|gpt_neo|gpt_sparse data=tinyshakespeare`` trains: a few steps each,
as a user would; then ``generate.py`` decodes past the window from the checkpoint (its config
passes the allow-list, its sliding-window layers decode with the rolling cache)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, run_train


@pytest.mark.slow  # three train.py runs, ~35 s each
@pytest.mark.parametrize("model", ["mistral", "gpt_neo", "gpt_sparse"])
def test_train_a_windowed_family_on_shakespeare_then_generate_past_the_window(tmp_path, shakespeare_dir, model):
    run = tmp_path / "run"
    run_train(run, shakespeare_dir, f"model={model}", "data=tinyshakespeare", "data.check=false",
              "model.net.n_layers=2", "data.batch_size=2", "data.val_batches=1", "trainer.max_steps=3",
              "trainer.val_check_interval=3", "++model.sample_tokens=40")
    gen = subprocess.run([sys.executable, "generate.py", f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
                          "prompt=CITIZEN", "max_new_tokens=80"], cwd=ROOT, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert gen.stdout.startswith("CITIZEN") and len(gen.stdout) >= len("CITIZEN") + 80  # 80 > the window of 32

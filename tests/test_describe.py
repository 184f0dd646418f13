"""The generated family table, the mask pictures and the attention-map inspection path."""

import re

import pytest
import torch

from conftest import ROOT
from exactness import assert_matches
from zoo.viz.attention_maps import self_attention_weights
from zoo.convert.common import build_net
from zoo.cli.describe import table
from zoo.models.presets import model_names
from zoo.viz.mask_pictures import write_mask_pictures


def test_readme_family_table_is_the_generated_one():
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- family-table -->\n(.*?)\n<!-- /family-table -->", readme, re.S)
    assert found, "README.md has no <!-- family-table --> section"
    assert found.group(1).strip() == table().strip(), "README table is stale: run python -m zoo describe"


def test_mask_pictures_are_written(tmp_path):
    paths = write_mask_pictures(tmp_path)
    assert sorted(p.name for p in paths) == sorted([f"mask_{m}.png" for m in model_names()] + ["mask_families.png"])
    assert all(p.stat().st_size > 1000 for p in paths)


def test_inspection_path_gives_the_same_outputs():
    net = build_net("gpt", ["model.net.n_layers=2", "model.net.context=16", "model.net.block.d_model=32",
                            "model.net.block.n_heads=4"], {"vocab_size": 50}).eval()
    x = torch.randint(0, 50, (1, 16))
    with torch.no_grad():
        fast = net(x)
    weights = self_attention_weights(net, x)
    for m in net.modules():  # the inspection path, run again to compare its outputs
        if hasattr(m, "keep_weights"):
            m.keep_weights = True
    with torch.no_grad():
        slow = net(x)
    assert_matches(slow, fast, what="inspection path")
    assert len(weights) == 2 and weights[0].shape == (1, 4, 16, 16)
    assert torch.allclose(weights[0].sum(-1), torch.ones(1, 4, 16), atol=1e-5)
    assert torch.all(weights[1][0, :, 0, 1:] == 0)  # causal: the first query sees only itself


@pytest.mark.slow  # builds every preset twice (~1 min)
def test_the_describe_command_prints_both_tables():
    """``python -m zoo describe`` as a user runs it (inside its Hydra app, which the table of
    model x data composes its configs in)."""
    import subprocess
    import sys

    from zoo.train.compat import model_data_table

    done = subprocess.run([sys.executable, "-m", "zoo", "describe"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert table().strip() in done.stdout and model_data_table().strip() in done.stdout


def test_the_model_data_table_composes_inside_a_running_command():
    """`python -m zoo describe` prints it from inside its Hydra app (initialised already): composing
    the configs must not initialise Hydra again."""
    from hydra import initialize_config_dir

    from zoo.convert.common import CONF_DIR
    from zoo.train.compat import model_data_table

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        inside = model_data_table()
    assert "| yolos | coco, shapes_detection |" in inside
    assert all(re.search(rf"[| ]{model}[,| ]", inside) for model in model_names())  # every preset has its row


# The windowed and sparse families at tiny sizes: the attention maps' inspection path must show
# each layer's own mask (nothing where it hides) and give the fast path's outputs.
TINY = ["model.net.context=32", "model.net.block.d_model=32", "model.net.block.n_heads=4"]
MASKED_FAMILIES = {
    "mistral": ([*TINY, "model.net.n_layers=2", "model.net.block.n_kv_heads=2", "model.net.mask.window=8"], "tokens"),
    "gpt_neo": ([*TINY, "model.net.n_layers=2", "model.net.mask.masks.1.window=8"], "tokens"),
    "modernbert": ([*TINY, "model.net.n_layers=3", "model.net.mask.masks.1.window=8"], "tokens"),
    "gpt_sparse": ([*TINY, "model.net.n_layers=2"], "tokens"),
    "bigbird": ([*TINY, "model.net.n_layers=2", "model.net.mask.block_size=2", "model.net.mask.n_random=1"], "tokens"),
    "vitdet": (["model.net.n_layers=3", "model.net.block.d_model=32", "model.net.block.n_heads=4"], "images"),
}


@pytest.mark.parametrize("model", sorted(MASKED_FAMILIES))
def test_attention_maps_of_windowed_and_sparse_families_show_each_layers_mask(model):
    overrides, kind = MASKED_FAMILIES[model]
    dims = {"vocab_size": 50, "num_classes": 3, "image_size": 32, "channels": 3}
    torch.manual_seed(0)
    net = build_net(model, overrides, dims).eval()
    x = torch.randint(0, 50, (1, 32)) if kind == "tokens" else torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        fast = net(x)
    weights = self_attention_weights(net, x)
    with torch.no_grad():
        for m in net.modules():
            if hasattr(m, "keep_weights"):
                m.keep_weights = True
        slow = net(x)
    assert_matches(slow, fast, what=f"{model}: inspection path")
    (tower,) = net.towers.values()
    length = weights[0].shape[-1]
    assert len(weights) == len(tower.layer_masks)
    hidden = 0
    for i, (w, layer_mask) in enumerate(zip(weights, tower.layer_masks)):
        mask, causal = layer_mask(length, length, x.device)
        seen = torch.ones(length, length, dtype=torch.bool) if mask is None else (
            mask if mask.dtype == torch.bool else mask > float("-inf"))
        if causal:
            seen = seen & torch.ones(length, length, dtype=torch.bool).tril()
        seen = seen.reshape(length, length)
        hidden += int((~seen).sum())
        assert torch.all(w[0][:, ~seen] == 0), f"{model} layer {i}: attention where its mask hides"
        assert torch.allclose(w[0].sum(-1), torch.ones(w.shape[1], length), atol=1e-5)
    assert hidden > 0, f"{model}: no layer's mask hides anything at this length (the test would show nothing)"

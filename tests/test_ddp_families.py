"""Every family trains a few steps under 2-process CPU DDP (trainer=ddp_cpu), as a user runs it."""

from __future__ import annotations

import pytest
import torch

from bert_wikitext_files import write_wikitext
from conftest import run_train

pytestmark = pytest.mark.slow  # multi-process runs: in CI (make test-all), not in `make test`

COMMON = ["trainer=ddp_cpu", "trainer.devices=2", "trainer.max_steps=3", "trainer.val_check_interval=3",
          "trainer.limit_val_batches=2", "test=false", "optim.warmup_steps=1"]
TINY_BLOCK = ["model.net.block.d_model=32", "model.net.block.n_heads=2"]


def _bert(data):
    write_wikitext(data)
    return ["model=bert", "data=wikitext", "model.net.n_layers=2", "model.net.context=32", *TINY_BLOCK,
            "data.batch_size=4", "data.seq_len=32", "data.vocab_size=120"]


def _vit(data):
    from test_vit_data import make_image_folder

    make_image_folder(data, {"train": 4, "test": 2})
    return ["model=vit", "data=cifar10", "model.net.n_layers=1", *TINY_BLOCK, "data.batch_size=8", "data.val_size=8"]


def _transformer(data):
    from test_transformer_multi30k import write_corpus

    write_corpus(data)
    return ["model=transformer", "data=multi30k", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
            *TINY_BLOCK, "data.batch_size=8", "data.vocab_size=120", "model.decoding.max_new_tokens=4"]


def _t5(data):
    write_wikitext(data)
    return ["model=t5", "data=wikitext", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
            *TINY_BLOCK, "data.batch_size=4", "data.seq_len=32", "data.vocab_size=120"]


def _whisper(data):
    from test_whisper_data import write_fsdd

    write_fsdd(data, speakers=("alice",), takes=range(8))
    return ["model=whisper", "data=fsdd", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", *TINY_BLOCK,
            "data.batch_size=4", "data.val_takes=2", "data.test_passes=1", "model.decoding.max_new_tokens=4",
            "data.num_workers=0"]


def _llava(data):  # shapes_vqa is generated: no files
    from test_llava import TINY

    # The vision tower is read at its second-to-last layer (LLaVA's choice) and keeps only the
    # layers it reads, so every parameter gets a gradient: plain DDP, like the other families.
    return ["model=llava", "data=shapes_vqa", "data.batch_size=4", "data.val_size=8", "data.test_size=8", *TINY]


def _vivit(data):  # moving_shapes is generated: no files
    return ["model=vivit", "data=moving_shapes", "model.net.n_layers=1", *TINY_BLOCK, "data.batch_size=8",
            "data.train_size=64", "data.val_size=16", "data.test_size=16"]


def _yolos(data):  # shapes_detection is generated: no files
    return ["model=yolos", "data=shapes_detection", "model.net.n_layers=1", *TINY_BLOCK, "data.batch_size=8",
            "data.train_size=64", "data.val_size=16", "data.test_size=16"]


def _videomae(data):
    return ["model=videomae", *_vivit(data)[1:]]


def _mistral(data):  # a sliding window shorter than the sequence, the rolling cache at the end-of-run sample
    from conftest import write_shakespeare

    write_shakespeare(data)
    return ["model=mistral", "data=tinyshakespeare", "data.check=false", "model.net.n_layers=2", *TINY_BLOCK,
            "model.net.block.n_kv_heads=1", "data.batch_size=4", "data.val_batches=1", "++model.sample_tokens=40"]


def _bigbird(data):  # block-sparse attention on sequences longer than its full-attention limit
    bert = [o for o in _bert(data) if not o.startswith(("model=", "model.net.context=", "data.seq_len="))]
    return ["model=bigbird", *bert, "model.net.context=64", "data.seq_len=64", "model.net.mask.block_size=4",
            "model.net.mask.n_random=1"]


def _modernbert(data):  # global and local layers, each kind on its own rotary base
    bert = [o for o in _bert(data) if not o.startswith(("model=", "model.net.n_layers="))]
    return ["model=modernbert", *bert, "model.net.n_layers=3", "model.net.mask.masks.1.window=8"]


FAMILIES = {"bert": _bert, "modernbert": _modernbert, "vit": _vit, "transformer": _transformer, "t5": _t5, "whisper": _whisper, "llava": _llava,
            "vivit": _vivit, "videomae": _videomae, "yolos": _yolos, "mistral": _mistral, "bigbird": _bigbird}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_trains_under_ddp_cpu(family, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    overrides = FAMILIES[family](data)
    run = tmp_path / "run"
    out = run_train(run, data, *COMMON, *overrides)
    log = out.stdout + out.stderr
    for rank in (0, 1):  # two processes really took part
        assert f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in log, f"{family}: rank {rank} never started"
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 3, f"{family}: {ckpt['global_step']} optimizer steps, not trainer.max_steps=3"
    assert ckpt["optimizer_states"][0]["state"], f"{family}: the optimizer holds no state: nothing was trained"
    bad = [name for name, value in ckpt["state_dict"].items() if value.is_floating_point() and not value.isfinite().all()]
    assert not bad, f"{family}: non-finite weights after 3 DDP steps: {bad[:5]}"

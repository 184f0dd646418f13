"""LoRA through peft (zoo/nn/lora.py): adapters on the Block's named linear layers only, the
rest frozen; a fresh adapter changes nothing; a LoRA fine-tune of a zoo checkpoint trains only
the adapters, saves them, reloads them from the checkpoint, and merges into plain weights that
give the adapted logits; targets that name nothing are refused, naming what there is."""

from __future__ import annotations

import pytest
import torch

from conftest import run_train
from exactness import assert_matches, randomise
from zoo.convert.common import build_net
from zoo.nn import lora
from zoo.objectives.loading import load
from zoo.checkpoint import net_state

pytest.importorskip("peft", reason="LoRA needs the lora extra (pip install -e '.[lora]')")


def tiny_gpt():
    torch.manual_seed(0)
    return randomise(build_net("gpt", ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=2"],
                               {"vocab_size": 40}).eval())


def test_adapters_go_on_the_named_block_layers_only_and_start_as_a_no_op():
    net = tiny_gpt()
    ids = torch.randint(0, 40, (2, 16))
    with torch.no_grad():
        before = net(ids)
    lora.apply(net, r=4, alpha=8, targets=["q", "v", "fc_out"])
    trainable = sorted({n.split(".lora_")[0] for n, p in net.named_parameters() if p.requires_grad})
    assert trainable == [f"stack.blocks.{i}.{m}" for i in range(2) for m in ("attn.q", "attn.v", "ffn.fc_out")]
    assert all("lora_" in n for n, p in net.named_parameters() if p.requires_grad)
    n_trainable, total = lora.counts(net)
    assert n_trainable == 2 * (4 * (32 + 32) * 2 + 4 * (128 + 32))  # r x (in + out) per adapted layer
    with torch.no_grad():
        assert_matches(net(ids), before, what="a fresh adapter (B = 0)")


def test_merge_gives_plain_layers_and_the_adapted_logits():
    net = lora.apply(tiny_gpt(), r=4, alpha=8, targets=["q", "k", "out"])
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)  # a trained adapter
        ids = torch.randint(0, 40, (2, 16))
        adapted = net(ids)
        merged = lora.merge(net)
        assert set(merged.state_dict()) == set(tiny_gpt().state_dict())  # the original names again
        assert_matches(merged(ids), adapted, what="merged LoRA")


def test_targets_that_name_nothing_are_refused():
    with pytest.raises(ValueError, match=r"targets=\['query'\]: \['query'\]; LoRA targets the Block's linear layers"):
        lora.apply(tiny_gpt(), targets=["query"])
    with pytest.raises(ValueError, match=r"targets \['gate'\] match no layer of this network \(it has \['fc_in', "
                                         r"'fc_out', 'k', 'out', 'q', 'v'\]\)"):
        lora.apply(tiny_gpt(), targets=["gate"])  # GPT's feed-forward is not gated
    with pytest.raises(ValueError, match=r"unknown keys \['rank'\]"):
        lora.settings({"rank": 4})


@pytest.mark.slow  # two train.py runs, ~30 s each
def test_lora_fine_tune_of_a_zoo_checkpoint(tmp_path, shakespeare_dir):
    tiny = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.check=false",
            "data.batch_size=4", "data.val_batches=1", "trainer.max_steps=3", "trainer.val_check_interval=3",
            "++model.sample_tokens=5", "test=false"]
    run_train(tmp_path / "base", shakespeare_dir, *tiny)
    base = tmp_path / "base" / "checkpoints" / "last.ckpt"
    out = run_train(tmp_path / "lora", shakespeare_dir, *tiny, f"model.init_from={base}",
                    "model.lora={r: 4, alpha: 8, targets: [q, v]}")
    assert "LoRA" in out.stdout + out.stderr and "parameters train" in out.stdout + out.stderr
    tuned = load(tmp_path / "lora" / "checkpoints" / "last.ckpt")  # rebuilds the adapters, then loads them
    state, start = tuned.net.state_dict(), net_state(base)
    for name, value in start.items():  # every base weight is where the pre-training left it
        stored = name.replace("attn.q.", "attn.q.base_layer.").replace("attn.v.", "attn.v.base_layer.")
        assert torch.equal(state[stored], value), name
    assert any(state[n].abs().max() > 0 for n in state if "lora_B" in n)  # the adapters trained
    # exported, the adapters are merged: transformers' GPT-2 gives the adapted model's logits
    from transformers import AutoModelForCausalLM

    from zoo.cli.commands import call

    call("export", [f"ckpt={tmp_path / 'lora' / 'checkpoints' / 'last.ckpt'}", f"out={tmp_path / 'hf'}"])
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, hf.config.vocab_size, (2, 16))
    with torch.no_grad():
        assert_matches(hf(ids).logits, tuned.net.eval()(ids), what="merged LoRA export")

"""The Block presets of the new knobs (conf/block/qwen3, gemma2, gemma3, olmo2) build over the
CPU-sized Llama model and train; soft-capped attention runs the same under every backend; the
explicit attention path gives a query that sees no key SDPA's zeros, not NaN."""

from __future__ import annotations

import math

import hydra
import pytest
import torch
from omegaconf import open_dict

from exactness import assert_matches, randomise
from zoo.config import compose_config
from zoo.nn import flex
from zoo.nn.attention import attention

PRESETS = ["qwen3", "gemma2", "gemma3", "olmo2"]
VOCAB = 50
# Gemma's model around its Block: sqrt(d) embedding, local / global layers (global with its own
# rotary base for Gemma 3), final logits capped at 30, tied head
GEMMA_NET = ["+model.net.embedder.scale=true", "+model.net.head.softcap=30.0", "model.net.tie_embeddings=true"]
GEMMA_MASK = {"_target_": "zoo.nn.masks.PerLayer",
              "masks": [{"_target_": "zoo.nn.masks.LocalMask", "window": 7}, {"_target_": "zoo.nn.masks.CausalMask"}]}


def config(preset: str, *overrides: str):
    cfg = compose_config(["model=llama", f"block@model.net.block={preset}",
                          *(GEMMA_NET if preset.startswith("gemma") else []), *overrides])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": VOCAB}
        if preset.startswith("gemma"):
            cfg.model.net.mask = GEMMA_MASK
            cfg.model.net.rotary_base = [10000.0, 1e6] if preset == "gemma3" else 10000.0
    return cfg


def net_of(preset: str, *overrides: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return hydra.utils.instantiate(config(preset, *overrides).model.net)


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_builds_its_knobs_and_a_few_steps_lower_the_loss(preset):
    net = net_of(preset)
    block = net.blocks[0]
    knobs = {"qwen3": lambda: block.attn.q_norm.weight.shape == (block.attn.d_head,),
             "gemma2": lambda: block.attn.softcap == 50.0 and type(block.ffn_out_norm).__name__ == "UnitOffsetRMSNorm",
             "gemma3": lambda: block.attn.softcap is None and type(block.attn.q_norm).__name__ == "UnitOffsetRMSNorm",
             "olmo2": lambda: isinstance(block.ffn_norm, torch.nn.Identity)
             and block.attn.q_norm.weight.shape == (block.attn.n_heads * block.attn.d_head,)}
    assert knobs[preset]()
    tokens = torch.randint(0, VOCAB, (4, 33), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):  # one batch over and over: a model that learns fits it
        loss = torch.nn.functional.cross_entropy(net(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses


@pytest.mark.slow  # ~5 s: the whole Lightning run; the knobs' own training is the fast test above
def test_train_py_runs_a_gemma_shaped_model_on_shakespeare(tmp_path):
    from zoo.train.run import train

    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text("First Citizen:\nBefore we proceed.\n" * 200)
    cfg = compose_config([
        "model=llama", "block@model.net.block=gemma2", *GEMMA_NET, "data=tinyshakespeare", "data.check=false",
        f"paths.data_dir={tmp_path / 'data'}", f"paths.output_dir={tmp_path / 'out'}", "trainer.max_steps=3",
        "trainer.val_check_interval=3", "trainer.limit_val_batches=1", "data.val_batches=1", "data.batch_size=2",
        "+trainer.enable_progress_bar=false", "~callbacks.progress_bar",
    ])
    with open_dict(cfg):
        cfg.model.net.mask = GEMMA_MASK
    metrics = train(cfg)
    assert metrics["test/loss"] < math.log(len(set("First Citizen:\nBefore we proceed.\n")))


def test_soft_capped_attention_is_the_same_under_every_backend():
    """The block backend trains (outputs and gradients) and FlexAttention infers what the dense path
    computes, soft-capping included, under a window and padding."""
    tokens = torch.randint(0, VOCAB, (2, 45), generator=torch.Generator().manual_seed(1))
    real = torch.ones(2, 45, dtype=torch.bool)
    real[1, 38:] = False
    nets = {b: randomise(net_of("gemma2", f"model.net.attention_backend={b}", "model.net.block.attn_softcap=1.5"))
            for b in ["sdpa", "blocks"] + (["flex"] if flex.available() else [])}
    outs, grads = {}, {}
    for backend, net in nets.items():
        if backend == "flex":
            with torch.no_grad():
                outs[backend] = net(tokens, key_padding=real)
            continue
        outs[backend] = net(tokens, key_padding=real)
        (outs[backend][real].square().mean()).backward()
        grads[backend] = net.blocks[0].attn.q.weight.grad
    uncapped = randomise(net_of("gemma2", "model.net.block.attn_softcap=null"))(tokens, key_padding=real)
    with pytest.raises(AssertionError):  # the cap acts on these scores
        assert_matches(uncapped, outs["sdpa"], real[..., None])
    for backend in nets:
        assert_matches(outs[backend], outs["sdpa"], real[..., None], what=f"{backend} outputs")
    assert_matches(grads["blocks"], grads["sdpa"], what="blocks gradients")


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_a_query_that_sees_no_key_gets_zeros_on_the_explicit_path_as_under_sdpa(softcap):
    """A padded query whose window holds only padding: SDPA gives it zeros; the explicit path (attention
    maps, soft-capping) did give NaN, which the next layer spread to every query of the row."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    mask[4:, :] = False  # the last two queries see nothing
    explicit, weights = attention(q, k, v, mask=mask, return_weights=True, softcap=softcap)
    assert not explicit.isnan().any() and (weights[..., 4:, :] == 0).all()
    if softcap is None:
        assert_matches(explicit, attention(q, k, v, mask=mask)[0], what="explicit path")

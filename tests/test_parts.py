"""A container hands its embedder and head their width and dropout (zoo.nn.parts): partials take
them, a part's own value wins, built modules and checkpoints that state them still build."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from omegaconf import OmegaConf, open_dict

from exactness import randomise
from zoo.config import compose_config
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.parts import build_embedder, build_head, with_dims
from zoo.objectives.loading import load
from zoo.train.run import objective

DIMS = {"vocab_size": 40, "eos_id": 1, "bos_id": 2, "pad_id": 0}


def test_a_partial_takes_the_block_s_width_and_dropout_unless_it_sets_its_own():
    block = BlockConfig(d_model=24, n_heads=2, dropout=0.25)
    embedder = build_embedder(partial(TokenEmbedder, vocab_size=40, max_len=16), block)
    assert embedder.tokens.weight.shape == (40, 24) and embedder.dropout.p == 0.25
    own = build_embedder(partial(TokenEmbedder, vocab_size=40, max_len=16, dropout=0.0), block)
    assert own.dropout.p == 0.0  # GPT-Neo's embedding dropout is its own, not its Block's
    head = build_head(partial(LMHead, vocab_size=40), 24)
    assert head.proj.weight.shape == (40, 24)
    built = TokenEmbedder(vocab_size=40, d_model=8, max_len=16)
    assert build_embedder(built, block) is built  # a built module is taken as it is
    with pytest.raises(TypeError, match="a partial of one"):
        build_head({"_target_": "zoo.nn.heads.LMHead"}, 24)


def test_with_dims_states_what_each_container_hands_and_keeps_what_a_part_sets():
    net = {"block": {"d_model": 16, "dropout": 0.1}, "embedder": {"_partial_": True, "dropout": 0.0},
           "head": {"_partial_": True, "vocab_size": 5}, "mask": {"_target_": "zoo.nn.masks.NoMask"},
           "vision": {"block": {"d_model": 8, "dropout": 0.0}, "embedder": {"_partial_": True}}}
    got = with_dims(net)
    assert got["embedder"] == {"d_model": 16, "dropout": 0.0, "_partial_": True}
    assert got["head"] == {"d_model": 16, "_partial_": True, "vocab_size": 5}
    assert got["vision"]["embedder"] == {"d_model": 8, "dropout": 0.0, "_partial_": True}
    staged = {"block": {"d_model": 16}, "depths": [2, 2], "head": {"_partial_": True}}
    assert with_dims(staged)["head"] == {"_partial_": True}  # Swin's head reads the last stage's width


@pytest.mark.parametrize("model", ["gpt", "t5"])
def test_a_checkpoint_that_states_the_dims_in_its_parts_loads_the_same_net(tmp_path, model):
    """Checkpoints written before the dimensions flowed down store each part built, its width and
    dropout stated: they load, and give the outputs of the same weights under today's config."""
    cfg = compose_config([f"model={model}", "paths.output_dir=unused"])
    with open_dict(cfg):
        cfg.dims = DIMS
    torch.manual_seed(0)
    trained = objective(cfg)
    randomise(trained.net, seed=1)  # every parameter, norms and biases too, away from its init
    stored = dict(trained.hparams)
    net = OmegaConf.to_container(OmegaConf.create(stored["net"]), resolve=True)
    former = {key: {k: v for k, v in value.items() if k != "_partial_"} if isinstance(value, dict) else value
              for key, value in with_dims(net).items()}
    assert any("d_model" in v for v in former.values() if isinstance(v, dict) and v is not former["block"])
    paths = {}
    for name, net_cfg in (("today", net), ("former", former)):
        paths[name] = tmp_path / f"{name}.ckpt"
        torch.save({"zoo_objective": "lm" if model == "gpt" else "seq2seq",
                    "hyper_parameters": stored | {"net": net_cfg}, "state_dict": trained.state_dict()}, paths[name])
    today, former_net = (load(paths[name]).net for name in ("today", "former"))
    ids = torch.randint(3, DIMS["vocab_size"], (2, 9))  # odd length; row 1 ends in 2 padding positions
    real = torch.ones(2, 9, dtype=torch.bool)
    real[1, -2:] = False
    with torch.no_grad():
        if model == "gpt":
            a, b = today(ids, real), former_net(ids, real)
        else:
            a, b = today(ids, ids[:, :5], real, real[:, :5]), former_net(ids, ids[:, :5], real, real[:, :5])
    assert torch.equal(a, b)
    assert isinstance(former_net.embedder if model == "gpt" else former_net.encoder.embedder, TokenEmbedder)

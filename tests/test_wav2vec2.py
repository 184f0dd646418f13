"""Exactness: a tiny randomised Hugging Face Wav2Vec2ForCTC / HubertForCTC, converted, gives the
same logits (padded audio of different lengths, both encoder layouts), and the same CTC loss."""

from __future__ import annotations

import pytest
import torch
from transformers import HubertConfig, HubertForCTC, Wav2Vec2Config, Wav2Vec2ForCTC

from exactness import assert_matches, randomise
from zoo.convert.hubert import HUBERT
from zoo.convert.wav2vec2 import WAV2VEC2, from_transformers
from zoo.models.ctc import ctc_loss

TINY = dict(vocab_size=12, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            conv_dim=(8, 8, 8), conv_kernel=(5, 3, 2), conv_stride=(3, 2, 2), num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=2, mask_time_prob=0.0, layerdrop=0.0, pad_token_id=0)


def tiny(kind: str, stable: bool, dtype=torch.float64):
    cls, cfg_cls = {"wav2vec2": (Wav2Vec2ForCTC, Wav2Vec2Config), "hubert": (HubertForCTC, HubertConfig)}[kind]
    torch.manual_seed(0)
    cfg = cfg_cls(**TINY, do_stable_layer_norm=stable, feat_extract_norm="layer" if stable else "group",
                  conv_bias=stable, ctc_loss_reduction="mean", attn_implementation="eager")
    return randomise(cls(cfg).eval()).to(dtype)


@pytest.mark.parametrize("kind", ["wav2vec2", "hubert"])
@pytest.mark.parametrize("stable", [False, True])
def test_logits_and_ctc_loss_match(kind, stable):
    hf = tiny(kind, stable)
    layout = WAV2VEC2 if kind == "wav2vec2" else HUBERT
    zoo = from_transformers(hf, layout=layout).eval().to(torch.float64)
    g = torch.Generator().manual_seed(1)
    waves = torch.randn(2, 400, generator=g, dtype=torch.float64)
    real = torch.ones(2, 400, dtype=torch.bool)
    real[1, 290:] = False
    waves = waves.masked_fill(~real, 0.0)
    padding = zoo.embedder.output_padding(real)
    assert not padding[1].all() and padding[0].all()
    labels = torch.tensor([[3, 4, 5, 4], [6, 7, -100, -100]])
    with torch.no_grad():
        ref = hf(waves, attention_mask=real.long(), labels=labels)
        out = zoo(waves, key_padding=padding, padding=padding)
    assert_matches(out, ref.logits, padding[..., None], what=f"{kind} logits")
    loss = ctc_loss(out, padding, labels, blank=0, reduction="mean")
    assert_matches(loss.double(), ref.loss.double(), what="CTC loss")


@pytest.mark.parametrize("kind", ["wav2vec2", "hubert"])
def test_export_round_trip(kind):
    """zoo -> Hugging Face (the export's probe mapping, checked on an example) -> zoo: the same weights."""
    from zoo.convert.export import to_hf
    hf = tiny(kind, False, torch.float32)
    layout = WAV2VEC2 if kind == "wav2vec2" else HUBERT
    zoo = from_transformers(hf, layout=layout).eval()
    from omegaconf import OmegaConf, open_dict
    from zoo.convert.common import compose_config, shape_overrides
    from zoo.convert.wav2vec2 import shape
    # the net config a run stores: model=wav2vec2 in the reference's shape
    cfg = compose_config(["model=wav2vec2", *shape_overrides(shape(hf.config.to_dict(), layout))])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": hf.config.vocab_size, "pad_id": 0}
    net_cfg = OmegaConf.to_container(cfg.model.net, resolve=True)
    back, _ = to_hf(zoo, net_cfg, layout.hf_class)
    again = from_transformers(back, layout=layout)
    for name, value in zoo.state_dict().items():
        assert torch.equal(value, again.state_dict()[name]), name

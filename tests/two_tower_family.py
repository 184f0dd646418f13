"""The checks every two-tower family (CLIP, SigLIP) passes against its randomised Hugging Face reference:
the image and text vectors, the logits and the ``return_loss=True`` loss in float64 on padded captions
of different lengths; ``model.init_from=DIR`` of a ``save_pretrained`` folder; the export round trip
both ways. One copy for the two-tower families."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from exactness import assert_matches, randomise
from test_export import resolved_net
from zoo.convert.common import shape_overrides
from zoo.convert.export import FAMILIES, to_hf

LENGTHS = (37, 5)  # two captions, one long and one short: the short one right-padded to 37


def captions(vocab: int, eos: int | None, pad: int, lengths=LENGTHS, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B, max): each row's real ids, the last one ``eos`` (None: no end-of-text id), then the pad
    id; padding (B, max) True at real ids). The other ids are drawn from 3 up, skipping ``eos``."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    tokens = torch.randint(3, vocab - 1, (len(lengths), width), generator=gen)
    if eos is not None and eos >= 3:
        tokens[tokens >= eos] += 1
    padding = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    if eos is not None:
        tokens[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = eos
    return tokens.masked_fill(~padding, pad), padding


def images(hf, n: int = 2, seed: int = 1) -> torch.Tensor:
    v = hf.config.vision_config
    return torch.randn(n, v.num_channels, v.image_size, v.image_size, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def check_exact(hf: torch.nn.Module, module: ModuleType, loss, eos: int | None, pad: int,
                dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """``module.from_transformers(hf)`` gives ``hf``'s projected image and text vectors, normalised
    vectors, logits per image and ``return_loss=True`` loss (``loss``: the zoo's loss function), on
    two images and two padded captions of different lengths, in ``dtype``."""
    hf = randomise(hf).eval().to(dtype)
    net = module.from_transformers(hf).eval().to(dtype)
    tokens, padding = captions(hf.config.text_config.vocab_size, eos, pad)
    pixels = images(hf).to(dtype)
    out = hf(input_ids=tokens, pixel_values=pixels, attention_mask=padding.long(), return_loss=True)
    text, image = net.encode_text(tokens, padding), net.encode_image(pixels)
    assert_matches(text, hf.get_text_features(input_ids=tokens, attention_mask=padding.long()).pooler_output,
                   what="projected text vectors")
    assert_matches(image, hf.get_image_features(pixel_values=pixels).pooler_output, what="projected image vectors")
    assert_matches(F.normalize(text, dim=-1), out.text_embeds, what="text embeddings")
    assert_matches(F.normalize(image, dim=-1), out.image_embeds, what="image embeddings")
    logits = net(tokens, pixels, padding)
    assert_matches(logits, out.logits_per_image, what="logits_per_image")
    assert_matches(loss(logits), out.loss, what="loss")
    return net


@torch.no_grad()
def check_folder(tmp_path: Path, hf: torch.nn.Module, model: str, dims: dict, eos: int | None, pad: int) -> None:
    """``model.init_from=DIR`` of ``hf``'s ``save_pretrained`` folder, through the family's reader,
    gives ``hf``'s logits per image on padded captions (fp32)."""
    from test_init_from import objective_from

    hf = randomise(hf).eval()
    hf.save_pretrained(tmp_path)
    net = objective_from(model, tmp_path, dims).net.eval()
    tokens, padding = captions(hf.config.text_config.vocab_size, eos, pad, lengths=(11, 4))
    pixels = images(hf)
    ref = hf(input_ids=tokens, pixel_values=pixels, attention_mask=padding.long()).logits_per_image
    assert_matches(net(tokens, pixels, padding), ref, what=f"{model} logits from a folder")


@torch.no_grad()
def check_round_trip(hf: torch.nn.Module, module: ModuleType, model: str, shape, dims: dict) -> None:
    """HF -> zoo -> HF gives ``hf``'s logits, zoo -> HF -> zoo the same weights (every Hugging Face
    weight written), and a zoo net drawn away from its init exports to its own logits."""
    hf = randomise(hf).eval()
    hf_class = module.FAMILY.hf_class
    net_cfg = resolved_net(model, shape_overrides(shape(hf.config.to_dict())), dims)
    zoo = module.from_transformers(hf).eval()
    x = FAMILIES[hf_class].example(net_cfg)
    back, untouched = to_hf(zoo, net_cfg, hf_class)
    assert untouched == []
    run = FAMILIES[hf_class].outputs
    assert_matches(run(back, x), run(hf, x), what=f"{hf_class}: HF -> zoo -> HF logits")
    again = module.from_transformers(back).state_dict()
    assert again.keys() == zoo.state_dict().keys()
    assert all(torch.equal(again[k], v) for k, v in zoo.state_dict().items()), "zoo -> HF -> zoo weights"
    drawn = randomise(module.from_transformers(hf), seed=3).eval()
    out, _ = to_hf(drawn, net_cfg, hf_class)
    assert_matches(run(out, x), drawn(*x), what=f"{hf_class}: zoo -> HF logits")

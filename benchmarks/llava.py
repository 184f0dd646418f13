"""zoo LLaVA vs transformers LlavaForConditionalGeneration (CLIP vision tower + projector +
Llama LM) at the same tiny-but-real shape: training step time and peak memory, with the loss
on every text position.

    python benchmarks/llava.py                # CLIP 4 layers 192 wide on 64 px / patch 8; Llama 4 layers 256 wide
    python benchmarks/llava.py --image 224 --patch 14 --vision-width 1024 --vision-layers 24 --width 4096 ...

The zoo net is built from conf/model/llava.yaml reshaped to the Hugging Face config (the
converter's llava_shape), as tests/test_llava_exact.py does: both are the same network.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.llava import llava_shape

transformers = peer("transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--patch", type=int, default=8)
    p.add_argument("--vision-layers", type=int, default=4)
    p.add_argument("--vision-width", type=int, default=192)
    p.add_argument("--vision-heads", type=int, default=3)
    p.add_argument("--layers", type=int, default=4, help="language model layers")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ff", type=int, default=688)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--text", type=int, default=64, help="text tokens besides the image's")
    p.add_argument("--batch", type=int, default=8)
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    image_token = a.vocab - 1
    n_image = (a.image // a.patch) ** 2  # the default feature strategy drops CLIP's class token
    vision = transformers.CLIPVisionConfig(
        hidden_size=a.vision_width, intermediate_size=4 * a.vision_width, num_hidden_layers=a.vision_layers,
        num_attention_heads=a.vision_heads, image_size=a.image, patch_size=a.patch, hidden_act="quick_gelu")
    text = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.ff, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=n_image + a.text,
        rms_norm_eps=1e-6)
    cfg = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_token)
    words = torch.randint(2, image_token, (a.batch, a.text - 1))
    tokens = torch.cat([torch.ones(a.batch, 1, dtype=torch.long), torch.full((a.batch, n_image), image_token), words],
                       dim=1).to(a.device)  # <s> <image> x n_image, then the text
    targets = torch.randint(2, image_token, tokens.shape, device=a.device)
    images = torch.randn(a.batch, 3, a.image, a.image, device=a.device)

    def lm_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model).flatten(0, 1), targets.flatten()), a.dtype, compile=a.compile)

    def zoo():
        net = build_net("llava", shape_overrides(llava_shape(cfg.to_dict())),
                        {"vocab_size": a.vocab, "image_token_id": image_token})
        return lm_step(net, lambda m: m(tokens, images=images))

    def hf():
        return lm_step(transformers.LlavaForConditionalGeneration(cfg),
                       lambda m: m(input_ids=tokens, pixel_values=images).logits)

    shape = (f"CLIP {a.vision_layers} layers {a.vision_width} wide, {a.image} px / patch {a.patch}; Llama "
             f"{a.layers} layers {a.width} wide, {a.heads}/{a.kv_heads} heads; {n_image}+{a.text} tokens, "
             f"batch {a.batch}")
    compare("llava", shape, "zoo LLaVA", zoo, {"LlavaForConditionalGeneration": hf}, a)


if __name__ == "__main__":
    main()

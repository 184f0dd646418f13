"""``zoo generate`` / ``python generate.py``: sample text from a trained language model (GPT,
Llama), decoding with the KV cache.

    python -m zoo generate ckpt=outputs/train/<run>/checkpoints/last.ckpt prompt="ROMEO:" temperature=0.8 top_k=200
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from zoo.data.tokenizers import tokenizer_from_state
from zoo.inference.sampling import check_sampling, generate
from zoo.train.checkpoint import load

# The objectives whose networks continue a token sequence (next-token language models).
GENERATORS = ("lm", "vlm")


def main(cfg: DictConfig) -> None:
    """Print ``num_samples`` continuations of ``prompt`` (conf/generate.yaml), each followed by ``---``."""
    check_sampling(cfg.temperature, cfg.top_k, cfg.top_p)  # before the checkpoint is read
    objective = load(cfg.ckpt, cfg.device, accepts=GENERATORS, command="zoo generate")
    if objective.hparams.tokenizer is None:
        raise ValueError(f"{cfg.ckpt} stores no tokenizer: it was not trained on text")
    tokenizer = tokenizer_from_state(objective.hparams.tokenizer)
    ids = tokenizer.encode(cfg.prompt)
    if not ids:
        raise ValueError(f"prompt={cfg.prompt!r} holds no token: zoo generate continues a prompt of at least "
                         f"one token (the default is a newline)")
    prompt = torch.tensor([ids] * cfg.num_samples, device=cfg.device)
    out = generate(objective.net, prompt, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                   top_p=cfg.top_p, use_cache=cfg.use_cache, show_progress=True,
                   generator=torch.Generator(device=cfg.device).manual_seed(cfg.seed))
    for row in out.tolist():
        print(tokenizer.decode(row))
        print("---")

"""Autoregressive decoding with temperature, top-k and top-p, using the KV cache."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from zoo.models.static_decoding import StaticDecoder, check_static_length
from zoo.terminal import progress


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to -inf every logit (B, V) outside the top k, and outside the smallest set
    whose probability reaches top_p (nucleus)."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # keep the token that crosses top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def check_sampling(temperature: float, top_k: int | None = None, top_p: float | None = None) -> None:
    """Refuse sampling settings that make no sense, naming the value and its allowed range (a
    negative temperature would invert the distribution, and top-k then keep the least likely)."""
    if temperature < 0:
        raise ValueError(f"temperature={temperature} is negative: use 0 (greedy) or a positive value")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k} keeps no token: use an integer >= 1, or null for no top-k filter")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} is outside (0, 1]: use e.g. 0.95, or null for no nucleus filter")


@torch.no_grad()
def generate(
    model,
    tokens: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    eos_id: int | None = None,
    suppress: Sequence[int] = (),
    show_progress: bool = False,
    compile: bool = False,
    **inputs,
) -> Tensor:
    """Continue ``tokens`` (B, T) by ``max_new_tokens``; returns (B, T + max_new_tokens).

    ``temperature=0`` is greedy decoding. With ``use_cache`` each step feeds only the
    newest token and reuses the cached keys/values; without it every step recomputes
    the whole (context-cropped) sequence. When the sequence outgrows the model's
    context, the cache restarts from the last ``context`` tokens.

    ``inputs``: further inputs of the model's call over the whole sequence (LLaVA's
    ``images``, spliced into ``tokens``); with the cache they go in on the first step
    only, and the cache holds what they became. ``eos_id``: stop once every row has it.
    ``suppress``: ids never produced, e.g. LLaVA's ``<image>`` placeholder, which only an
    image can fill (a generated one, fed back without its image, could not be read).
    ``show_progress``: a bar over the steps, on a terminal (``zoo generate``; not a run's samples).
    ``compile``: decode over a static cache of the final length, each step one compiled graph
    (``zoo.models.static_decoding``); the same tokens, the prompt and new tokens within the context.
    """
    check_sampling(temperature, top_k, top_p)
    static = None
    if compile:
        check_static_length(tokens.shape[1] + max_new_tokens, model.context)
        static = StaticDecoder(model, model.head, tokens.shape[1] + max_new_tokens, tokens.device,
                               lambda prompt, cache: model(prompt, cache=cache, **inputs), compile=True)
    was_training = model.training
    model.eval()
    cache = None
    finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    steps = range(max_new_tokens)
    if show_progress:
        steps = progress(steps, "generating", total=max_new_tokens, unit="token")
    for _ in steps:
        if static is not None:
            logits = static(tokens if static.cache.length == 0 else tokens[:, -1:])
        elif use_cache and cache is not None and cache.length < model.context:
            logits = model(tokens[:, -1:], cache=cache)
        else:
            # Crop to the context; with a cache, leave room for the token fed next.
            keep = model.context - 1 if use_cache else model.context
            window = tokens[:, -keep:] if tokens.shape[1] > keep else tokens
            if inputs and window.shape[1] < tokens.shape[1]:
                raise ValueError(f"the sequence ({tokens.shape[1]} tokens) outgrew the model's context of "
                                 f"{model.context}, and {sorted(inputs)} cannot be cropped")
            cache = model.new_cache() if use_cache else None
            logits = model(window, cache=cache, **inputs)
        logits = logits[:, -1, :].float()
        if suppress:
            logits[:, list(suppress)] = float("-inf")
        if temperature == 0:
            next_token = logits.argmax(dim=-1, keepdim=True)
        else:
            probs = filter_logits(logits / temperature, top_k, top_p).softmax(dim=-1)
            next_token = torch.multinomial(probs, 1, generator=generator)
        tokens = torch.cat([tokens, next_token], dim=1)
        if eos_id is not None:
            finished |= next_token[:, 0] == eos_id
            if finished.all():
                break
    model.train(was_training)
    return tokens


"""Decoding an encoder-decoder (:class:`zoo.models.encoder_decoder.EncoderDecoder`): greedy
and beam search.

The source is encoded once. With the cache, each step feeds the decoder only the
newest token: its self-attention keys/values are appended to the cache and its
cross-attention keys/values (which depend only on the encoder output) are computed
on the first step and reused. Beam search reorders the self-attention cache rows with
:meth:`KVCache.reorder` when hypotheses change places (the cross-attention rows of a
sentence's beams are identical, so they stay).

Both functions start from a ``prompt`` (B, P) of decoder tokens — the start token
of a translation model, or a longer prompt such as Whisper's task tokens — and
return the generated tokens after the prompt, (B, T), every position after a row's
first ``eos`` filled with ``eos``. :func:`strip_eos` turns that into lists of ids.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.models.static_decoding import StaticDecoder
from zoo.nn.context import AttentionContext


def strip_eos(tokens: Tensor, eos: int) -> list[list[int]]:
    """(B, T) generated ids -> one list per row, cut before the first ``eos``."""
    rows = []
    for row in tokens.tolist():
        rows.append(row[: row.index(eos)] if eos in row else row)
    return rows


def _step_logits(net, prompt_or_last: Tensor, tokens: Tensor, memory: Tensor, source_padding: Tensor | None,
                 cache) -> Tensor:
    """Next-token log-probabilities (N, V): from the cache when there is one (feeding only
    the new tokens), else by re-running the decoder over the whole prefix."""
    if cache is not None:
        logits = net.decode(prompt_or_last, memory, source_padding, cache=cache)
    else:
        logits = net.decode(tokens, memory, source_padding)
    return logits[:, -1].float().log_softmax(dim=-1)


def _max_new(net, prompt: Tensor, max_new_tokens: int | None) -> int:
    room = net.context - prompt.shape[1]
    if room <= 0:
        raise ValueError(f"a prompt of {prompt.shape[1]} tokens leaves no room in the decoder's context of {net.context}")
    return room if max_new_tokens is None else min(max_new_tokens, room)


def static_decoder(net, memory: Tensor, source_padding: Tensor | None, capacity: int,
                   compile: bool = True) -> StaticDecoder:
    """``net``'s decoder over a static cache of ``capacity`` positions, reading ``memory``, its
    step compiled when ``compile`` (``zoo.models.static_decoding``)."""
    return StaticDecoder(net.decoder, net.head, capacity, memory.device,
                         lambda target, cache: net.decode(target, memory, source_padding, cache=cache),
                         compile=compile, cross=AttentionContext.over(memory, source_padding))


@torch.no_grad()
def greedy(net, source: Tensor, prompt: Tensor, eos: int, source_padding: Tensor | None = None,
           max_new_tokens: int | None = None, use_cache: bool = True, compile: bool = False) -> Tensor:
    """Greedy decoding: source (B, S, ...), prompt (B, P) -> generated ids (B, T). ``compile``: over
    a static cache, each step one compiled graph (the same tokens)."""
    was_training = net.training
    net.eval()
    memory = net.encode(source, source_padding)
    cache = net.new_cache() if use_cache else None
    tokens, new = prompt, prompt
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    steps = _max_new(net, prompt, max_new_tokens)
    static = static_decoder(net, memory, source_padding, prompt.shape[1] + steps) if compile else None
    for _ in range(steps):
        if static is not None:
            logp = static(new)[:, -1].float().log_softmax(dim=-1)
        else:
            logp = _step_logits(net, new, tokens, memory, source_padding, cache)
        new = logp.argmax(dim=-1, keepdim=True).masked_fill(finished[:, None], eos)
        tokens = torch.cat([tokens, new], dim=1)
        finished |= new[:, 0] == eos
        if finished.all():
            break
    net.train(was_training)
    return tokens[:, prompt.shape[1]:]


@torch.no_grad()
def beam_search(net, source: Tensor, prompt: Tensor, eos: int, source_padding: Tensor | None = None,
                beam_size: int = 4, length_penalty: float = 1.0, max_new_tokens: int | None = None,
                use_cache: bool = True) -> Tensor:
    """Beam search: source (B, S, ...), prompt (B, P) -> the best hypothesis per row (B, T).

    A finished hypothesis is scored by its summed log-probability divided by
    ``length ** length_penalty`` (its generated length, eos included), as Hugging Face's
    ``generate`` does; > 1 favours longer outputs, < 1 shorter. Each step ranks the
    2K best continuations of the K live beams: the ones that end in ``eos`` (among the
    top K) are set aside as finished, the K best others live on. A row stops once it
    has K finished hypotheses and no live beam can still beat the worst of them.
    """
    was_training = net.training
    net.eval()
    b, k = prompt.shape[0], beam_size
    memory = net.encode(source, source_padding)
    # Each row's encoder output serves its K beams: rows b*K .. b*K+K-1.
    memory = memory.repeat_interleave(k, dim=0)
    padding = None if source_padding is None else source_padding.repeat_interleave(k, dim=0)
    tokens = prompt.repeat_interleave(k, dim=0)
    new = tokens
    cache = net.new_cache() if use_cache else None
    scores = torch.zeros(b, k, device=prompt.device)
    scores[:, 1:] = float("-inf")  # all beams start identical: let only the first expand
    finished: list[list[tuple[float, Tensor]]] = [[] for _ in range(b)]
    done = [False] * b
    steps = _max_new(net, prompt, max_new_tokens)
    rows = torch.arange(b, device=prompt.device)[:, None] * k
    for step in range(steps):
        logp = _step_logits(net, new, tokens, memory, padding, cache)  # (B*K, V)
        vocab = logp.shape[-1]
        candidates = (scores[:, :, None] + logp.view(b, k, vocab)).view(b, k * vocab)
        cand_scores, cand_ids = candidates.topk(2 * k, dim=1)  # (B, 2K)
        cand_beam, cand_token = cand_ids // vocab, cand_ids % vocab
        is_eos = cand_token == eos
        length = step + 1
        # Hypotheses that end here: only those ranked within the top K count.
        for i, rank in (is_eos[:, :k]).nonzero().tolist():
            if done[i]:
                continue
            beam = i * k + cand_beam[i, rank].item()
            score = cand_scores[i, rank].item() / length ** length_penalty
            finished[i].append((score, tokens[beam, prompt.shape[1]:]))
            finished[i].sort(key=lambda item: -item[0])
            del finished[i][k:]
        # The K best candidates that do not end live on.
        live_scores, live_rank = cand_scores.masked_fill(is_eos, float("-inf")).topk(k, dim=1)
        order = (rows + cand_beam.gather(1, live_rank)).view(-1)
        new = cand_token.gather(1, live_rank).view(-1, 1)
        tokens = torch.cat([tokens[order], new], dim=1)
        scores = live_scores
        if cache is not None:  # beams stay with their source: its cross k/v need no reordering
            cache.reorder(order, cross=False)
        best_live = (scores[:, 0] / length ** length_penalty).tolist()
        for i in range(b):
            if len(finished[i]) == k and best_live[i] <= finished[i][-1][0]:
                done[i] = True
        if all(done):
            break
    # Rows that ran out of steps also consider their live beams, unfinished.
    final_length = tokens.shape[1] - prompt.shape[1]
    for i in range(b):
        if not done[i]:
            for j in range(k):
                score = scores[i, j].item() / final_length ** length_penalty
                finished[i].append((score, tokens[i * k + j, prompt.shape[1]:]))
    best = [max(hyps, key=lambda item: item[0])[1] for hyps in finished]
    out = torch.full((b, max(len(t) for t in best) + 1), eos, dtype=prompt.dtype, device=prompt.device)
    for i, hyp in enumerate(best):
        out[i, : len(hyp)] = hyp
    net.train(was_training)
    return out

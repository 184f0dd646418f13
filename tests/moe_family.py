"""The checks both mixture-of-experts decoders (Mixtral, Qwen3-MoE) pass beyond the shared decoder
ones (tests/decoder_family.py): the logits and every layer's router logits against the reference,
the load-balancing loss against ``load_balancing_loss_func`` (the training loss too), and decoding
with the cache against recomputation."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from exactness import assert_matches
from text_batches import padded_tokens
from zoo.nn.moe import MoEFeedForward, RouterLogits


@torch.no_grad()
def check_logits_and_routers(hf: torch.nn.Module, net: torch.nn.Module, vocab: int, length: int) -> None:
    """Padded batch: the logits and each layer's router logits equal the reference's at the real
    tokens, the load-balancing loss (padding left out) equals Hugging Face's ``aux_loss``."""
    tokens, real = padded_tokens(vocab, length)
    ref = hf(tokens, attention_mask=real.long(), output_router_logits=True)
    routed = RouterLogits(net)
    with routed:
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref.logits, real[..., None], what=f"{type(hf).__name__} logits")
    assert len(routed.logits) == len(ref.router_logits) == hf.config.num_hidden_layers
    for i, (mine, theirs) in enumerate(zip(routed.logits, ref.router_logits)):
        assert_matches(mine, theirs, real.reshape(-1, 1), what=f"layer {i}'s router logits")
    assert_matches(routed.loss(real), ref.aux_loss, what="load-balancing loss (padding left out)")
    # the routing matters: the experts' outputs differ, and more than one expert is chosen
    chosen = {int(e) for logits in routed.logits for e in logits.topk(hf.config.num_experts_per_tok).indices.flatten()}
    assert len(chosen) == net.stack.blocks[0].ffn.n_experts


def check_training_loss(hf: torch.nn.Module, objective, vocab: int) -> None:
    """The objective's training loss (cross-entropy + aux_loss_coef x load-balancing) equals Hugging
    Face's ``loss`` with labels and router logits (its aux loss weighted by router_aux_loss_coef)."""
    from zoo.data.batches import IGNORE, TokenWindows

    tokens = torch.randint(0, vocab, (2, 23), generator=torch.Generator().manual_seed(5))
    targets = torch.cat([tokens[:, 1:], torch.full((2, 1), IGNORE)], 1)
    logged = {}
    objective.log = lambda name, value, **kw: logged.setdefault(name, value)
    objective.flops_per_batch = None
    assert objective.aux_loss_coef == hf.config.router_aux_loss_coef
    with torch.no_grad():
        loss = objective.training_step(TokenWindows(tokens, targets), 0)
        ref = hf(tokens, labels=tokens, output_router_logits=True)
    assert_matches(loss, ref.loss, what="training loss (cross-entropy + coef x load-balancing)")
    assert_matches(logged["train/aux_loss"], ref.aux_loss, what="logged train/aux_loss")
    assert_matches(logged["train/loss"], F.cross_entropy(ref.logits.flatten(0, 1), targets.flatten()),
                   what="logged train/loss (the cross-entropy alone)")


@torch.no_grad()
def check_cached_decoding(net: torch.nn.Module, vocab: int) -> None:
    """A prompt then single steps through the KV cache give the full forward's logits."""
    tokens = torch.randint(0, vocab, (2, 21), generator=torch.Generator().manual_seed(2))
    cache = net.new_cache()
    steps = torch.cat([net(tokens[:, :11], cache=cache)] + [net(tokens[:, t:t + 1], cache=cache) for t in range(11, 21)], 1)
    assert_matches(steps, net(tokens), what="cached decoding against recomputation")


def moe_layers(net: torch.nn.Module) -> list[MoEFeedForward]:
    return [m for m in net.modules() if isinstance(m, MoEFeedForward)]

"""The chunked next-token loss (zoo.nn.chunked_loss, ``model.loss_chunk``): the loss and the gradients of
the hidden states, the head's matrix and bias as the full logits' ``F.cross_entropy`` gives them (fp32
and float64, -100 targets, lengths no chunk divides, a soft-cap), as transformers' own loss of a Qwen3
and a Gemma 2 (soft-capped, tied head), and a training run's losses with it equal to those without."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from exactness import assert_matches, randomise
from zoo.config import compose_config
from zoo.nn.chunked_loss import IGNORE, chunked_cross_entropy
from zoo.objectives.lm import NextTokenLM

V, D = 53, 16


def _problem(dtype: torch.dtype, length: int, bias: bool, seed: int = 0):
    """Hidden states (2, length, D) and a head of unit-scale logits; a quarter of the targets -100."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, length, D, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(V, D, generator=g, dtype=dtype).div(D ** 0.5).mul(3).requires_grad_()
    b = torch.randn(V, generator=g, dtype=dtype).requires_grad_() if bias else None
    targets = torch.randint(0, V, (2, length), generator=g)
    targets[torch.rand(2, length, generator=g) < 0.25] = IGNORE
    return hidden, weight, b, targets


def _full(hidden, weight, bias, targets, softcap):
    logits = F.linear(hidden, weight, bias)
    logits = logits if softcap is None else torch.tanh(logits / softcap) * softcap
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length, chunk, bias, softcap", [(37, 8, False, None), (37, 5, True, 2.0), (6, 100, True, None)])
def test_chunked_loss_and_gradients_equal_the_full_logits(dtype, length, chunk, bias, softcap):
    """Chunks of 8 or 5 positions over 74 (neither divides it), or one chunk larger than the batch."""
    hidden, weight, b, targets = _problem(dtype, length, bias)
    params = [hidden, weight] + ([b] if bias else [])
    ref = _full(hidden, weight, b, targets, softcap)
    ref_grads = torch.autograd.grad(ref, params)
    out = chunked_cross_entropy(hidden, weight, b, targets, chunk, softcap)
    grads = torch.autograd.grad(out, params)
    assert_matches(out.to(dtype), ref.to(dtype), what="loss")
    for name, grad, ref_grad in zip(["hidden", "weight", "bias"], grads, ref_grads):
        assert_matches(grad, ref_grad, what=f"gradient of the {name}")
    assert (grads[0].flatten(0, 1)[targets.flatten() == IGNORE] == 0).all()  # no loss, no gradient


def test_chunked_loss_of_no_target_is_nan_as_cross_entropy():
    hidden, weight, _, targets = _problem(torch.float32, 5, False)
    assert chunked_cross_entropy(hidden, weight, None, torch.full_like(targets, IGNORE), 4).isnan()


def _hf_against_chunked(hf, net, chunk: int) -> None:
    """transformers' own loss (labels shifted inside) and its gradients against the zoo net's chunked
    loss of the same targets, shifted; right padding as -100 labels; the gradients of the head (tied:
    the embedding's, both uses summed), the final norm and the first layer's query projection."""
    torch.manual_seed(1)
    tokens = torch.randint(0, hf.config.vocab_size, (2, 23))
    labels = tokens.clone()
    labels[1, 15:] = IGNORE  # the second row's end is padding
    labels[0, :4] = IGNORE  # the first row's prompt carries no loss
    targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE)], 1)
    ref = hf(tokens, labels=labels).loss
    ref.backward()
    out = net.head.chunked_loss(net.hidden(tokens), targets, chunk)
    out.backward()
    assert_matches(out, ref, what="loss")
    pairs = {"head": (net.head.proj.weight, hf.lm_head.weight), "final norm": (net.stack.norm.weight, hf.model.norm.weight),
             "first query": (net.stack.blocks[0].attn.q.weight, hf.model.layers[0].self_attn.q_proj.weight)}
    for name, (ours, theirs) in pairs.items():
        assert_matches(ours.grad, theirs.grad, what=f"gradient of the {name}")


def test_chunked_loss_equals_transformers_qwen3_loss():
    transformers = pytest.importorskip("transformers")
    from zoo.convert.qwen3 import from_transformers

    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=211, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                                   tie_word_embeddings=False, attn_implementation="sdpa")
    hf = randomise(transformers.Qwen3ForCausalLM(cfg))
    _hf_against_chunked(hf, from_transformers(hf), chunk=9)


def test_chunked_loss_equals_transformers_gemma2_soft_capped_loss():
    transformers = pytest.importorskip("transformers")
    from zoo.convert.gemma2 import from_transformers

    torch.manual_seed(0)
    cfg = transformers.Gemma2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                                    sliding_window=8, query_pre_attn_scalar=8, final_logit_softcapping=3.0,
                                    eos_token_id=None, attn_implementation="eager")
    hf = randomise(transformers.Gemma2ForCausalLM(cfg))
    net = from_transformers(hf)
    assert net.head.softcap == 3.0 and net.head.proj.weight is net.embedder.tokens.weight  # capped, tied
    _hf_against_chunked(hf, net, chunk=7)


def _objective(loss_chunk: int | None, *overrides: str) -> NextTokenLM:
    cfg = compose_config(["model=qwen3", "model.net.n_layers=2", "model.net.block.d_model=32",
                          "model.net.embedder.vocab_size=301", "model.net.head.vocab_size=301",
                          *overrides])
    torch.manual_seed(0)
    return NextTokenLM(net=cfg.model.net, optim=cfg.optim, loss_chunk=loss_chunk, compile=cfg.model.compile)


def test_training_with_loss_chunk_gives_the_losses_of_the_full_logits():
    """Four AdamW steps of model=qwen3 from the same weights on the same batches, the loss by chunks
    of 7 positions (or the full logits): the same losses, the same weights after."""
    torch.manual_seed(2)
    batches = [(torch.randint(0, 301, (3, 19)), torch.randint(0, 301, (3, 19))) for _ in range(4)]
    runs = {}
    for chunk in (None, 7):
        objective = _objective(chunk)
        opt = torch.optim.AdamW(objective.parameters(), lr=1e-2)
        losses = []
        for inputs, targets in batches:
            opt.zero_grad()
            loss = objective.next_token_loss(inputs, targets)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        runs[chunk] = torch.stack(losses), objective.net.head.proj.weight.detach()
    assert runs[None][0][-1] < runs[None][0][0]  # it learns
    assert_matches(runs[7][0], runs[None][0], what="training losses")
    assert_matches(runs[7][1], runs[None][1], atol=1e-5, rtol=1e-5, what="head after training")  # Adam divides by rounding-level gradients' roots


@pytest.mark.parametrize("chunk, overrides, named", [
    (0, [], "model.loss_chunk=0"),
    (64, ["compile=true"], "compile=true"),
])
def test_loss_chunk_refused_by_name(chunk, overrides, named):
    with pytest.raises(ValueError, match=re.escape(named)) as e:
        _objective(chunk, *overrides)
    assert "\n" not in str(e.value)


def test_chunked_loss_refuses_a_second_backward():
    """Its gradients are scaled in place: a retained graph's second backward would scale them twice."""
    hidden, weight, _, targets = _problem(torch.float32, 9, False)
    loss = chunked_cross_entropy(hidden, weight, None, targets, 4)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward runs once"):
        loss.backward()


def test_loss_chunk_refuses_a_head_that_is_no_lm_head():
    cfg = compose_config(["model=bert", "model.net.embedder.vocab_size=101", "model.net.head.vocab_size=101"])
    with pytest.raises(ValueError, match="model.loss_chunk: .* MLMHead") as e:
        NextTokenLM(net=cfg.model.net, optim=cfg.optim, loss_chunk=64)
    assert "\n" not in str(e.value)

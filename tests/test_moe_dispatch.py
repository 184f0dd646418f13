"""The mixture-of-experts dispatch (zoo/nn/moe.py): the sorted, grouped dispatch gives the outputs
and the gradients of the per-expert loop it replaced (kept for compiled graphs), its
``torch._grouped_mm`` form those of the per-expert slices, and a training step's gradients equal
``MixtralForCausalLM``'s and ``Qwen3MoeForCausalLM``'s."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exactness import assert_matches
from zoo.nn.feedforward import FeedForward
from zoo.nn.moe import MoEFeedForward, grouped_experts, grouped_mm_experts


def moe(n_experts: int = 16, top_k: int = 4, norm_topk: bool = False, **expert) -> MoEFeedForward:
    torch.manual_seed(0)
    layer = MoEFeedForward(32, n_experts, top_k, norm_topk, lambda: FeedForward(32, 24, **({"activation": "silu",
                                                                                            "gated": True} | expert)))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.3)
    return layer


def outputs_and_grads(layer: torch.nn.Module, x: torch.Tensor, forward) -> list[torch.Tensor]:
    """forward's output, and the gradients of a weighted sum of it for x and every parameter of layer."""
    layer.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    out = forward(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out, x.grad, *(p.grad for p in layer.parameters())]


def loop(layer: MoEFeedForward):
    """The dispatch the sorted one replaced: every expert gathers its tokens and adds its outputs."""
    def forward(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        return layer._loop(flat, *layer.route(flat)).view_as(x)
    return forward


@pytest.mark.parametrize("norm_topk", [False, True])
def test_sorted_dispatch_gives_the_loops_outputs_and_gradients(norm_topk):
    layer = moe(norm_topk=norm_topk)
    x = torch.randn(3, 13, 32, generator=torch.Generator().manual_seed(1))
    ours, ref = outputs_and_grads(layer, x, layer), outputs_and_grads(layer, x, loop(layer))
    for i, (mine, theirs) in enumerate(zip(ours, ref)):
        assert mine is not None and theirs is not None, f"gradient {i} missing"
        assert_matches(mine, theirs, what=f"output / gradient {i}")


def test_an_expert_without_tokens_gets_a_zero_gradient():
    """Every parameter has a gradient each step (DDP expects it), zero for an expert no token chose."""
    layer = moe(n_experts=8, top_k=2)
    with torch.no_grad():
        layer.router.weight[5] = -100.0  # expert 5's logit far below the others': never in the top 2
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(2)).abs()
    assert 5 not in layer.route(x.reshape(-1, 32))[1]
    outputs_and_grads(layer, x, layer)
    idle = layer.experts[5]
    assert all(p.grad is not None and not p.grad.any() for p in idle.parameters())
    assert all(p.grad.any() for p in layer.experts[4].parameters())


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch._grouped_mm needs torch >= 2.8")
@pytest.mark.parametrize("expert", [{}, {"gated": False, "activation": "gelu", "bias": True}])
def test_grouped_mm_gives_the_per_expert_slices(expert):
    """The CUDA form, run on the CPU: one grouped matmul per projection over the stacked weights
    (gated or not, with biases) = each expert on its slice, outputs and gradients."""
    layer = moe(**expert)
    counts = torch.tensor([5, 0, 3, 7, 0, 1, 4, 2, 6, 0, 3, 2, 1, 0, 8, 4])
    rows = torch.randn(int(counts.sum()), 32, generator=torch.Generator().manual_seed(3))

    def run(dispatch):
        return outputs_and_grads(layer.experts, rows, lambda r: dispatch(layer.experts, r, counts))
    for i, (mine, theirs) in enumerate(zip(run(grouped_mm_experts), run(grouped_experts))):
        assert_matches(mine, theirs, what=f"output / gradient {i}")


def reference_and_zoo(family: str):
    if family == "mixtral":
        from test_mixtral import tiny_mixtral
        from zoo.convert.mixtral import from_transformers
        hf = tiny_mixtral()
    else:
        from test_qwen3_moe import tiny_qwen3_moe
        from zoo.convert.qwen3_moe import from_transformers
        hf = tiny_qwen3_moe(True)
    return hf.train(), from_transformers(hf).train()


@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe"])
def test_training_gradients_match_transformers(family):
    """One cross-entropy backward on both sides: the gradients of the embeddings, every router and
    every expert's projections (stacked gate/up and down in transformers) are the reference's."""
    pytest.importorskip("transformers")
    hf, net = reference_and_zoo(family)
    tokens = torch.randint(0, hf.config.vocab_size, (2, 23), generator=torch.Generator().manual_seed(4))
    F.cross_entropy(net(tokens).flatten(0, 1), tokens.flatten()).backward()
    F.cross_entropy(hf(tokens).logits.flatten(0, 1), tokens.flatten()).backward()
    assert_matches(net.embedder.tokens.weight.grad, hf.model.embed_tokens.weight.grad, what="embedding gradient")
    for i, (block, layer) in enumerate(zip(net.stack.blocks, hf.model.layers)):
        ffn, ref = block.ffn, layer.mlp
        assert_matches(ffn.router.weight.grad, ref.gate.weight.grad, what=f"layer {i}'s router gradient")
        width = ffn.experts[0].fc_in.out_features
        for e, expert in enumerate(ffn.experts):
            gate_up, down = ref.experts.gate_up_proj.grad[e], ref.experts.down_proj.grad[e]
            assert_matches(expert.gate.weight.grad, gate_up[:width], what=f"layer {i} expert {e} gate gradient")
            assert_matches(expert.fc_in.weight.grad, gate_up[width:], what=f"layer {i} expert {e} up gradient")
            assert_matches(expert.fc_out.weight.grad, down, what=f"layer {i} expert {e} down gradient")

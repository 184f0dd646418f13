"""A mixture-of-experts feed-forward (Mixtral, Qwen3-MoE): a router picks ``top_k`` of
``n_experts`` feed-forwards per token and sums their outputs, weighted by the router's softmax;
and the load-balancing loss that keeps the router from sending every token to the same experts.

Each expert is what the Block's dense feed-forward would be (:func:`zoo.nn.feedforward.feed_forward`
passes its factory in: SwiGLU in both families), so the experts' weights have the dense
feed-forward's names (``experts.3.gate``, ``fc_in``, ``fc_out``). The router's logits
are what :class:`RouterLogits` collects during a forward (hooks on the routers, as Hugging Face
records them), for the loss: no layer hands anything on.

Dispatch: the (token, slot) pairs are sorted by expert once, gathered once and scattered back
once, and the experts run on contiguous rows (:func:`grouped_experts`: a grouped matmul on CUDA),
not one ``where`` / gather / scatter per expert as ``transformers``' eager loop does; the weights
stay in each expert's own modules (checkpoint keys unchanged).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


class MoEFeedForward(nn.Module):
    """x -> sum over the token's top-k experts e of w_e * expert_e(x).

    The router is a Linear without bias (d_model -> n_experts); its softmax, taken in float32 as
    both references do, gives each expert's probability; the ``top_k`` largest are the token's
    weights, renormalised to sum 1 with ``norm_topk`` (Mixtral always; Qwen3-MoE by its
    ``norm_topk_prob``).

    Args:
        d_model: the width.
        n_experts, top_k: how many experts, and how many each token goes through.
        norm_topk: renormalise the top-k weights to sum 1.
        expert: builds one expert, (B, L, D) -> (B, L, D) (a ``FeedForward``).
    """

    def __init__(self, d_model: int, n_experts: int, top_k: int, norm_topk: bool, expert: Callable[[], nn.Module]):
        super().__init__()
        if not 0 < top_k <= n_experts:
            raise ValueError(f"block.top_k={top_k} must be between 1 and block.n_experts={n_experts}")
        self.n_experts, self.top_k, self.norm_topk = n_experts, top_k, norm_topk
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(expert() for _ in range(n_experts))

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, D) -> (weights (N, k) in x's dtype, experts (N, k) ids), from the router's logits."""
        probs = self.router(x).float().softmax(dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), chosen

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D): the (token, slot) pairs sorted by expert (stably: by token within
        an expert), the experts run on their contiguous rows at once, each pair's output weighted and
        added back to its token (in expert order per token, as a loop over the experts adds them)."""
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = self.route(flat)
        if torch.compiler.is_compiling():
            return self._loop(flat, weights, chosen).view_as(x)
        order = chosen.flatten().argsort(stable=True)  # pair i = (token i // k, slot i % k)
        token = order // self.top_k
        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts)
        rows = grouped_experts(self.experts, flat.index_select(0, token), counts) * weights.flatten()[order, None]
        return torch.zeros_like(flat).index_add_(0, token, rows).view_as(x)

    def _loop(self, flat: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """The dispatch of a compiled graph: each expert gathers its tokens (``torch.where``, which
        dynamo traces under zoo.models.compiling's settings) and adds its outputs back; the sorted
        dispatch's split sizes (``.tolist()``) and an fp32 ``_grouped_mm`` do not trace."""
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
        return out


def grouped_experts(experts: nn.ModuleList, rows: Tensor, counts: Tensor) -> Tensor:
    """rows (S, D), sorted by expert (the first ``counts[0]`` are expert 0's, ...) -> each row
    through its expert, (S, D).

    On CUDA, one ``torch._grouped_mm`` per projection (:func:`grouped_mm_experts`) where this torch has it and
    the widths meet its stride rule; elsewhere each expert on its contiguous slice of the rows: on
    CPU (torch 2.14, fp32) that measured faster than ``_grouped_mm`` (a loop of matmuls there, plus
    the weights' stacking) and than a padded ``bmm`` (docs/benchmarks.md). Every expert's weights
    get a gradient (zero without tokens), as DDP expects of every parameter."""
    if rows.is_cuda and _grouped_mm_runs(rows, experts[0]):
        return grouped_mm_experts(experts, rows, counts)
    return torch.cat([expert(part) for expert, part in zip(experts, rows.split(counts.tolist()))])


def grouped_mm_experts(experts: nn.ModuleList, rows: Tensor, counts: Tensor) -> Tensor:
    """:func:`grouped_experts` as one ``torch._grouped_mm`` per projection over the experts' weights
    stacked per forward (the gate and fc_in side by side: one product); the experts are
    ``FeedForward`` s (gate, fc_in, fc_out, act, dropout)."""
    first = experts[0]
    offsets = counts.cumsum(0).to(torch.int32)
    gated = first.gate is not None
    inner = [layer for e in experts for layer in ((e.gate, e.fc_in) if gated else (e.fc_in,))]
    h = _grouped_linear(rows, inner, offsets, len(experts))
    if gated:
        gate, h = h.chunk(2, dim=-1)
        h = first.act(gate) * h
    else:
        h = first.act(h)
    return _grouped_linear(first.dropout(h), [e.fc_out for e in experts], offsets, len(experts))


def _grouped_linear(rows: Tensor, layers: list[nn.Linear], offsets: Tensor, n_experts: int) -> Tensor:
    """rows through ``layers`` (n_experts groups of equally many Linears, each group's outputs side by
    side), group e on the rows up to ``offsets[e]``: one grouped matmul."""
    weight = torch.stack([layer.weight for layer in layers]).view(n_experts, -1, rows.shape[-1])
    out = torch._grouped_mm(rows, weight.transpose(1, 2), offs=offsets)
    if layers[0].bias is None:
        return out
    bias = torch.stack([layer.bias for layer in layers]).view(n_experts, -1)
    return out + bias.repeat_interleave(offsets.diff(prepend=offsets.new_zeros(1)), dim=0, output_size=len(rows))


def _grouped_mm_runs(rows: Tensor, expert: nn.Module) -> bool:
    """Whether ``torch._grouped_mm`` takes these rows: the op exists (torch >= 2.8) and both widths
    are a multiple of 16 bytes (its stride rule)."""
    widths = (rows.shape[-1], expert.fc_in.out_features)
    return hasattr(torch, "_grouped_mm") and all(w * rows.element_size() % 16 == 0 for w in widths)


def load_balancing_loss(router_logits: list[Tensor], top_k: int, keep: Tensor | None = None) -> Tensor:
    """Switch Transformer's auxiliary loss (Fedus et al. 2021, eqs. 4-6), as Hugging Face computes it
    (``load_balancing_loss_func``): over every layer's tokens together, E * sum_e f_e * P_e, with f_e
    the tokens routed to expert e (of k each) and P_e its mean router probability: k when the routing
    is uniform, up to E when every token goes to the same k experts.

    router_logits: each layer's (N, E) logits (N = B * L tokens); keep (B, L) bool: the real
    tokens (padding carries no loss), None for all.
    """
    logits = torch.cat(router_logits).float()  # (layers * N, E)
    n_experts = logits.shape[-1]
    probs = logits.softmax(dim=-1)
    chosen = torch.topk(probs, top_k, dim=-1).indices
    if keep is None:
        keep = torch.ones(logits.shape[0], dtype=torch.float32, device=logits.device)
    else:
        keep = keep.reshape(-1).to(logits.device, torch.float32).repeat(len(router_logits))
    counts = torch.zeros(n_experts, device=logits.device).scatter_add_(
        0, chosen.reshape(-1), keep.repeat_interleave(top_k))
    tokens = keep.sum()
    return n_experts * torch.sum(counts / tokens * (probs * keep[:, None]).sum(dim=0) / tokens)


class RouterLogits:
    """The router logits of every mixture-of-experts layer of ``net``, collected while inside
    ``with routed:`` (in the order the layers run; each ``with`` starts afresh); ``routed.loss()`` is
    their :func:`load_balancing_loss`. A net without such layers collects nothing (``bool(routed)``
    is False). The routers' forward hooks are registered once, here, and collect only inside the
    ``with``: a compiled net sees the same hooks every step."""

    def __init__(self, net: nn.Module):
        self.layers = [m for m in net.modules() if isinstance(m, MoEFeedForward)]
        top_ks = {m.top_k for m in self.layers}
        if len(top_ks) > 1:
            raise ValueError(f"the mixture-of-experts layers route to different numbers of experts ({sorted(top_ks)})")
        self.top_k = next(iter(top_ks), 0)
        self.logits: list[Tensor] = []
        self.active = False
        for m in self.layers:
            m.router.register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, args, out: Tensor) -> None:
        if self.active:
            self.logits.append(out)

    def __enter__(self) -> RouterLogits:
        self.logits, self.active = [], True
        return self

    def __exit__(self, *exc) -> None:
        self.active = False

    def __bool__(self) -> bool:
        return bool(self.layers)

    def loss(self, keep: Tensor | None = None) -> Tensor:
        """The load-balancing loss of the forwards run inside the last ``with``; keep (B, L): real tokens."""
        if not self.logits:
            raise ValueError("no router logits were collected: run the net inside `with routed:`")
        return load_balancing_loss(self.logits, self.top_k, keep)

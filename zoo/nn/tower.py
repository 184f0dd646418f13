"""The Tower: embedder -> stack of Blocks -> final norm, the one unit every container is built from.

A decoder-only or encoder-only model is one tower and a head; an encoder-decoder is two
(the decoder's Blocks with cross-attention); LLaVA's vision tower is a tower inside the
language tower's embedder. A tower owns its embedder, its :class:`~zoo.nn.stack.Stack`
and the position modules that act inside attention (a rotary table, an additive bias), and
builds the stack's attention contexts from them. Containers name their towers
(:func:`towers_of`), and the tools that show or count a model (describe, mask pictures,
attention maps, FLOPs, converters) iterate over those names instead of asking which kind
of container they hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from zoo.nn.block import BlockConfig
from zoo.nn.cache import KVCache
from zoo.nn.context import AttentionContext
from zoo.nn.stack import Stack


class Tower(nn.Module):
    """An embedder, ``n_layers`` Blocks under ``mask``, and (pre-LN) a final norm.

    Args:
        embedder: input -> (B, L, D) (``zoo.nn.embedders``); it reports the length of its
            output for an input (``output_length``); built (a container builds a partial one
            at the Block's width and dropout first: ``zoo.nn.parts``).
        block: the Block's shape and knobs, shared by all layers.
        n_layers: number of Blocks.
        mask: one mask of ``zoo.nn.masks`` for every layer, or a ``PerLayer`` pattern.
        name: what the container calls this tower (``encoder``, ``decoder``, ``vision``).
        cross_attention: Blocks with cross-attention (the decoder of an encoder-decoder).
        final_norm: a norm after the last Block.
        rope: a rotary table (``zoo.nn.positions.RotaryEmbedding``), applied inside attention,
            or one per layer (``zoo.nn.positions.rotary_tables``).
        bias: an additive attention bias module ``(q_len, k_len, start) -> (1|B, H, Lq, Lk)``
            (T5's relative position bias), computed once per forward for every layer, or one per
            layer (an ``nn.ModuleList``: BEiT's relative position biases).
        attention_backend: ``sdpa``, ``blocks`` or ``flex`` (see :class:`~zoo.nn.stack.Stack`).
        first_attn_norm: ``False``: no norm before the first Block's attention (the embedder ends
            in one: ModernBERT).
    """

    def __init__(self, embedder: nn.Module, block: BlockConfig, n_layers: int, mask=None, name: str = "tower",
                 cross_attention: bool = False, final_norm: bool = True, rope: nn.Module | None = None,
                 bias: nn.Module | None = None, attention_backend: str = "sdpa", first_attn_norm: bool = True):
        super().__init__()
        if bias is not None and attention_backend != "sdpa":
            raise ValueError(f"attention_backend={attention_backend}: an additive attention bias ({type(bias).__name__}: "
                             f"T5's relative positions, ALiBi) runs only under attention_backend=sdpa")
        self.embedder = embedder
        self.stack = Stack(block, n_layers, mask, cross_attention, final_norm, attention_backend, first_attn_norm)
        self.rope, self.bias, self.name, self.cross_attention = rope, bias, name, cross_attention

    @property
    def layer_masks(self) -> list:
        """The mask of each layer that runs."""
        return self.stack.layer_masks

    @property
    def blocks(self) -> nn.ModuleList:
        """The Blocks, in order (attention maps and FLOPs read their attention modules)."""
        return self.stack.blocks

    def output_length(self, inputs: Tensor) -> int:
        """Positions the tower runs on for ``inputs`` (the embedder's output length)."""
        return self.embedder.output_length(inputs)

    def read_at(self, n_layers: int) -> None:
        """Return the hidden state after the first ``n_layers`` Blocks (no final norm); the
        layers after it are not run, and are dropped by :func:`drop_unread_layers`."""
        self.stack.read_at(n_layers)

    def hidden(self, inputs: Tensor, key_padding: Tensor | None = None, prefix_len: Tensor | None = None,
               cross: AttentionContext | None = None, cache: KVCache | None = None, **embed_kwargs) -> Tensor:
        """inputs (what the embedder takes) -> hidden states (B, L, D).

        key_padding (B, L): True at real positions. prefix_len (B,): for prefix-LM masks.
        cross: the cross-attention context (memory and its padding) of a decoder tower.
        cache: decode incrementally, ``inputs`` being the new positions only.
        """
        start = 0 if cache is None else cache.length
        x, contexts = self._embedded(inputs, start, key_padding, prefix_len, cross, **embed_kwargs)
        return self.stack(x, contexts, cache)

    def intermediates(self, inputs: Tensor, layers: Sequence[int], key_padding: Tensor | None = None,
                      prefix_len: Tensor | None = None, cross: AttentionContext | None = None,
                      **embed_kwargs) -> list[Tensor]:
        """inputs -> the hidden states (B, L, D) after each of ``layers`` Blocks, in the order asked
        (0 = the embedder's output; never the final norm), as :meth:`hidden` takes its arguments.
        The Blocks after the deepest asked do not run, and the tower is not changed (timm's
        ``forward_intermediates``): one model serves any number of callers at once."""
        x, contexts = self._embedded(inputs, 0, key_padding, prefix_len, cross, **embed_kwargs)
        return self.stack.intermediates(x, contexts, layers)

    def _embedded(self, inputs: Tensor, start: int, key_padding: Tensor | None, prefix_len: Tensor | None,
                  cross: AttentionContext | None, **embed_kwargs) -> tuple[Tensor, list[AttentionContext]]:
        """The embedder's output (B, L, D) for ``inputs`` after ``start`` positions, and the
        attention context of every layer that runs."""
        x = self.embedder(inputs, start=start, **embed_kwargs)
        return x, self.stack.contexts(x.shape[1], x.device, start, key_padding, prefix_len, self.rope, self.bias, cross)


def towers_of(net: nn.Module) -> dict[str, Tower]:
    """Every tower inside ``net`` (``net`` itself included) by its name, in module order."""
    found: dict[str, Tower] = {}
    for module in net.modules():
        if isinstance(module, Tower):
            if module.name in found:
                raise ValueError(f"two towers of {type(net).__name__} are both named {module.name!r}")
            found[module.name] = module
    return found


def outer_towers(net: nn.Module) -> dict[str, Tower]:
    """The towers of ``net`` that read its inputs: not inside another tower's embedder (LLaVA: its
    language tower, not the vision tower feeding it), nor fed by another tower's output (a staged
    hierarchy's later stages, whose embedder ``reads_tower``): one length each for ``training_flops``."""
    towers = towers_of(net)
    inner = {id(m) for t in towers.values() for m in t.embedder.modules() if isinstance(m, Tower)}
    return {name: t for name, t in towers.items()
            if id(t) not in inner and not getattr(t.embedder, "reads_tower", False)}


def drop_unread_layers(net: nn.Module) -> None:
    """Remove the layers no tower of ``net`` reads (see :meth:`Tower.read_at`). A container
    calls it after drawing its initial weights, so the random stream stays what it was."""
    for tower in towers_of(net).values():
        tower.stack.drop_unread()


def without_unread(net: nn.Module, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``state`` (keyed as ``net.state_dict()``) less the weights of layers ``net``'s towers do
    not read (a vision tower's last layer in a Hugging Face LLaVA or a ViT checkpoint)."""
    stacks = [(name + "." if name else "", m) for name, m in net.named_modules() if isinstance(m, Stack)]
    return {k: v for k, v in state.items()
            if not any(k.startswith(p) and stack.unread(k.removeprefix(p)) for p, stack in stacks)}

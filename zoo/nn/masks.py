"""Attention masks: who may see whom. Boolean, True = may attend.

The ``*Mask`` classes are what a model config picks. Every one keeps the contract of
:class:`Mask`: it declares whether it says its cells (who sees whom, from the positions
alone: what the block and FlexAttention backends run) or has none (it depends on the
batch, or weighs keys: SDPA only), and the base class builds the dense mask and the
padding from that, once for every mask. Called with the query and key lengths (and the
padding of the keys, when the batch has any) a mask returns what ``attention`` takes:
``(mask or None, is_causal)``. A plain causal mask with no padding returns
``(None, True)`` so that the fused causal kernels run.

Masks compare by value (:class:`Mask`): two masks with the same settings are equal,
so a stack whose layers differ (:func:`per_layer`) builds one attention context per
distinct mask, not per layer.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor


def causal_mask(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """(q_len, k_len): query i (the last q_len of k_len positions) sees keys <= its own position."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


def padding_mask(key_padding: Tensor) -> Tensor:
    """key_padding (B, Lk), True = real token -> (B, 1, 1, Lk): nobody attends to padding."""
    return key_padding[:, None, None, :]


def prefix_lm_mask(prefix_len: Tensor, length: int) -> Tensor:
    """prefix_len (B,) -> (B, 1, L, L): bidirectional inside each row's prefix, causal after."""
    pos = torch.arange(length, device=prefix_len.device)
    in_prefix = pos[None, None, :] < prefix_len[:, None, None]  # key inside the prefix
    return (causal_mask(length, length, prefix_len.device)[None] | in_prefix)[:, None]


def with_padding(mask: Tensor | None, key_padding: Tensor | None) -> Tensor | None:
    """``mask`` (None, bool (.., Lq, Lk) True = may attend, or additive float, -inf where hidden)
    with the padded keys hidden too; key_padding (B, Lk) True at real keys."""
    if key_padding is None:
        return mask
    padding = padding_mask(key_padding)
    if mask is None:
        return padding
    return mask.masked_fill(~padding, float("-inf")) if mask.is_floating_point() else mask & padding


def positions(q_len: int, k_len: int, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """(q_len, 1) absolute query positions (the last q_len of k_len) and (1, k_len) key positions."""
    return torch.arange(k_len - q_len, k_len, device=device)[:, None], torch.arange(k_len, device=device)[None, :]


class Mask:
    """The contract every mask keeps, and equality and hashing by type and settings (its attributes).

    A mask declares how it says who sees whom (``has_cells``):

    - ``True``: by its **cells**, from absolute positions alone (:meth:`cells`); the block and
      FlexAttention backends run it, narrowed by :meth:`key_span` and :meth:`band`.
    - ``False``: it has no cells (it depends on the batch, as a prefix-LM does, or weighs keys,
      as BigBird does) and builds its :meth:`dense` mask itself; it runs under SDPA only.

    :meth:`__call__`, here once for every mask, builds the dense mask and the padding from that.
    A subclass is refused at its definition if it declares cells and defines none, or no
    cells and no dense mask.

    Plain classes, not dataclasses, on purpose: OmegaConf turns a dataclass instance inside a
    config list (a :class:`PerLayer` pattern) back into a config object, which is not callable
    (and compares equal to the dataclass, hiding the mistake)."""

    has_cells: ClassVar[bool] = True
    cache_keep: int | None = None  # the latest keys a later query can see (None: all; LocalMask: w - 1)
    attention_block: int = 128  # the query/key blocks of the block attention backend (zoo.nn.blocked)
    picture_length: int = 8  # positions a picture of the mask needs to show it (zoo.viz.mask_pictures)
    causal = False  # True: no position sees a later one (a tower of such layers is a decoder)
    zero_keys: int = 0  # keys of a zero input the attention appends after the real ones (Swin's window padding)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.has_cells and cls.cells is Mask.cells:
            raise TypeError(f"{cls.__name__} declares has_cells but defines no cells(query, key, k_len)")
        if not cls.has_cells and cls.dense is Mask.dense:
            raise TypeError(f"{cls.__name__} has no cells, so it must define its dense(q_len, k_len, device, ...)")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        """Who sees whom among the absolute positions ``query`` (Lq, 1) and ``key`` (1, Lk)
        of ``k_len``: (Lq, Lk) bool, broadcasting as the positions do (FlexAttention calls it
        on scalars). Only masks with ``has_cells``."""
        raise TypeError(f"{self!r} has no cells (it depends on the batch or weighs keys)")

    def key_span(self, q_lo: int, q_hi: int, k_len: int) -> tuple[int, int]:
        """The keys [lo, hi) that queries q_lo..q_hi-1 may see, at most (the block backend)."""
        return 0, k_len

    def band(self, size: int) -> tuple[int, int] | None:
        """A sliding window's key blocks of ``size`` before and after a query block's own (the
        block backend then runs every block in one call), or None: not a band."""
        return None

    def fused_causal(self, q_len: int, k_len: int, prefix_len: Tensor | None) -> bool:
        """Whether, with no padding, this is SDPA's plain causal mask (its fused kernel runs)."""
        return False

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor | None:
        """The mask of ``q_len`` queries (the last of ``k_len`` positions), padding aside:
        (q_len, k_len) bool or broadcastable to (B, H, q_len, k_len) (bool, or additive float),
        None when it hides nothing. By default the cells over the positions."""
        return self.cells(*positions(q_len, k_len, device), k_len)

    def __call__(self, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
                 prefix_len: Tensor | None = None) -> tuple[Tensor | None, bool]:
        """(mask or None, is_causal) for ``attention``: :meth:`dense` with the padded keys hidden
        (key_padding (B, k_len) True at real keys); prefix_len (B,): prefix-LM masks."""
        if key_padding is None and self.fused_causal(q_len, k_len, prefix_len):
            return None, True
        return with_padding(self.dense(q_len, k_len, device, prefix_len), key_padding), False

    def check_context(self, context: int) -> None:
        """Refuse settings that make no sense for a model of ``context`` positions (a start-up error)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class NoMask(Mask):
    """Everyone sees everyone, except padding (ViT, BERT, encoders)."""

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        return torch.ones_like(query - key, dtype=torch.bool)

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> None:
        return None  # it hides nothing but padding


class CausalMask(Mask):
    """Each position sees itself and the past (GPT, decoders)."""

    causal = True

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        return key <= query

    def key_span(self, q_lo: int, q_hi: int, k_len: int) -> tuple[int, int]:
        return 0, q_hi

    def fused_causal(self, q_len: int, k_len: int, prefix_len: Tensor | None) -> bool:
        return q_len == k_len

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor | None:
        return None if q_len == 1 else causal_mask(q_len, k_len, device)  # one new token sees everything


class PrefixLMMask(Mask):
    """Bidirectional over a prefix (image + prompt), causal over the rest. Its cells depend on
    each row's prefix length: it has none."""

    has_cells = False
    causal = True  # the positions after the prefix, which it generates

    def fused_causal(self, q_len: int, k_len: int, prefix_len: Tensor | None) -> bool:
        return prefix_len is None and q_len == k_len

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor | None:
        if prefix_len is None or q_len != k_len:  # no prefix, or decoding after the prefix
            return CausalMask().dense(q_len, k_len, device)
        return prefix_lm_mask(prefix_len, k_len)


def local_cells(query: Tensor, key: Tensor, window: int, causal: bool) -> Tensor:
    """:class:`LocalMask`'s window among the absolute positions ``query`` (Lq, 1) and ``key`` (1, Lk)."""
    if causal:
        return (key <= query) & (key > query - window)
    return (key - query).abs() <= window // 2


class LocalMask(Mask):
    """A sliding window (Mistral, GPT-Neo's local layers, ModernBERT's local layers).

    What "window w" means here, the one meaning in the zoo:

    - causal: query i sees the w keys j with ``i - w < j <= i`` (w keys, itself included):
      Hugging Face's ``sliding_window`` (Mistral) and GPT-Neo's ``window_size``, taken as is.
      FlashAttention's ``window_size=(left, 0)`` sees left + 1 keys: it is ``w = left + 1``.
    - bidirectional: query i sees the keys with ``|i - j| <= w // 2`` (w + 1 keys for an even w):
      ModernBERT's ``local_attention=128`` means ``|i - j| <= 64``, so it is ``w = 128`` as is.

    Under a KV cache (the last q_len queries of k_len positions) the causal window needs only
    the last ``w - 1`` keys of the past: :attr:`cache_keep` (the cache's rolling buffer).
    A window wider than the model's context would never cut: refused by :meth:`check_context`.
    """

    def __init__(self, window: int, causal: bool = True) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"LocalMask window={window!r}: give an integer >= 1 (the keys a query sees)")
        self.window, self.causal = window, causal

    @property
    def cache_keep(self) -> int | None:
        """How many of the latest keys a later query can still see (None: all of them)."""
        return self.window - 1 if self.causal else None

    @property
    def attention_block(self) -> int:
        """Blocks as wide as the window (16 to 256): a block of queries then reads two key blocks."""
        return min(256, max(16, self.window))

    @property
    def picture_length(self) -> int:
        return 2 * self.window

    def band(self, size: int) -> tuple[int, int]:
        reach = self.window - 1 if self.causal else self.window // 2
        return -(-reach // size), 0 if self.causal else -(-reach // size)

    def check_context(self, context: int) -> None:
        if self.window > context:
            raise ValueError(f"LocalMask window={self.window} is larger than the model's context={context}: "
                             f"it would never cut (use CausalMask/NoMask, or a window <= {context})")

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        return local_cells(query, key, self.window, self.causal)

    def key_span(self, q_lo: int, q_hi: int, k_len: int) -> tuple[int, int]:
        if self.causal:
            return max(0, q_lo - self.window + 1), q_hi
        return max(0, q_lo - self.window // 2), min(k_len, q_hi + self.window // 2)


def grid_cells(query: Tensor, key: Tensor, side: int, window: int) -> Tensor:
    """Patches of a side x side grid (row-major positions ``query`` (Lq, 1), ``key`` (1, Lk)) see
    the patches of their own window x window tile."""
    def tile(pos: Tensor) -> Tensor:
        return (pos // side // window) * side + pos % side // window  # (tile row, tile column) as one id

    return tile(query) == tile(key)


class GridWindowMask(Mask):
    """ViTDet's window attention as a mask over the patch grid: the patches (row-major, no CLS)
    are cut into non-overlapping ``window`` x ``window`` tiles, and a patch sees its own tile.
    The grid is the square of the sequence length; ViTDet zero-pads a grid its window does not
    divide (the padding then takes part in attention), which a mask cannot say: refused."""

    def __init__(self, window: int) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"GridWindowMask window={window!r}: give an integer >= 1 (the tile's side, in patches)")
        self.window = window

    @property
    def picture_length(self) -> int:
        return (2 * self.window) ** 2  # a grid of two tiles a side

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        return grid_cells(query, key, self._side(k_len, k_len), self.window)

    def _side(self, q_len: int, k_len: int) -> int:
        """The grid's side, refusing what is not a square grid the window divides."""
        side = math.isqrt(k_len)
        if q_len != k_len or side * side != k_len:
            raise ValueError(f"GridWindowMask needs a square grid of patches and no other tokens: got {q_len} "
                             f"queries over {k_len} keys (a CLS token? the embedder's cls_token must be false)")
        if side % self.window:
            raise ValueError(f"GridWindowMask window={self.window} does not divide the {side}x{side} patch grid")
        return side

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor:
        self._side(q_len, k_len)  # refuse queries over other keys before building anything
        return super().dense(q_len, k_len, device)


class PerLayer(Mask):
    """Masks that differ by layer: ``masks`` repeated over the layers of a stack and cut at
    its last layer, e.g. [local, local, global] (GPT-Neo alternates two; ModernBERT's 22
    layers have a global one every third). In a config::

        mask:
          _target_: zoo.nn.masks.PerLayer
          masks: [{_target_: zoo.nn.masks.CausalMask}, {_target_: zoo.nn.masks.NoMask}]
    """

    has_cells = False  # a pattern, not one layer's mask: per_layer() gives each layer its own

    def __init__(self, masks) -> None:
        self.masks = tuple(masks)  # a config's list: hashable
        if not self.masks:
            raise ValueError("PerLayer needs at least one mask")

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor:
        raise TypeError(f"{self!r} is a pattern of masks, not one layer's: per_layer() gives each layer its own")


def tile(pattern, n_layers: int, what: str = "mask") -> list:
    """``pattern`` repeated over ``n_layers`` layers and cut at the last. A pattern longer than
    the stack is refused: some of its entries would never be used."""
    pattern = list(pattern)
    if not pattern:
        raise ValueError(f"a per-layer {what} pattern needs at least one entry")
    if len(pattern) > n_layers:
        raise ValueError(f"a per-layer pattern of {len(pattern)} {what}s for a stack of {n_layers} layers: "
                         f"give at most {n_layers} (the pattern repeats over the layers)")
    return [pattern[i % len(pattern)] for i in range(n_layers)]


def per_layer(mask: Mask, n_layers: int) -> list[Mask]:
    """The mask of each of ``n_layers`` layers: ``mask`` for all, or a :class:`PerLayer`
    pattern tiled over them (:func:`tile`). Each must keep the :class:`Mask` contract."""
    layers = tile(mask.masks, n_layers) if isinstance(mask, PerLayer) else [mask] * n_layers
    for layer in layers:
        if not isinstance(layer, Mask) or isinstance(layer, PerLayer):
            raise TypeError(f"a layer's mask {layer!r} is not one of zoo.nn.masks' or zoo.nn.sparse's masks "
                            f"(a Mask, not a PerLayer pattern inside another)")
    return layers

"""Output heads: what the final vectors (B, L, D) are turned into."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.nn.chunked_loss import chunked_cross_entropy
from zoo.nn.feedforward import get_activation


class ProjectionHead(nn.Linear):
    """Vectors (..., D) -> vectors of another space (..., out_features), one matrix: CLIP's text
    and visual projections. A Linear (its state: ``weight``, ``bias``) that takes its input width
    from the container, as every head does (``zoo.nn.parts``)."""

    def __init__(self, d_model: int, out_features: int, bias: bool = False):
        super().__init__(d_model, out_features, bias=bias)


class LMHead(nn.Module):
    """Vectors -> next-token logits (B, L, V). ``scale`` multiplies the input first
    (T5 v1.0 scales by d_model^-0.5 when the head is tied to the embedding); ``softcap`` c
    caps the logits smoothly, c * tanh(logits / c) (Gemma 2's final-logit soft-capping)."""

    def __init__(self, d_model: int, vocab_size: int, bias: bool = False, scale: float = 1.0,
                 softcap: float | None = None):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size, bias=bias)
        self.scale, self.softcap = scale, softcap

    @property
    def weight(self) -> nn.Parameter:
        """The matrix that weight tying shares with the token embedding."""
        return self.proj.weight

    def tie(self, embedding: nn.Embedding) -> None:
        self.proj.weight = embedding.weight

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., V)."""
        logits = self.proj(x * self.scale if self.scale != 1.0 else x)
        return logits if self.softcap is None else torch.tanh(logits / self.softcap) * self.softcap

    def chunked_loss(self, x: Tensor, targets: Tensor, chunk: int) -> Tensor:
        """The mean cross-entropy of ``self(x)`` (..., V) against ``targets`` (...) ids (-100: no loss),
        ``chunk`` positions at a time, forward and backward, the logits never whole
        (:func:`zoo.nn.chunked_loss.chunked_cross_entropy`)."""
        x = x * self.scale if self.scale != 1.0 else x
        return chunked_cross_entropy(x, self.proj.weight, self.proj.bias, targets, chunk, self.softcap)


class MLMHead(nn.Module):
    """Vectors -> masked-token logits (B, L, V), BERT's prediction head: a transform
    (dense, activation, LayerNorm), then a decoder whose matrix is tied to the token
    embedding and whose bias is the head's own (one score offset per vocabulary entry).
    ModernBERT's has no bias in the dense layer and the norm (``bias=False, norm_bias=False``)."""

    def __init__(self, d_model: int, vocab_size: int, activation: str = "gelu", norm_eps: float = 1e-12,
                 bias: bool = True, norm_bias: bool = True):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model, bias=bias)
        self.act = get_activation(activation)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps, bias=norm_bias)
        self.decoder = nn.Linear(d_model, vocab_size)

    @property
    def weight(self) -> nn.Parameter:
        """The matrix that weight tying shares with the token embedding."""
        return self.decoder.weight

    def tie(self, embedding: nn.Embedding) -> None:
        self.decoder.weight = embedding.weight

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., V)."""
        return self.decoder(self.norm(self.act(self.dense(x))))


POOLS = ("cls", "mean", "cls_mean", "last", "tokens")


class ClassifierHead(nn.Module):
    """Vectors (B, L, D) -> class logits (B, num_classes): a linear layer on one pooled vector, or
    (B, L, num_classes) with ``pool="tokens"``: no pooling, every position classified (token
    classification, as Hugging Face's ``*ForTokenClassification``: dropout, then the linear layer).

    ``pool="cls"`` reads the first token (ViT's CLS, BERT's [CLS]); ``pool="mean"``
    averages the tokens after the first ``prefix_tokens`` (the CLS is not an image
    patch, so timm's average pooling leaves it out); ``pool="cls_mean"`` reads both side by
    side, (B, 2D) (Hugging Face's ``Dinov2ForImageClassification``). ``norm_eps`` adds a LayerNorm
    after pooling (timm's ``fc_norm``, used with average pooling in place of the
    stack's final norm). ``pooler`` adds a dense layer and that activation before the classifier,
    as Hugging Face's sequence classifiers do: BERT's pooler and RoBERTa's classification head
    (``tanh``), DistilBERT's pre-classifier (``relu``); ModernBERT's head (``gelu``) has no bias in
    the dense layer (``pooler_bias``) and a LayerNorm after it (``pooler_norm_eps``, ``norm_bias``).

    Text classifiers are handed the padding (True at real tokens), :attr:`reads_padding`: ``mean``
    then averages the real tokens only (ModernBERT's ``classifier_pooling=mean``) and ``pool="last"``
    reads the rightmost real token, as a decoder's ``*ForSequenceClassification`` does (its ``score``
    has no bias: ``proj_bias=False``).
    """

    reads_padding = True  # zoo.models.model.Model hands it the key padding

    def __init__(self, d_model: int, num_classes: int, pool: str = "cls", prefix_tokens: int = 1,
                 norm_eps: float | None = None, dropout: float = 0.0, pooler: str | None = None,
                 pooler_bias: bool = True, pooler_norm_eps: float | None = None, norm_bias: bool = True,
                 proj_bias: bool = True):
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}: expected one of {list(POOLS)}")
        self.pool, self.prefix_tokens = pool, prefix_tokens
        width = d_model * (2 if pool == "cls_mean" else 1)  # the pooled vector's
        self.norm = nn.LayerNorm(width, eps=norm_eps, bias=norm_bias) if norm_eps is not None else None
        self.dense = nn.Linear(width, width, bias=pooler_bias) if pooler is not None else None
        self.act = get_activation(pooler) if pooler is not None else None
        self.pooler_norm = nn.LayerNorm(width, eps=pooler_norm_eps, bias=norm_bias) \
            if pooler is not None and pooler_norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(width, num_classes, bias=proj_bias)

    def pooled(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        """(B, L, D) -> the pooled (B, D) (or (B, 2D)); ``padding`` (B, L) True at real tokens. ``pool="tokens"``:
        (..., D) as it is."""
        if self.pool == "tokens":
            return x
        if self.pool == "cls":
            return x[:, 0]
        if self.pool == "last":  # Hugging Face's: the rightmost real token (all padding: the first)
            last = -1 if padding is None else (torch.arange(x.shape[1], device=x.device) * padding).argmax(-1)
            return x[torch.arange(x.shape[0], device=x.device), last]
        tokens = x[:, self.prefix_tokens:]
        if padding is None:
            mean = tokens.mean(dim=1)
        else:
            real = padding[:, self.prefix_tokens:].to(x.dtype).unsqueeze(-1)
            mean = (tokens * real).sum(dim=1) / real.sum(dim=1)
        return mean if self.pool == "mean" else torch.cat([x[:, 0], mean], -1)

    def forward(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        """(B, L, D) -> (B, num_classes), or (..., D) -> (..., num_classes) for ``pool="tokens"``."""
        pooled = self.pooled(x, padding)
        if self.norm is not None:
            pooled = self.norm(pooled)
        if self.dense is not None:
            pooled = self.act(self.dense(pooled))
            if self.pooler_norm is not None:
                pooled = self.pooler_norm(pooled)
        return self.proj(self.dropout(pooled))


class DistilledHead(nn.Module):
    """DeiT's two classifiers (Touvron et al. 2021): ``proj`` on the CLS vector (the first
    token), ``dist`` on the distillation token's (the second). Inference averages them
    (Hugging Face's ``DeiTForImageClassificationWithTeacher``, timm's distilled models in eval);
    distillation trains each on its own target (:meth:`pair`)."""

    def __init__(self, d_model: int, num_classes: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj, self.dist = nn.Linear(d_model, num_classes), nn.Linear(d_model, num_classes)

    def pair(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, L, D) -> (class logits, distillation logits), (B, num_classes) each."""
        return self.proj(self.dropout(x[:, 0])), self.dist(self.dropout(x[:, 1]))

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, num_classes): the two heads' logits averaged."""
        cls, dist = self.pair(x)
        return (cls + dist) / 2


class CTCHead(nn.Module):
    """Vectors (B, L, D) -> per-position character logits (B, L, V) for CTC (wav2vec 2.0's and
    HuBERT's ``lm_head``): dropout, then a linear layer with a bias. The blank is a vocabulary
    entry (the pad id, as Hugging Face's); :func:`zoo.models.ctc.greedy` decodes the logits."""

    def __init__(self, d_model: int, vocab_size: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, vocab_size)

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., V)."""
        return self.proj(self.dropout(x))


class SpanHead(nn.Module):
    """Vectors (B, L, D) -> span logits (B, L, 2): each position's start and end score for an
    extractive answer (``task=qa``), one linear layer, as Hugging Face's ``*ForQuestionAnswering``
    ``qa_outputs`` (row 0 the start, row 1 the end); ``dropout`` before it (DistilBERT's ``qa_dropout``)."""

    def __init__(self, d_model: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, 2)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, 2)."""
        return self.proj(self.dropout(x))

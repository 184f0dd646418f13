"""Output heads: what the final vectors (B, L, D) are turned into."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.nn.feedforward import get_activation


class LMHead(nn.Module):
    """Vectors -> next-token logits (B, L, V). ``scale`` multiplies the input first
    (T5 v1.0 scales by d_model^-0.5 when the head is tied to the embedding)."""

    def __init__(self, d_model: int, vocab_size: int, bias: bool = False, scale: float = 1.0):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab_size, bias=bias)
        self.scale = scale

    @property
    def weight(self) -> nn.Parameter:
        """The matrix that weight tying shares with the token embedding."""
        return self.proj.weight

    def tie(self, embedding: nn.Embedding) -> None:
        self.proj.weight = embedding.weight

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x * self.scale if self.scale != 1.0 else x)


class MLMHead(nn.Module):
    """Vectors -> masked-token logits (B, L, V), BERT's prediction head: a transform
    (dense, activation, LayerNorm), then a decoder whose matrix is tied to the token
    embedding and whose bias is the head's own (one score offset per vocabulary entry)."""

    def __init__(self, d_model: int, vocab_size: int, activation: str = "gelu", norm_eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.act = get_activation(activation)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps)
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

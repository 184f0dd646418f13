"""What each argument of a container is, as data: its axis (:mod:`zoo.models.axes`) and one line
saying what it sets. The containers (``Model``, ``EncoderDecoder``, ``Staged``, ``TwoTower``) are
built from a ``model.net`` config whose top-level keys are these arguments, so the axes a config's
keys belong to come from here, and a test fails on a container argument without an entry (or on an
entry no container takes); docs/design.md's table of them is :func:`argument_table`. Nothing here
imports torch: ``zoo diff`` reads it before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass

NET = "net"  # an argument that is a net of its own (a two-tower model's ``vision``): its keys are on their own axes


@dataclass(frozen=True)
class Argument:
    """A container argument: its ``axis`` (one of :data:`zoo.models.axes.AXES`, or :data:`NET`) and ``about``."""

    axis: str
    about: str


ARGUMENTS: dict[str, Argument] = {
    # the mask: who sees whom
    "mask": Argument("mask", "a mask of zoo.nn.masks, or PerLayer([...]) repeated over the layers"),
    "encoder_mask": Argument("mask", "an encoder-decoder's encoder self-attention mask (default: padding only)"),
    "decoder_mask": Argument("mask", "an encoder-decoder's decoder self-attention mask (default: causal)"),
    "window": Argument("mask", "a staged hierarchy's (Swin's) window side, every stage's shifted-window masks"),
    # the embedder: what the net reads
    "embedder": Argument("embedder", "input -> (B, L, D); a partial is built at the Block's width and dropout"),
    "encoder_embedder": Argument("embedder", "an encoder-decoder's source -> (B, S, D)"),
    "decoder_embedder": Argument("embedder", "an encoder-decoder's target ids -> (B, T, D)"),
    "share_embeddings": Argument("embedder", "the decoder uses the encoder's token embedding (a shared vocabulary)"),
    # the head: what the net answers
    "head": Argument("head", "(B, L, D) -> outputs; a partial is built at the width it reads"),
    "tie_embeddings": Argument("head", "the head's matrix is the (decoder's) token embedding's"),
    "text_pool": Argument("head", "two towers: the text position whose vector is the text's (eos, last, first)"),
    "eos_id": Argument("head", "two towers: the end-of-text id text_pool=eos looks for"),
    "vision_pool": Argument("head", "two towers: the image position whose vector is the image's (first), or none"),
    "logit_scale": Argument("head", "two towers: the learned log scale of the cosine similarities"),
    "logit_bias": Argument("head", "two towers: the learned bias added to them (SigLIP), or none"),
    # the Block
    "block": Argument("block", "the Block's shape and knobs, shared by every layer (zoo.nn.knobs)"),
    # positions acting inside attention, owned by the tower
    "rotary": Argument("positions", "rotary positions inside attention (not in the embedder)"),
    "rotary_base": Argument("positions", "the rotary base, or a list repeated over the layers"),
    "rotary_fraction": Argument("positions", "the part of each head that rotates (GPT-NeoX's rotary_pct)"),
    "rotary_scale": Argument("positions", "linear position scaling, or a list repeated over the layers"),
    "bias": Argument("positions", "an additive attention bias module (T5's, ALiBi), or one per layer (BEiT's)"),
    "encoder_bias": Argument("positions", "an encoder-decoder's encoder attention bias (T5's relative bias)"),
    "decoder_bias": Argument("positions", "an encoder-decoder's decoder attention bias"),
    # the container: how many layers, how long a context, how built
    "n_layers": Argument("container", "number of Blocks"),
    "n_encoder_layers": Argument("container", "an encoder-decoder's encoder depth"),
    "n_decoder_layers": Argument("container", "an encoder-decoder's decoder depth"),
    "depths": Argument("container", "a staged hierarchy's Blocks per stage"),
    "heads": Argument("container", "a staged hierarchy's heads per stage"),
    "context": Argument("container", "the longest sequence the model accepts"),
    "final_norm": Argument("container", "a norm after each tower's last Block (pre-LN models)"),
    "first_attn_norm": Argument("container", "false: no norm before the first Block's attention (ModernBERT)"),
    "attention_backend": Argument("container", "sdpa, blocks or flex (zoo.nn.stack.Stack)"),
    "init_std": Argument("container", "std of the normal initialisation"),
    # a second tower side by side
    "vision": Argument(NET, "a two-tower model's vision tower, a Model config of its own"),
}


def argument_table() -> str:
    """docs/design.md's table of the container arguments, by axis, from :data:`ARGUMENTS`."""
    rows = [f"| `{name}` | {a.axis} | {a.about} |" for name, a in ARGUMENTS.items()]
    return "\n".join(["| argument | axis | what it sets |", "|---|---|---|", *rows])

"""The masked-LM objective: BERT's masking rules and statistics, and the loss positions."""

from __future__ import annotations

import torch

from zoo.objectives.mlm import mask_tokens

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIAL = torch.tensor([PAD, UNK, CLS, SEP, MASK])
VOCAB = 1000


def corpus(rows: int = 400, length: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] ordinary tokens (some [UNK]) [SEP] [PAD]...: each row has its own length."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, VOCAB, (rows, length), generator=g)
    tokens[torch.rand(rows, length, generator=g) < 0.05] = UNK
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=g)
    padding = torch.arange(length)[None] < lengths[:, None]
    tokens[:, 0] = CLS
    tokens[torch.arange(rows), lengths - 1] = SEP
    tokens[~padding] = PAD
    return tokens, padding


def corrupt(tokens, padding, seed=1):
    return mask_tokens(tokens, padding, SPECIAL, MASK, VOCAB, 0.15, 0.8, 0.1, torch.Generator().manual_seed(seed))


def test_special_tokens_and_padding_are_never_selected_or_changed():
    tokens, padding = corpus()
    inputs, selected = corrupt(tokens, padding)
    special = torch.isin(tokens, SPECIAL)
    assert not selected[special].any() and not selected[~padding].any()
    assert torch.equal(inputs[~selected], tokens[~selected])  # only selected positions change


def test_selection_and_replacement_rates():
    tokens, padding = corpus()
    inputs, selected = corrupt(tokens, padding)
    candidates = padding & ~torch.isin(tokens, SPECIAL)
    n = selected.sum().item()
    assert abs(n / candidates.sum().item() - 0.15) < 0.01  # ~35k candidates: 3 sigma is ~0.006
    chosen_in, chosen_orig = inputs[selected], tokens[selected]
    masked = (chosen_in == MASK).float().mean().item()
    unchanged = (chosen_in == chosen_orig).float().mean().item()
    randomised = ((chosen_in != MASK) & (chosen_in != chosen_orig)).float().mean().item()
    assert abs(masked - 0.8) < 0.02 and abs(unchanged - 0.1) < 0.015 and abs(randomised - 0.1) < 0.015


def test_masking_is_reproducible_by_seed_and_always_selects_something():
    tokens, padding = corpus(rows=4)
    assert torch.equal(corrupt(tokens, padding, 3)[1], corrupt(tokens, padding, 3)[1])
    assert not torch.equal(corrupt(tokens, padding, 3)[1], corrupt(tokens, padding, 4)[1])
    short = torch.tensor([[CLS, 7, SEP, PAD]])  # one candidate: a 15% draw may miss it
    for seed in range(20):
        _, selected = corrupt(short, short != PAD, seed)
        assert selected.tolist() == [[False, True, False, False]]

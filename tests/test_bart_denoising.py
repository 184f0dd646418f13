"""BART's denoising objective (zoo/objectives/denoising.py): text infilling and sentence
permutation as the paper states them, and model=bart training on plain text through them."""

from itertools import permutations

import torch
from omegaconf import open_dict

from zoo.convert.common import compose_config
from zoo.data.batches import IGNORE, PaddedTokens
from zoo.objectives.denoising import infill, permute_sentences, span_lengths
from zoo.train.run import objective

MASK = 0


def restored(noised: list[int], original: list[int]) -> list[list[int]]:
    """The spans each mask of ``noised`` stands for in ``original`` (kept tokens matched in
    order; between two masks at least one token is kept); fails if the kept tokens are not
    ``original``'s in order."""
    spans, i = [], 0
    for j, t in enumerate(noised):
        if t != MASK:
            assert original[i] == t, f"kept token {t} at {j} is not the original's next ({original[i]})"
            i += 1
            continue
        nxt = next((u for u in noised[j + 1:] if u != MASK), None)
        end = original.index(nxt, i) if nxt is not None else len(original)
        spans.append(original[i:end])
        i = end
    assert i == len(original)
    return spans


def test_infilling_masks_30_percent_in_spans_each_one_mask():
    g = torch.Generator().manual_seed(0)
    for n in (7, 50, 121):
        original = list(range(10, 10 + n))
        for _ in range(20):
            noised = infill(original, MASK, 0.3, 3.0, g)
            spans = restored(noised, original)
            assert sum(map(len, spans)) == round(0.3 * n)  # exactly 30% of the tokens, no more
            assert all(a != MASK or b != MASK for a, b in zip(noised, noised[1:])), "two masks side by side"
            assert noised.count(MASK) == len(spans)


def test_span_lengths_are_poisson_3():
    g = torch.Generator().manual_seed(1)
    drawn = [span_lengths(300, 3.0, g) for _ in range(200)]
    assert all(sum(d) == 300 for d in drawn)
    inner = torch.tensor([x for d in drawn for x in d[:-1]], dtype=torch.float)  # the last is cut to fit
    assert abs(inner.mean() - 3.0) < 0.1 and abs(inner.var() - 3.0) < 0.3  # Poisson: mean = variance = 3
    assert (inner == 0).any()  # length 0 spans (insertions) occur, as in the paper


def test_sentence_permutation_shuffles_whole_sentences():
    g = torch.Generator().manual_seed(2)
    text = [1, 2, 9, 3, 9, 4, 5, 6, 9, 7, 8]  # 9 ends a sentence; the last has no end
    sentences = [[1, 2, 9], [3, 9], [4, 5, 6, 9], [7, 8]]
    every_order = {tuple(t for s in order for t in s) for order in permutations(sentences)}
    seen = {tuple(permute_sentences(text, {9}, g)) for _ in range(30)}
    assert seen <= every_order  # whole sentences, each once
    assert len(seen) > 5  # in random orders


def tiny_bart():
    cfg = compose_config(["model=bart", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
                          "model.net.block.d_model=32", "model.net.block.n_heads=2", "model.net.block.d_ff=64",
                          "model.net.block.dropout=0"])
    with open_dict(cfg):  # data=wikitext's dims: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4
        cfg.dims = {"vocab_size": 300, "pad_id": 0, "cls_id": 2, "sep_id": 3, "mask_id": 4,
                    "special_ids": [0, 1, 2, 3, 4]}
    torch.manual_seed(0)
    return objective(cfg)


def text_batch() -> PaddedTokens:
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(5, 300, (4, 41), generator=g)
    lengths = torch.tensor([41, 30, 17, 41])
    padding = torch.arange(41) < lengths[:, None]
    tokens[:, 0] = 2
    tokens[torch.arange(4), lengths - 1] = 3  # [CLS] ... [SEP], then padding
    return PaddedTokens(tokens.masked_fill(~padding, 0), padding)


def test_model_bart_denoises_plain_text_and_its_loss_falls():
    model = tiny_bart()
    model.sentence_end_ids = {7}  # as the tokenizer's "." would be
    batch = text_batch()
    pairs = model.noised(batch, 0, 0)
    for i, n in enumerate(batch.padding.sum(1).tolist()):
        original = batch.tokens[i, :n].tolist()
        source = pairs.source[i][pairs.source_padding[i]].tolist()
        assert pairs.target_out[i][pairs.target_out[i] != IGNORE].tolist() == original  # the target is the text
        assert pairs.target_in[i, 0] == 3 and pairs.target_in[i, 1:n].tolist() == original[:-1]  # from [SEP]
        assert source[0] == 2 and source[-1] == 3 and source.count(4) >= 1  # framed as the text, masks inside
        assert sorted(t for t in source if t != 4) != sorted(original)  # tokens were taken out
    again = model.noised(batch, 0, 0)
    assert torch.equal(again.source, pairs.source), "the corruption of a step is a function of the step"
    assert not torch.equal(model.noised(batch, 0, 1).source, pairs.source)
    loss, n = model.loss(pairs)
    model.eval()
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(10):  # a few steps on the one batch: the loss the objective reports falls
        optimiser.zero_grad()
        model.loss(pairs)[0].backward()
        optimiser.step()
    assert model.loss(pairs)[0] < loss - 0.5

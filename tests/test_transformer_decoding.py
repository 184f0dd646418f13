"""The original Transformer's shape and the encoder-decoder decoding (greedy, beam)."""

import pytest
import torch

from zoo.convert.common import build_net
from zoo.models.decoding import beam_search, greedy, strip_eos

EOS = 2


def tiny_net(**overrides):
    torch.manual_seed(0)
    args = ["model.net.n_encoder_layers=2", "model.net.n_decoder_layers=2", "model.net.context=24",
            "model.net.block.d_model=32", "model.net.block.n_heads=4", "model.net.block.d_ff=64",
            *[f"{k}={v}" for k, v in overrides.items()]]
    return build_net("transformer", args, {"vocab_size": 50, "eos_id": EOS}).eval()


def source_batch():
    g = torch.Generator().manual_seed(1)
    source = torch.randint(4, 50, (3, 7), generator=g)
    padding = torch.ones(3, 7, dtype=torch.bool)
    padding[1, 5:] = False  # a padded row
    padding[2, 3:] = False
    return source.masked_fill(~padding, 0), padding


def test_base_has_the_papers_parameter_count():
    """Table 3 of the paper: ~65M parameters for base with a 37,000-token shared vocabulary."""
    net = build_net("transformer_base", [], {"vocab_size": 37000, "eos_id": EOS})
    n = sum(p.numel() for p in net.parameters())
    assert abs(n - 65e6) / 65e6 < 0.05, n
    assert net.head.weight is net.encoder.embedder.tokens.weight is net.decoder.embedder.tokens.weight
    block = net.encoder.blocks[0]
    assert not block.prenorm and net.encoder.stack.norm is None


@pytest.mark.parametrize("padded", [False, True])
def test_cached_greedy_equals_uncached(padded):
    net = tiny_net()
    source, padding = source_batch()
    padding = padding if padded else None
    prompt = torch.ones(3, 1, dtype=torch.long)
    cached = greedy(net, source, prompt, EOS, padding, max_new_tokens=15)
    uncached = greedy(net, source, prompt, EOS, padding, max_new_tokens=15, use_cache=False)
    assert cached.shape[1] >= 1
    assert torch.equal(cached, uncached)


def test_greedy_stops_at_context_and_pads_after_eos():
    net = tiny_net()
    source, padding = source_batch()
    out = greedy(net, source, torch.ones(3, 1, dtype=torch.long), EOS, padding)
    assert out.shape[1] <= net.context - 1
    for row in out.tolist():
        if EOS in row:
            assert all(t == EOS for t in row[row.index(EOS):])


def test_beam_search_cached_equals_uncached_and_scores_at_least_greedy():
    net = tiny_net()
    source, padding = source_batch()
    prompt = torch.ones(3, 1, dtype=torch.long)
    beams = beam_search(net, source, prompt, EOS, padding, beam_size=4, length_penalty=0.0, max_new_tokens=12)
    assert torch.equal(beams, beam_search(net, source, prompt, EOS, padding, beam_size=4, length_penalty=0.0,
                                          max_new_tokens=12, use_cache=False))

    def logprob(hyps):  # summed log-probability of each hypothesis (with its eos, if it ended)
        total = []
        for i, ids in enumerate(hyps):
            ended = len(ids) < 12
            seq = torch.tensor([[1, *ids] + ([EOS] if ended else [])])
            logp = net(source[i : i + 1], seq[:, :-1], padding[i : i + 1]).log_softmax(-1)
            total.append(logp[0].gather(1, seq[0, 1:, None]).sum().item())
        return torch.tensor(total)

    g = strip_eos(greedy(net, source, prompt, EOS, padding, max_new_tokens=12), EOS)
    b = strip_eos(beams, EOS)
    assert (logprob(b) >= logprob(g) - 1e-4).all()


def test_beam_of_one_source_row_is_batch_independent():
    """A row decodes the same alone as inside a padded batch (padding is masked)."""
    net = tiny_net()
    source, padding = source_batch()
    prompt = torch.ones(3, 1, dtype=torch.long)
    batch = beam_search(net, source, prompt, EOS, padding, beam_size=3, max_new_tokens=10)
    alone = beam_search(net, source[2:, :3], prompt[2:], EOS, None, beam_size=3, max_new_tokens=10)
    assert strip_eos(batch, EOS)[2] == strip_eos(alone, EOS)[0]

"""The attention maps label each position by what its embedder says it is (``describe_positions``),
and place the patches on their grid from the same description."""

import torch

from zoo.data.tokenizers import CharTokenizer
from zoo.nn.embedders import AudioEmbedder, PatchEmbedder, Position, TokenEmbedder
from zoo.nn.multimodal import MultimodalEmbedder
from zoo.viz.attention_maps import patch_grid, position_labels


def test_an_image_embedder_says_its_cls_then_its_patches_row_by_row():
    embedder = PatchEmbedder(image_size=12, patch_size=4, d_model=8)
    positions = embedder.describe_positions(torch.zeros(1, 3, 12, 12))
    assert len(positions) == embedder.output_length(torch.zeros(1, 3, 12, 12)) == 10
    assert positions[:3] == [Position("cls"), Position("patch", (0, 0)), Position("patch", (0, 1))]
    assert positions[4] == Position("patch", (1, 0)) and positions[-1] == Position("patch", (2, 2))
    assert position_labels(positions)[:5] == ["[CLS]", "(0,0)", "(0,1)", "(0,2)", "(1,0)"]
    # the patches' values on their grid: what the patch embedding's conv output holds at (row, column)
    values = torch.arange(10.0)
    assert torch.equal(patch_grid(positions, values), torch.tensor([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]]))
    no_cls = PatchEmbedder(image_size=8, patch_size=4, d_model=8, cls_token=False)
    assert no_cls.describe_positions(None)[0] == Position("patch", (0, 0))


def test_text_audio_and_image_tokens_are_labelled_by_what_they_are():
    tokenizer = CharTokenizer.from_text("ab\n")
    ids = torch.tensor([tokenizer.encode("ab\n")])
    assert position_labels(TokenEmbedder(8, 4, 16).describe_positions(ids), tokenizer) == ["a", "b", "\\n"]
    audio = AudioEmbedder(n_mels=80, d_model=8, max_len=16)
    features = torch.zeros(1, 80, 7)  # 7 frames -> 4 vectors, every second frame: 0, 20, 40, 60 ms
    assert position_labels(audio.describe_positions(features)) == ["0.00s", "0.02s", "0.04s", "0.06s"]
    vision = type("Vision", (torch.nn.Module,), {"d_out": 4})()
    image_id = tokenizer.vocab_size  # one past the text: only the placeholder has it
    llava = MultimodalEmbedder(TokenEmbedder(image_id + 1, 4, 16), vision, "linear", image_id)
    tokens = torch.tensor([[tokenizer.token_id("a"), image_id, image_id, image_id, tokenizer.token_id("b")]])
    assert position_labels(llava.describe_positions(tokens), tokenizer) == ["a", "<img0>", "<img1>", "<img2>", "b"]

"""``model.init_from=hf:<repo>[@revision]``: read from a Hugging Face Hub cache the test lays out
itself (the layout ``huggingface_hub`` writes: refs/, snapshots/<commit>/), offline; a repository
that is not in the cache, offline, is an error naming it and how to fetch it."""

from __future__ import annotations

import shutil

import pytest
import torch
from huggingface_hub import constants

from exactness import assert_matches
from test_init_from import objective_from, tiny_gpt2, word_level_tokenizer
from zoo.convert.hub import resolve
from zoo.data.pretrained import tokenizer_of

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An offline Hub cache at tmp_path/hub: the zoo reads it as huggingface_hub does."""
    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def put_in_cache(cache, repo: str, folder, ref: str = "main"):
    """Lay ``folder``'s files out as the snapshot of ``repo`` at ``ref``."""
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(folder, root / "snapshots" / COMMIT)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(COMMIT)


@torch.no_grad()
def test_init_from_a_hub_repo_in_the_cache(tmp_path, hub):
    hf = tiny_gpt2(tmp_path / "saved")
    word_level_tokenizer(["<pad>", *(f"w{i}" for i in range(49))]).save(str(tmp_path / "saved" / "tokenizer.json"))
    put_in_cache(hub, "someone/tiny-gpt2", tmp_path / "saved")
    for source in ("hf:someone/tiny-gpt2", "hf:someone/tiny-gpt2@main"):
        model = objective_from("gpt", source, {"vocab_size": 50})
        ids = torch.randint(0, 50, (2, 24))
        assert_matches(model.net.eval()(ids), hf(ids).logits, what=f"GPT-2 logits from {source}")
    assert tokenizer_of("hf:someone/tiny-gpt2").encode("w3 w7") == [5, 9]  # the data reads the same folder


def test_a_repo_missing_offline_names_it_and_how_to_fetch_it(hub):
    with pytest.raises(FileNotFoundError, match=r"hf:someone/absent@v2: not in the Hub cache .*HF_HUB_OFFLINE "
                                                r"is set; fetch it with `hf download someone/absent --revision v2`"):
        resolve("hf:someone/absent@v2")


def test_a_malformed_name_and_a_local_path():
    with pytest.raises(ValueError, match="expected hf:<repo id>"):
        resolve("hf:not a repo")
    assert resolve("/some/local/dir") == "/some/local/dir"

"""The model x data table: which pairs the start-up check lets train, that the README shows it,
that a refused pair is refused in one line naming both sides, and (slow) that every pair the
table says trains does: fit and test, two steps at tiny sizes, on small generated corpora."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pytest
from omegaconf import open_dict

from bert_wikitext_files import write_wikitext
from conftest import ROOT, write_shakespeare
from zoo.convert.common import compose_config
from zoo.data.batches import AudioText, PaddedTokens, SequencePairs, TokenWindows, WaveText
from zoo.train.compat import batch_type, choices, configs, model_data_table, shared_types

MARKER = "<!-- model-data-table -->"
MODEL_CFGS, DATA_CFGS = configs("model"), configs("data")  # composed once for every test here


@pytest.fixture(scope="module")
def table() -> str:
    return model_data_table(MODEL_CFGS, DATA_CFGS)


def test_readme_holds_the_generated_table(table):
    parts = (ROOT / "README.md").read_text().split(MARKER)
    if len(parts) == 1:
        pytest.skip(f"README.md has no {MARKER} markers yet (the generated table goes between two of them)")
    assert len(parts) == 3, f"README.md should hold exactly two {MARKER} markers, it holds {len(parts) - 1}"
    assert parts[1].strip() == table, "README.md's model x data table is stale: paste model_data_table()"


def test_table_names_every_preset_once_with_the_data_it_trains_on(table):
    rows = [row.strip("| ").split(" | ") for row in table.splitlines()[2:]]
    named = [model for models, _ in rows for model in models.split(", ")]
    assert sorted(named) == choices("model")  # every preset, once
    for models, trains in rows:
        for model in models.split(", "):
            wanted = [d for d in choices("data") if shared_types(MODEL_CFGS[model], DATA_CFGS[d])]
            assert trains.split(", ") == (wanted or ["nothing"]), model


def _pair(model: str, data: str):
    return MODEL_CFGS[model], DATA_CFGS[data]


@pytest.mark.parametrize("model, data, expected", [
    ("gpt", "wikitext", TokenWindows), ("llama", "wikitext", TokenWindows), ("gpt", "tinyshakespeare", TokenWindows),
    ("bert", "wikitext", PaddedTokens), ("bert", "tinyshakespeare", PaddedTokens),
    ("t5", "wikitext", PaddedTokens), ("t5", "tinyshakespeare", PaddedTokens), ("t5", "multi30k", SequencePairs),
    ("transformer", "multi30k", SequencePairs),
])
def test_text_models_read_the_batch_type_they_need(model, data, expected):
    assert batch_type(*_pair(model, data), model, data) is expected


@pytest.mark.parametrize("model, expected", [("whisper", AudioText), ("wav2vec2", WaveText)])
@pytest.mark.parametrize("data", ["fsdd", "librispeech", "yesno"])
def test_speech_models_read_the_batch_type_they_need(model, data, expected):
    """One speech corpus, the batch kind each model reads: log-mel for Whisper, raw audio for CTC."""
    assert batch_type(*_pair(model, data), model, data) is expected


@pytest.mark.parametrize("model, data, reads, yields", [
    ("vit", "tinyshakespeare", "ImageLabels", "TokenWindows or PaddedTokens"),
    ("whisper", "cifar10", "AudioText", "ImageLabels"),
    ("bert", "fsdd", "PaddedTokens", "AudioText or WaveText"),
    ("wav2vec2", "cifar10", "WaveText", "ImageLabels"),
    ("transformer", "wikitext", "SequencePairs", "PaddedTokens or TokenWindows"),  # no span corruption configured
    ("vit", "moving_shapes", "ImageLabels", "VideoClips"),
    ("vivit", "cifar10", "VideoClips", "ImageLabels"),
    ("llava", "cifar10", "ImageText", "ImageLabels"),
])
def test_a_pair_that_cannot_work_is_refused_in_one_line_naming_both_sides(model, data, reads, yields):
    with pytest.raises(ValueError) as err:
        batch_type(*_pair(model, data), model, data)
    message = str(err.value)
    assert "\n" not in message
    assert re.match(rf"model={model} \(\w+\) reads {reads} batches, but data={data} \(\w+\) yields {yields}: ", message)


# --- every "trains" cell, at tiny size -----------------------------------------------------

TINY_BLOCK = ["model.net.block.d_model=32", "model.net.block.n_heads=2"]
TINY_LM = ["model.net.n_layers=2", "model.net.context=32", *TINY_BLOCK]
TINY_SEQ2SEQ = ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", *TINY_BLOCK,
                "model.decoding.max_new_tokens=4", "model.decoding.beam_size=2"]
TINY_LLAVA = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=4",
              "model.net.block.d_ff=64"]
TINY_VISION = ["model.net.embedder.vision.model.block.d_model=32", "model.net.embedder.vision.model.n_layers=2",
               "model.net.embedder.vision.model.embedder.patch_size=16"]

# The CPU-sized presets (not the paper-sized ones, which the table lists too), at tiny sizes.
MODELS: dict[str, list[str]] = {
    "gpt": [*TINY_LM, "model.sample_tokens=0"],
    "gpt_neo": [*TINY_LM, "model.sample_tokens=0"],
    "llama": [*TINY_LM, "+model.sample_tokens=0"],
    "mistral": [*TINY_LM, "+model.sample_tokens=0"],
    "bert": TINY_LM,
    "modernbert": [*TINY_LM, "model.net.n_layers=3", "model.net.mask.masks.1.window=8"],  # one global, two local
    "t5": [*TINY_SEQ2SEQ, "model.net.context=40", "model.net.block.d_ff=64"],
    "transformer": TINY_SEQ2SEQ,
    "whisper": TINY_SEQ2SEQ,
    "vit": ["model.net.n_layers=1", *TINY_BLOCK],
    "vivit": ["model.net.n_layers=1", *TINY_BLOCK],
    "videomae": ["model.net.n_layers=1", *TINY_BLOCK],
    "yolos": ["model.net.n_layers=1", *TINY_BLOCK],
    "llava": [*TINY_LLAVA, *TINY_VISION],
    "llava_gpt": [*TINY_LLAVA, *TINY_VISION],
    "llava_timm": TINY_LLAVA,
    "gpt_sparse": [*TINY_LM, "model.sample_tokens=0"],
    "bigbird": [*TINY_LM, "model.net.mask.block_size=2", "model.net.mask.n_random=1"],
    "vitdet": ["model.net.n_layers=3", *TINY_BLOCK],
    "roberta": TINY_LM,
    "distilbert": TINY_LM,
    # 64 samples a vector (the released 320 leave the corpora's 0.2 s clips 10 vectors, fewer than
    # their transcripts' characters: CTC has no alignment, the loss is inf)
    "wav2vec2": ["model.net.n_layers=1", *TINY_BLOCK, "model.net.embedder.conv_dim=[8,8,8]",
                 "model.net.embedder.conv_kernel=[4,4,4]", "model.net.embedder.conv_stride=[4,4,4]",
                 "model.net.embedder.n_conv_pos=4", "model.net.embedder.conv_pos_groups=2"],
}


def _files(write: Callable[[Path], object], *overrides: str) -> Callable[[Path], list[str]]:
    """A data maker: ``write`` the corpus's files under the data folder, then these overrides."""
    def make(data: Path) -> list[str]:
        write(data)
        return list(overrides)
    return make


def _generated(*overrides: str) -> Callable[[Path], list[str]]:
    return lambda data: list(overrides)


def _images(data: Path) -> None:
    from test_vit_data import make_image_folder
    make_image_folder(data, {"train": 4, "test": 2})


def _captions(data: Path) -> None:
    from test_bad_input_data import cifar10_folder
    cifar10_folder(data)


def _flickr8k(data: Path) -> None:
    from test_llava import write_flickr8k
    write_flickr8k(data)


def _multi30k(data: Path) -> None:
    from test_transformer_multi30k import write_corpus
    write_corpus(data)


def _fsdd(data: Path) -> None:
    from test_whisper_data import write_fsdd
    write_fsdd(data, speakers=("alice",), takes=range(8))


def _corpus(name: str) -> Callable[[Path], None]:
    def write(data: Path) -> None:
        import test_whisper_corpora
        getattr(test_whisper_corpora, f"write_{name}")(data)
    return write


def _coco(data: Path) -> None:
    from test_coco import write_layout
    write_layout(data, copies=2)  # 4 training images: one global batch of data.batch_size=4


def _ucf101(data: Path) -> None:
    from test_video_ucf101 import make_ucf101
    make_ucf101(data)


def _audio(data: Path) -> list[str]:
    from test_data_audio import write_corpus
    return [f"data.source={write_corpus(data / 'audio')}", "data.val_fraction=0.25", "data.test_fraction=0.25"]


def _text(data: Path) -> list[str]:
    from test_data_text import write_corpus
    return [f"data.source={write_corpus(data / 'text', files=6)}"]


def _image_tree(data: Path) -> list[str]:
    from test_data_images import write_tree
    return [f"data.source={write_tree(data / 'photos')}", "data.image_size=32"]


def _pairs(data: Path) -> list[str]:
    from test_data_pairs import pairs, write_jsonl
    rows = [{"source": r["de"], "target": r["en"]} for r in pairs(40)]
    return [f"data.source={write_jsonl(data / 'pairs.jsonl', rows)}", "data.vocab_size=120"]


def _tokens(data: Path) -> list[str]:
    from test_data_tokens import prepare
    return [f"data.source={prepare(_text(data)[0].split('=', 1)[1], data / 'shards')}"]


def _instructions(data: Path) -> list[str]:
    from test_task_sft import QA, write_rows
    return [f"data.source={write_rows(data / 'rows.jsonl', QA)}", *INSTRUCTIONS]


def _gsm8k(data: Path) -> None:
    from test_task_sft import write_gsm8k
    write_gsm8k(data)


def _gpteacher(data: Path) -> None:
    from test_task_sft import write_gpteacher
    write_gpteacher(data)


INSTRUCTIONS = ["data.vocab_size=300", "data.template=plain"]  # a prompt of a few tokens: contexts of 32
SMALL = ["data.train_size=8", "data.val_size=4", "data.test_size=4"]
DATA: dict[str, Callable[[Path], list[str]]] = {
    "tinyshakespeare": _files(write_shakespeare, "data.check=false", "data.val_batches=1"),
    "wikitext": _files(write_wikitext, "data.vocab_size=120"),
    "text": _text,
    "audio": _audio,
    "tokens": _tokens,
    "multi30k": _files(_multi30k, "data.vocab_size=120"),
    "pairs": _pairs,
    "cifar10": _files(_images, "data.val_size=8"),
    "images": _image_tree,
    "cifar10_captions": _files(_captions),
    "flickr8k": _files(_flickr8k, "data.min_count=1"),
    "shapes_vqa": _generated("data.val_size=4", "data.test_size=4"),
    "fsdd": _files(_fsdd, "data.val_takes=2", "data.test_passes=1"),
    "librispeech": _files(_corpus("librispeech")),
    "ljspeech": _files(_corpus("ljspeech"), "data.val_fraction=0.25", "data.test_fraction=0.25"),
    "speechcommands": _files(_corpus("speechcommands")),
    "yesno": _files(_corpus("yesno"), "data.val_fraction=0.25", "data.test_fraction=0.25"),
    "moving_shapes": _generated(*SMALL),
    "ucf101": _files(_ucf101, "data.val_groups=1"),
    "shapes_detection": _generated(*SMALL),
    "instructions": _instructions,
    "gsm8k": _files(_gsm8k, *INSTRUCTIONS),
    "gpteacher_codegen": _files(_gpteacher, *INSTRUCTIONS),
    "coco": _files(_coco, "data.image_size=32", "data.max_objects=4", "data.val_size=2", "data.num_workers=0"),
}
COMMON = ["trainer=cpu", "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
          "+trainer.limit_test_batches=2", "trainer.log_every_n_steps=1", "+trainer.enable_progress_bar=false",
          "~callbacks.progress_bar", "+trainer.enable_model_summary=false", "optim.warmup_steps=1",
          "data.batch_size=4", "test=true"]


CELLS = [(m, d) for m in MODELS for d in DATA_CFGS if shared_types(MODEL_CFGS[m], DATA_CFGS[d])]


def test_every_training_cell_of_a_cpu_preset_has_a_corpus():
    assert {d for _, d in CELLS} <= DATA.keys()
    assert set(MODELS) <= set(choices("model"))


@pytest.mark.slow
@pytest.mark.parametrize("model, data", CELLS)
def test_every_training_cell_fits_and_tests(model, data, tmp_path):
    from zoo.train.run import train

    folder = tmp_path / "data"
    folder.mkdir()
    cfg = compose_config([f"model={model}", f"data={data}", *COMMON, *DATA[data](folder), *MODELS[model],
                          f"paths.data_dir={folder}", f"paths.cache_dir={tmp_path / 'cache'}"])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "run")
    metrics = train(cfg)
    assert metrics["test/loss"] == metrics["test/loss"], f"model={model} data={data}: test/loss is NaN"

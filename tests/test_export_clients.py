"""Exports that the real clients run from the folder alone (zoo/convert/export.py): for each family
with a pipeline task, a tiny checkpoint built here is exported and the ``transformers`` pipeline,
given nothing but the folder, answers what the zoo's own command answers; the folder holds the
run's own special ids, labels, tokenizer and processor; a non-empty ``out=`` is refused; a
checkpoint whose outputs are not finite is not exported; every family's from-scratch checkpoint
exports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from exactness import randomise
from zoo.cli.commands import call
from zoo.convert.common import compose_config
from zoo.convert.export import export
from zoo.data.tokenizers import CharTokenizer, HFTokenizer, WordTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n"


def checkpoint(path: Path, model: str, dims: dict, *overrides: str, tokenizer=None, **hparams) -> torch.nn.Module:
    """A zoo checkpoint of ``model=<model>`` at ``path``, built as train.py builds it (the data's
    ``dims``, its ``tokenizer``, objective ``hparams`` the data would give, e.g. ``class_names``),
    its weights drawn away from their init so that its outputs are worth comparing. Returns the net."""
    from zoo.registry import name_of
    from zoo.train.run import objective

    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
        cfg.model.update(hparams)
    built = objective(cfg, tokenizer.state() if tokenizer is not None else None)
    randomise(built.net, gain=2.0)
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, path)
    return built.net.eval()


TINY_LM = ["model.net.n_layers=2", "model.net.block.d_model=16", "model.net.block.n_heads=2",
           "model.net.block.d_ff=32", "model.net.context=64"]


def _generated(capsys, ckpt: Path, prompt: str, n: int) -> str:
    """``zoo generate``'s greedy continuation of ``prompt`` (``n`` tokens), as it prints it."""
    capsys.readouterr()
    call("generate", [f"ckpt={ckpt}", f"prompt='{prompt}'", f"max_new_tokens={n}", "temperature=0"])
    return capsys.readouterr().out.split("\n---\n")[0]


@pytest.mark.parametrize("model,overrides", [("gpt", []), ("mistral", ["model.net.block.n_kv_heads=1",
                                                                       "model.net.mask.window=8"])])
def test_a_char_level_language_model_generates_in_the_text_generation_pipeline(tmp_path, capsys, model, overrides):
    """The run's char tokenizer travels as a tokenizers folder; no special id of GPT-2 / Mistral's
    own vocabulary (50256, 1, 2 = "!") is left in the config: a char-level run has none."""
    from transformers import AutoTokenizer, pipeline

    tok = CharTokenizer.from_text(TEXT)
    checkpoint(tmp_path / "lm.ckpt", model, {"vocab_size": tok.vocab_size}, *TINY_LM, *overrides, tokenizer=tok)
    export(tmp_path / "lm.ckpt", tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert config.get(key) is None and generation.get(key) is None, key
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= set(
        p.name for p in (tmp_path / "out").iterdir())
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert hf_tok(TEXT, add_special_tokens=True).input_ids == tok.encode(TEXT)
    assert hf_tok.model_max_length == 64
    prompt = "Speak, "
    text = pipeline("text-generation", model=str(tmp_path / "out"))(prompt, max_new_tokens=12, do_sample=False)
    assert text[0]["generated_text"] == _generated(capsys, tmp_path / "lm.ckpt", prompt, 12)


def _wordpiece() -> HFTokenizer:
    """BERT's WordPiece of :data:`TEXT` (what data=wikitext trains), its specials first."""
    return HFTokenizer.train_wordpiece([TEXT] * 4, 80, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])


@pytest.mark.parametrize("model,layers", [("bert", 2), ("modernbert", 3)])  # ModernBERT: global, local, local
@torch.no_grad()
def test_a_masked_lm_fills_the_mask_in_the_fill_mask_pipeline(tmp_path, model, layers):
    """The folder's tokenizer names [MASK] and wraps the text in [CLS] ... [SEP] as the zoo's data
    does; the pipeline's top tokens and scores are the zoo net's at the masked place."""
    from transformers import pipeline

    tok = _wordpiece()
    specials = [tok.token_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    dims = {"vocab_size": tok.vocab_size, "mask_id": specials[4], "special_ids": specials, "pad_id": 0}
    net = checkpoint(tmp_path / "mlm.ckpt", model, dims, *TINY_LM[1:], f"model.net.n_layers={layers}", tokenizer=tok)
    export(tmp_path / "mlm.ckpt", tmp_path / "out")
    fill = pipeline("fill-mask", model=str(tmp_path / "out"), top_k=3)
    found = fill("before we [MASK] any further")
    ids = [specials[2], *tok.encode("before we [MASK] any further"), specials[3]]
    at = ids.index(specials[4])
    probs = net(torch.tensor([ids]))[0, at].softmax(-1)
    best = probs.topk(3)
    assert [f["token"] for f in found] == best.indices.tolist()
    assert [f["score"] for f in found] == pytest.approx(best.values.tolist(), abs=1e-5)


def _png(path: Path, size: int, seed: int = 0) -> Path:
    """A random RGB image of ``size`` x ``size`` pixels written at ``path``."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


TINY_VISION = ["model.net.n_layers=2", "model.net.block.d_model=16", "model.net.block.n_heads=2",
               "model.net.block.d_ff=32"]
NAMES = ["circle", "square", "triangle"]
MEAN, STD = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]


@torch.no_grad()
def test_a_vit_classifies_in_the_image_classification_pipeline(tmp_path):
    """preprocessor_config.json reads the image with the run's mean and std; id2label is the data's
    class names; the pipeline's labels and scores are the zoo net's on the zoo's own reading."""
    from transformers import pipeline

    from zoo.data.images import load_image, to_tensor

    dims = {"num_classes": 3, "image_size": 16, "channels": 3, "class_names": NAMES, "pixel_mean": MEAN,
            "pixel_std": STD}
    net = checkpoint(tmp_path / "vit.ckpt", "vit", dims, *TINY_VISION, "model.net.embedder.patch_size=4")
    export(tmp_path / "vit.ckpt", tmp_path / "out")
    image = _png(tmp_path / "x.png", 16)
    found = pipeline("image-classification", model=str(tmp_path / "out"))(str(image), top_k=3)
    probs = net(to_tensor(load_image(image), 16, mean=MEAN, std=STD)[None])[0].softmax(-1)
    best = probs.topk(3)
    assert [f["label"] for f in found] == [NAMES[i] for i in best.indices.tolist()]
    assert [f["score"] for f in found] == pytest.approx(best.values.tolist(), abs=1e-5)


TWO_TOWER = ["model.net.n_layers=1", "model.net.block.d_model=16", "model.net.block.n_heads=2",
             "model.net.vision.n_layers=1", "model.net.vision.block.d_model=16", "model.net.vision.block.n_heads=2"]
CLASSES = ["airplane", "automobile", "cat", "dog", "horse"]


@pytest.mark.parametrize("model", ["clip", "siglip"])
@torch.no_grad()
def test_a_two_tower_model_classifies_in_the_zero_shot_pipeline_as_zoo_classify(tmp_path, model):
    """A CLIP / SigLIP of its shipped config on data=cifar10_captions' vocabulary (a word vocabulary:
    ``<eos>`` is id 2, CLIPTextTransformer's legacy id, so the export renumbers it): the folder's
    tokenizer gives the zoo's caption (its words, then the end of text), and the pipeline, given the
    folder and the zoo's prompt only, ranks and scores the labels as ``zoo classify`` does (CLIP's
    softmax, SigLIP's sigmoid on the caption padded to 64, as both pad it) on images of the tower's size."""
    from transformers import AutoProcessor, AutoTokenizer, pipeline

    from zoo.data.cifar10_captions import caption

    tok = WordTokenizer.from_texts(caption(name) for name in CLASSES)  # as Cifar10Captions builds it
    dims = {"vocab_size": tok.vocab_size, "image_token_id": tok.image_id, "eos_id": tok.eos_id, "prompt": "<image>",
            "metric": "exact_match", "class_names": CLASSES, "class_prompts": [caption(c) for c in CLASSES]}
    checkpoint(tmp_path / "m.ckpt", model, dims, *TWO_TOWER, tokenizer=tok)
    export(tmp_path / "m.ckpt", tmp_path / "out")
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    ids = hf_tok("a photo of a cat").input_ids
    assert hf_tok.convert_ids_to_tokens(ids) == [tok.words[i] for i in tok.encode("a photo of a cat")] + ["<eos>"]
    text = json.loads((tmp_path / "out" / "config.json").read_text())["text_config"]
    assert text["eos_token_id"] == ids[-1]
    assert (ids[-1] != 2) == (model == "clip")  # CLIP pools at its end of text, not at the largest id
    assert type(AutoProcessor.from_pretrained(tmp_path / "out")).__name__ == {"clip": "CLIPProcessor",
                                                                               "siglip": "SiglipProcessor"}[model]
    classify = pipeline("zero-shot-image-classification", model=str(tmp_path / "out"))
    for seed in range(3):
        image = _png(tmp_path / f"{seed}.png", 32, seed)
        ours = call("classify", [f"ckpt={tmp_path / 'm.ckpt'}", f"image={image}", f"labels=[{','.join(CLASSES)}]"])
        found = classify(str(image), candidate_labels=CLASSES, hypothesis_template="a photo of a {}")
        assert [f["label"] for f in found] == [label for label, _ in ours]
        assert [f["score"] for f in found] == pytest.approx([score for _, score in ours], abs=1e-5)


def test_swapping_two_ids_of_a_tokenizer_trades_their_tokens_and_refuses_a_post_processor():
    """What the CLIP export renumbers with: the two tokens trade ids, every other id stays; a
    post-processor (BERT's [CLS] ... [SEP], naming ids of its own) is refused, not left stale."""
    from tokenizers import processors

    from zoo.data.tokenizers import backend, swapped

    words = WordTokenizer.from_texts(["a photo of a cat", "a photo of a dog"])
    last = words.vocab_size - 1
    swap = swapped(words, words.eos_id, last)
    text = "a photo of a dog <eos>"
    assert swap.encode(text) == [{words.eos_id: last, last: words.eos_id}.get(i, i) for i in words.encode(text)]
    assert backend(swap).token_to_id("<eos>") == last
    bert = _wordpiece()
    bert.tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                                  special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    with pytest.raises(ValueError, match="cannot swap ids 2 and 4 of a WordPiece tokenizer with post-processor "
                                         "TemplateProcessing"):
        swapped(bert, 2, 4)


@pytest.mark.slow  # trains: ~15 s on one core
def test_a_clip_trained_by_its_cpu_recipe_exports_and_classifies_in_the_pipeline_as_zoo_classify(tmp_path):
    """The filed case: ``experiment=clip_cifar10_captions_cpu`` (a few steps, on a tiny CIFAR-10
    folder) trains a CLIP whose end of text is the word vocabulary's id 2; ``zoo export`` writes it
    and the pipeline gives ``zoo classify``'s ranking and scores on the data's test images."""
    from transformers import pipeline

    from test_bad_input_data import cifar10_folder
    from test_llava import run_config
    from zoo.train.run import train

    data = cifar10_folder(tmp_path / "data")
    train(run_config(tmp_path / "run", ["experiment=clip_cifar10_captions_cpu", f"paths.data_dir={data}",
                                        "trainer.max_steps=2", "trainer.val_check_interval=2",
                                        "~callbacks.recipe_milestones"]))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    call("export", [f"ckpt={ckpt}", f"out={tmp_path / 'out'}"])
    classify = pipeline("zero-shot-image-classification", model=str(tmp_path / "out"))
    labels = ["airplane", "cat", "dog"]
    for image in sorted((data / "cifar10" / "test").glob("*/[01].jpg")):
        ours = call("classify", [f"ckpt={ckpt}", f"image={image}", f"labels=[{','.join(labels)}]"])
        found = classify(str(image), candidate_labels=labels, hypothesis_template="a photo of a {}")
        assert [f["label"] for f in found] == [label for label, _ in ours]
        assert [f["score"] for f in found] == pytest.approx([score for _, score in ours], abs=1e-5)


def test_a_yolos_detects_in_the_object_detection_pipeline(tmp_path, capsys):
    """The pipeline finds what ``zoo detect`` finds (labels by name, scores, boxes in pixels; the
    pipeline rounds boxes down to whole pixels and does not clip them to the image, zoo detect does)."""
    from transformers import pipeline

    dims = {"num_classes": 3, "image_size": 32, "channels": 3, "class_names": NAMES, "max_objects": 3,
            "pixel_mean": MEAN, "pixel_std": STD}
    checkpoint(tmp_path / "yolos.ckpt", "yolos", dims, *TINY_VISION, "model.net.embedder.patch_size=8",
               "model.net.embedder.n_detections=5")
    export(tmp_path / "yolos.ckpt", tmp_path / "out")
    image = _png(tmp_path / "x.png", 32)
    capsys.readouterr()
    call("detect", [f"ckpt={tmp_path / 'yolos.ckpt'}", f"image={image}", "threshold=0.0",
                    f"out={tmp_path / 'drawn.png'}"])
    ours = json.loads(capsys.readouterr().out)
    theirs = pipeline("object-detection", model=str(tmp_path / "out"))(str(image), threshold=0.0)
    theirs = sorted(theirs, key=lambda d: -d["score"])
    assert len(theirs) == len(ours) == 5
    assert [d["label"] for d in theirs] == [d["label"] for d in ours]
    assert [d["score"] for d in theirs] == pytest.approx([d["score"] for d in ours], abs=1e-4)
    for d, o in zip(theirs, ours):
        box = [min(max(d["box"][k], 0), 32) for k in ("xmin", "ymin", "xmax", "ymax")]
        assert box == pytest.approx(o["box"], abs=1.0)


CTC_TINY = ["model.net.n_layers=1", "model.net.block.d_model=16", "model.net.block.n_heads=2",
            "model.net.block.d_ff=32", "model.net.embedder.conv_dim=[8,8,8]", "model.net.embedder.n_conv_pos=4",
            "model.net.embedder.conv_pos_groups=2"]


@pytest.mark.parametrize("converter", ["wav2vec2", "hubert"])
def test_a_ctc_model_transcribes_in_the_asr_pipeline_as_zoo_transcribe(tmp_path, capsys, converter):
    """A wav2vec 2.0 of its shipped config, or the same net as a HuBERT (``model.converter=
    zoo.convert.hubert.pretrained``: written as ``HubertForCTC``), on data=fsdd's characters: the folder's
    Wav2Vec2CTCTokenizer encodes a transcript as the zoo does and decodes ids as the zoo's greedy
    decoding (repeats collapsed, then the blank dropped; start and end of text read as the blank),
    its feature extractor normalises a wave as the zoo; the ASR pipeline, given the folder alone,
    gives ``zoo transcribe``'s transcripts (without their end spaces: the tokenizer strips them)."""
    import numpy as np
    import soundfile
    from transformers import AutoFeatureExtractor, AutoProcessor, AutoTokenizer, pipeline

    from zoo.data.audio import normalise_wave
    from zoo.data.fsdd import WORDS
    from zoo.data.speech import SPECIALS
    from zoo.models.ctc import greedy

    tok = CharTokenizer.from_text(" ".join(WORDS), specials=SPECIALS)  # as FSDD builds it (data.tokenizer=char)
    pad, bos, eos = (tok.token_id(t) for t in SPECIALS)
    dims = {"vocab_size": tok.vocab_size, "n_mels": 80, "pad_id": pad, "bos_id": bos, "eos_id": eos,
            "audio_window": None}
    checkpoint(tmp_path / "ctc.ckpt", "wav2vec2", dims, *CTC_TINY,
               f"model.converter=zoo.convert.{converter}.pretrained", tokenizer=tok)
    written, _ = export(tmp_path / "ctc.ckpt", tmp_path / "out")
    assert written == {"wav2vec2": "Wav2Vec2ForCTC", "hubert": "HubertForCTC"}[converter]
    assert type(AutoProcessor.from_pretrained(tmp_path / "out")).__name__ == "Wav2Vec2Processor"
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert hf_tok("seven two").input_ids == tok.encode("seven two")
    o, n, e, space = (tok.token_id(c) for c in "one ")
    best = torch.tensor([[o, o, pad, o, bos, o, n, n, eos, n, pad, space, space, e, eos, pad, e]])
    ids = greedy(torch.nn.functional.one_hot(best, tok.vocab_size).float(), None, pad)[0]
    assert hf_tok.decode(best[0].tolist()) == tok.decode(ids) == "ooonn ee"
    wave = (0.3 * np.sin(np.arange(16000) / 9.0) + 0.05 * np.random.default_rng(0).standard_normal(16000)
            ).astype(np.float32)
    values = AutoFeatureExtractor.from_pretrained(tmp_path / "out")(wave, sampling_rate=16000,
                                                                      return_tensors="pt").input_values
    torch.testing.assert_close(values[0], normalise_wave(torch.from_numpy(wave)), atol=1e-5, rtol=1e-5)
    asr = pipeline("automatic-speech-recognition", model=str(tmp_path / "out"))
    for seed, seconds in ((0, 1.0), (1, 0.6), (2, 1.7)):
        clip = (0.2 * np.random.default_rng(seed).standard_normal(int(seconds * 16000))).astype(np.float32)
        soundfile.write(tmp_path / f"{seed}.wav", clip, 16000, subtype="FLOAT")
        capsys.readouterr()
        call("transcribe", [f"ckpt={tmp_path / 'ctc.ckpt'}", f"audio={tmp_path / f'{seed}.wav'}"])
        ours = capsys.readouterr().out.rstrip("\n").split("\t")[1]
        assert ours.strip()  # random weights: not an empty transcript
        assert asr({"raw": clip, "sampling_rate": 16000})["text"] == ours.strip()


def test_a_ctc_model_of_a_bpe_vocabulary_keeps_its_tokenizer_with_a_warning(tmp_path, caplog):
    """Wav2Vec2CTCTokenizer joins tokens as they are: a BPE run's (``data.tokenizer=bpe``) cannot be one,
    so the folder keeps the tokenizers file and the export says the pipeline's text will differ."""
    from zoo.data.fsdd import WORDS
    from zoo.data.speech import BPE_SPECIALS
    from zoo.data.tokenizers import train_bpe

    tok = train_bpe([" ".join(WORDS)] * 4, 40, tmp_path / "bpe.json", BPE_SPECIALS)
    checkpoint(tmp_path / "ctc.ckpt", "wav2vec2", {"vocab_size": tok.vocab_size, "pad_id": 0}, *CTC_TINY, tokenizer=tok)
    with caplog.at_level("WARNING"):
        export(tmp_path / "ctc.ckpt", tmp_path / "out")
    assert "tokenizer is not one of characters" in caplog.text
    assert (tmp_path / "out" / "tokenizer.json").is_file() and not (tmp_path / "out" / "vocab.json").exists()


def _tiny_gpt(path: Path) -> torch.nn.Module:
    tok = CharTokenizer.from_text(TEXT)
    return checkpoint(path, "gpt", {"vocab_size": tok.vocab_size}, *TINY_LM, tokenizer=tok)


def test_a_non_empty_out_is_refused_unless_overwrite_and_then_nothing_of_before_stays(tmp_path):
    """A user's own file in ``out=`` is not overwritten; with ``overwrite=true`` the folder holds
    the new export only (an earlier export's files of another family do not stay beside it)."""
    _tiny_gpt(tmp_path / "lm.ckpt")
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}')
    with pytest.raises(FileExistsError, match="already holds files: .*overwrite=true"):
        call("export", [f"ckpt={tmp_path / 'lm.ckpt'}", f"out={out}"])
    assert (out / "config.json").read_text() == '{"mine": true}'
    (out / "preprocessor_config.json").write_text("{}")  # as an earlier ViT export leaves
    call("export", [f"ckpt={tmp_path / 'lm.ckpt'}", f"out={out}", "overwrite=true"])
    assert not (out / "preprocessor_config.json").exists()
    assert json.loads((out / "config.json").read_text())["model_type"] == "gpt2"
    assert not list(tmp_path.glob(".out*")), "the partial folder is gone"


def test_a_checkpoint_with_nan_weights_is_not_exported(tmp_path):
    """NaN weights give NaN outputs on both sides, whose difference is NaN: the check fails on
    it (``diff > tol`` is False for NaN) and names the tensor; nothing is written."""
    _tiny_gpt(tmp_path / "lm.ckpt")
    ckpt = torch.load(tmp_path / "lm.ckpt", weights_only=True)
    key = next(k for k in ckpt["state_dict"] if k.endswith("blocks.0.attn.q.weight"))
    ckpt["state_dict"][key][0, 0] = float("nan")
    torch.save(ckpt, tmp_path / "lm.ckpt")
    with pytest.raises(ValueError, match=r"not finite .*blocks\.0\.attn\.q\.weight"):
        export(tmp_path / "lm.ckpt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


TEXT_PAIR = {"vocab_size": 40, "eos_id": 2, "bos_id": 1, "pad_id": 0}
FROM_SCRATCH = {  # model -> (dims, overrides): a from-scratch checkpoint of every family with a class
    "t5": (TEXT_PAIR, ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=16",
                       "model.net.block.n_heads=2", "model.net.block.d_ff=32"]),
    "whisper": ({**TEXT_PAIR, "n_mels": 8}, ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
                                             "model.net.block.d_model=16", "model.net.block.n_heads=2",
                                             "model.net.block.d_ff=32", "model.net.encoder_embedder.n_mels=8",
                                             "model.net.encoder_embedder.max_len=16", "model.net.context=16"]),
    "gpt_neo": ({"vocab_size": 30}, TINY_LM),
    "llama": ({"vocab_size": 30}, TINY_LM),
    "bigbird": ({"vocab_size": 30, "mask_id": 1, "special_ids": [0, 1]},
                TINY_LM + ["model.net.mask.block_size=4", "model.net.mask.n_random=1"]),
    "vivit": ({"num_classes": 3, "image_size": 8, "channels": 3, "num_frames": 4, "class_names": NAMES,
               "pixel_mean": MEAN, "pixel_std": STD}, TINY_VISION),
    "videomae": ({"num_classes": 3, "image_size": 8, "channels": 3, "num_frames": 4, "class_names": NAMES,
                  "pixel_mean": MEAN, "pixel_std": STD}, TINY_VISION),
}


@pytest.mark.parametrize("model", sorted(FROM_SCRATCH))
def test_a_from_scratch_checkpoint_of_every_family_exports_and_loads(tmp_path, model):
    """Not only a checkpoint that came from a Hugging Face folder: T5's ``head_dim: null`` is its
    ``d_kv`` of d_model / heads; the folder loads with the Auto class its config names."""
    import transformers

    dims, overrides = FROM_SCRATCH[model]
    checkpoint(tmp_path / "m.ckpt", model, dims, *overrides)
    written, _ = export(tmp_path / "m.ckpt", tmp_path / "out")
    config = transformers.AutoConfig.from_pretrained(tmp_path / "out")
    loaded = getattr(transformers, written).from_pretrained(tmp_path / "out")
    assert type(loaded).__name__ == written == config.architectures[0]
    if "class_names" in dims:
        assert loaded.config.id2label == dict(enumerate(NAMES))


@pytest.mark.slow
def test_a_t5_trained_on_multi30k_translates_through_auto_classes_as_zoo_translate(tmp_path):
    """The run's BPE tokenizer travels with the export and AutoTokenizer reads it as a fast
    tokenizer (not T5's Unigram class); AutoModelForSeq2SeqLM's greedy generate gives zoo
    translate's greedy translations. (transformers 5 has no text2text pipeline.)"""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, T5Tokenizer

    from test_transformer_multi30k import tiny_run_config, write_corpus
    from zoo.cli.translate import translate
    from zoo.train.run import train

    write_corpus(tmp_path / "data")
    train(tiny_run_config(tmp_path, "t5", extra=[
        "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=32",
        "model.net.block.n_heads=2", "model.net.block.d_ff=64", "trainer.max_steps=20", "test=false"]))
    ckpt = tmp_path / "out" / "checkpoints" / "last.ckpt"
    export(ckpt, tmp_path / "exp")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "exp")
    assert not isinstance(tokenizer, T5Tokenizer)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "exp").eval()
    texts = ["Ein Hund rennt im Schnee.", "Zwei Männer sitzen auf einer Bank."]
    ours = translate(str(ckpt), texts, beam=False)
    theirs = [tokenizer.decode(model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=12,
                                              do_sample=False, num_beams=1)[0], skip_special_tokens=True)
              for text in texts]
    assert theirs == ours and all(ours)


FSDD = Path(os.environ.get("ZOO_DATA_DIR", "/nonexistent")) / "fsdd" / "recordings"


@pytest.mark.slow
@pytest.mark.skipif(not FSDD.is_dir(), reason="needs FSDD's recordings under ZOO_DATA_DIR")
def test_a_whisper_trained_on_padded_windows_transcribes_in_the_asr_pipeline(tmp_path, capsys):
    """A Whisper trained a few steps on FSDD with ``data.pad_audio`` (every utterance zero-padded
    to the encoder's 2 s window, as Whisper's input is) exports a ``WhisperFeatureExtractor`` of
    that window and a ``WhisperTokenizer`` of the run's BPE: on FSDD test wavs the pipeline's text
    is ``zoo transcribe``'s; the greedy token ids are equal and the logits on the pipeline's
    features within the shared bound of the zoo net's on its own."""
    import soundfile
    from transformers import AutoFeatureExtractor, AutoTokenizer, WhisperForConditionalGeneration, pipeline

    from exactness import assert_matches
    from zoo.cli.transcribe import load_model
    from zoo.data.audio import LogMel, load_audio
    from zoo.train.run import train

    train(compose_config([
        "model=whisper", "data=fsdd", "trainer=cpu", f"paths.data_dir={FSDD.parents[1]}",
        f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={tmp_path}/run", "model.net.block.d_model=32",
        "model.net.block.n_heads=2", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
        "model.net.encoder_embedder.max_len=100", "data.max_seconds=2", "data.pad_audio=true", "data.max_digits=1",
        "data.tokenizer=bpe", "data.bpe_vocab_size=60", "model.decoding.max_new_tokens=6", "data.batch_size=8",
        "trainer.max_steps=20", "trainer.val_check_interval=20", "trainer.limit_val_batches=1",
        "+trainer.limit_test_batches=0", "optim.warmup_steps=2"]))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    export(ckpt, tmp_path / "out")
    asr = pipeline("automatic-speech-recognition", model=str(tmp_path / "out"))
    hf = WhisperForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    extractor = AutoFeatureExtractor.from_pretrained(tmp_path / "out")
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    zoo = load_model(str(ckpt))
    wavs = [FSDD / f"{digit}_jackson_{take}.wav" for digit, take in ((3, 0), (7, 1), (9, 2))]
    capsys.readouterr()
    call("transcribe", [f"ckpt={ckpt}", f"audio=[{','.join(map(str, wavs))}]"])
    ours = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines()]
    assert all(ours), ours  # a few steps in, each transcript is a digit word or more
    for wav, text in zip(wavs, ours):
        wave, rate = soundfile.read(wav, dtype="float32")
        assert asr({"raw": wave, "sampling_rate": rate})["text"].strip() == text  # Whisper's leading space
        features = extractor(load_audio(wav).numpy(), sampling_rate=16000, return_tensors="pt").input_features
        own = LogMel(window=zoo.audio_window)(load_audio(wav))[None]
        prompt = torch.tensor([[zoo.bos_id]])
        ids = zoo.decode(own, prompt)[0]
        theirs = hf.generate(features)[0].tolist()  # Whisper's generate strips the start token
        assert theirs in (ids, [*ids, zoo.eos_id]), (theirs, ids)
        assert hf_tok.decode(ids, skip_special_tokens=True).strip() == text == zoo.tokenizer.decode(ids)
        assert hf_tok(text, add_special_tokens=False).input_ids == zoo.tokenizer.encode(text)
        target = torch.tensor([[zoo.bos_id, *ids]])
        with torch.no_grad():
            assert_matches(hf(input_features=features, decoder_input_ids=target).logits,
                           zoo.net(own, target), what=f"logits on {wav.name}")


@pytest.mark.slow  # 12 s on one core: the pipeline's processor and model loads
@torch.no_grad()
def test_a_llava_answers_in_the_image_text_to_text_pipeline(tmp_path, capsys):
    """The folder's LlavaProcessor (CLIP image processor of the tower's size, the run's word
    tokenizer, a chat template that renders the data's prompt) gives the prompt ids and pixels
    ``zoo answer`` builds; no bos id of another vocabulary is set; the greedy answer ids are
    equal and the pipeline's text is ``zoo answer``'s (the pipeline keeps the space before the
    first new word: it cuts the prompt's text off the whole decoded text)."""
    from transformers import AutoProcessor, LlavaForConditionalGeneration, pipeline

    from zoo.data.images import load_image
    from zoo.data.shapes_vqa import PROMPT, vocabulary
    from zoo.inference.answering import Answerer

    tok = vocabulary()
    dims = {"vocab_size": tok.vocab_size, "image_token_id": tok.image_id, "prompt": PROMPT, "metric": "exact_match"}
    checkpoint(tmp_path / "vlm.ckpt", "llava", dims, *TINY_LM[:4], "model.net.embedder.vision.model.n_layers=2",
               "model.net.embedder.vision.model.block.d_model=16", "model.net.embedder.vision.model.block.n_heads=2",
               "model.net.embedder.vision.model.embedder.patch_size=16", "model.max_answer_tokens=6", tokenizer=tok)
    export(tmp_path / "vlm.ckpt", tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["text_config"].get("bos_token_id") is None
    answerer = Answerer(tmp_path / "vlm.ckpt")
    # at the tower's size: resized, PIL's bicubic and the zoo's round a few pixels one level apart
    image, question = _png(tmp_path / "x.png", answerer.net.embedder.vision.image_size), "what color is the circle?"
    tokens, pixels, _ = answerer.inputs(load_image(image), question)
    _, ids = answerer.answer_ids(load_image(image), question)
    messages = [{"role": "user", "content": [{"type": "image", "url": str(image)}, {"type": "text", "text": question}]}]
    processor = AutoProcessor.from_pretrained(tmp_path / "out")
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(images=load_image(image), text=text, return_tensors="pt")
    assert inputs.input_ids.tolist() == tokens.tolist()
    torch.testing.assert_close(inputs.pixel_values, pixels, atol=1e-6, rtol=0)
    hf = LlavaForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    new = hf.generate(**inputs, max_new_tokens=6, do_sample=False)[0, tokens.shape[1]:].tolist()
    assert new in (ids, [*ids, tok.eos_id]), (new, ids)
    capsys.readouterr()
    call("answer", [f"ckpt={tmp_path / 'vlm.ckpt'}", f"image={image}", f"question='{question}'"])
    ours = capsys.readouterr().out.rstrip("\n")
    found = pipeline("image-text-to-text", model=str(tmp_path / "out"))(text=messages, max_new_tokens=6,
                                                                          return_full_text=False)
    assert ours and found[0]["generated_text"].strip() == ours


def _mp4(path: Path, frames: int, size: int) -> Path:
    """A video of ``frames`` random RGB frames of ``size`` x ``size`` (MPEG-4, PyAV) at ``path``."""
    import av
    import numpy as np

    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.mark.parametrize("model", ["vivit", "videomae"])
@torch.no_grad()
def test_a_video_classifier_classifies_in_the_video_classification_pipeline(tmp_path, model):
    """The folder's video processor reads a clip as the zoo's data does (pixel / 255, the run's mean
    and std: ViViT's own video processor would offset it to [-1, 1] whatever its config says, so
    the folder names VideoMAE's); id2label is the data's class names; the pipeline's labels and
    scores are the zoo net's on the zoo's own decoding. The pipeline is given the decoded frames:
    given a path, transformers 5 decodes with torchcodec, which the venv does not have (PyAV it has)."""
    from transformers import AutoImageProcessor, pipeline

    from zoo.data.videos import decode_video, fit_clip, normalise

    dims = {"num_classes": 3, "image_size": 16, "channels": 3, "num_frames": 4, "class_names": NAMES,
            "pixel_mean": MEAN, "pixel_std": STD}
    net = checkpoint(tmp_path / "v.ckpt", model, dims, *TINY_VISION, "model.net.embedder.patch_size=8")
    export(tmp_path / "v.ckpt", tmp_path / "out")
    clip = decode_video(_mp4(tmp_path / "x.mp4", 4, 16))  # the model's frames and size: neither side resamples
    probs = net(normalise(fit_clip(clip, 4, 16, True, "x")[0], MEAN, STD)[None])[0].softmax(-1)
    best = probs.topk(3)
    frames = clip.permute(0, 2, 3, 1).numpy()  # (T, H, W, C)
    found = pipeline("video-classification", model=str(tmp_path / "out"))(frames, top_k=3)
    assert [f["label"] for f in found] == [NAMES[i] for i in best.indices.tolist()]
    assert [f["score"] for f in found] == pytest.approx(best.values.tolist(), abs=1e-5)
    pixels = AutoImageProcessor.from_pretrained(tmp_path / "out")(list(frames), return_tensors="pt").pixel_values
    torch.testing.assert_close(pixels[0], normalise(clip, MEAN, STD), atol=1e-6, rtol=0)


@pytest.mark.slow  # sentence-transformers loads and saves twice
@torch.no_grad()
def test_a_bert_from_a_sentence_transformers_folder_exports_back_as_one(tmp_path):
    """A zoo BERT read from a sentence-transformers folder (mean pooling, Normalize, max_seq_length
    40; written by sentence-transformers itself) and changed (its weights drawn anew, as training
    would), exported with ``sentence_transformer=`` that folder: the export is one again (its
    modules, pooling, normalize, settings, tokenizer length, the pooler it came with) and
    ``SentenceTransformer(out).encode`` gives ``zoo embed``'s vectors of the checkpoint and of the folder."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from tokenizers import processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from exactness import assert_matches
    from test_embed import embed, texts_override
    from zoo.registry import name_of
    from zoo.train.run import objective

    tok = _wordpiece()
    cls, sep = tok.token_id("[CLS]"), tok.token_id("[SEP]")  # a BERT tokenizer's own [CLS] ... [SEP]
    tok.tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    bert = randomise(BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)))
    bert.save_pretrained(tmp_path / "bert")
    PreTrainedTokenizerFast(tokenizer_object=tok.tokenizer, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                            unk_token="[UNK]", mask_token="[MASK]").save_pretrained(tmp_path / "bert")
    SentenceTransformer(modules=[Transformer(str(tmp_path / "bert"), max_seq_length=40), Pooling(16, "mean"),
                                 Normalize()], device="cpu").save(str(tmp_path / "st"))
    folder_tok = HFTokenizer.from_pretrained_dir(tmp_path / "st")  # what data.tokenizer_from gives the run
    specials = [folder_tok.token_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    cfg = compose_config(["model=bert", f"model.init_from={tmp_path / 'st'}"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": folder_tok.vocab_size, "mask_id": specials[4], "special_ids": specials, "pad_id": 0}
    built = objective(cfg, folder_tok.state())
    randomise(built.net, seed=1)
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, tmp_path / "mlm.ckpt")
    written, untouched = export(tmp_path / "mlm.ckpt", tmp_path / "out", sentence_transformer=tmp_path / "st")
    assert (written, untouched) == ("BertModel", [])
    out = tmp_path / "out"
    for name in ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json"):
        assert json.loads((out / name).read_text()) == json.loads((tmp_path / "st" / name).read_text()), name
    assert (out / "2_Normalize").is_dir()
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 40
    exported = BertModel.from_pretrained(out)
    for name in ("pooler.dense.weight", "pooler.dense.bias"):
        assert torch.equal(exported.state_dict()[name], bert.state_dict()[name]), name
    texts = ["before we proceed any further", "hear me speak", "speak"]
    theirs = torch.from_numpy(SentenceTransformer(str(out), device="cpu").encode(texts))
    for source in (f"init_from={out}", f"ckpt={tmp_path / 'mlm.ckpt'}"):
        assert_matches(theirs, torch.tensor(embed(tmp_path, source, texts_override(texts))), what=source)


def test_sentence_transformer_names_a_folder_without_modules_json_before_reading_the_checkpoint(tmp_path):
    _tiny_gpt(tmp_path / "lm.ckpt")
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileNotFoundError, match=r"sentence_transformer=.*plain holds no modules\.json"):
        export(tmp_path / "lm.ckpt", tmp_path / "out", sentence_transformer=tmp_path / "plain")
    (tmp_path / "plain" / "modules.json").write_text("[]")
    with pytest.raises(ValueError, match="sentence_transformer= writes a BERT's .* GPT2LMHeadModel export"):
        export(tmp_path / "lm.ckpt", tmp_path / "out", sentence_transformer=tmp_path / "plain")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("model,targets", [("gpt", ["q", "v"]), ("gpt", ["k", "out", "fc_in"]),
                                           ("llama", ["q", "v", "gate"])])
@torch.no_grad()
def test_unmerged_lora_adapters_load_in_peft_against_the_exported_base(tmp_path, model, targets):
    """``merge_lora=false``: the folder is the base; ``adapter/`` a peft LoRA folder named for the
    Hugging Face model's modules (GPT-2's q and v share its fused ``c_attn``, each adapter a block
    of the rank at its rows; Llama keeps ``q_proj``, ``v_proj``, ``gate_proj``), and
    ``PeftModel.from_pretrained(base, adapter)`` gives the zoo checkpoint's logits."""
    import transformers
    from peft import PeftModel

    from exactness import assert_matches

    tok = CharTokenizer.from_text(TEXT)
    lora = {"r": 2, "alpha": 6, "dropout": 0.0, "targets": targets}
    net = checkpoint(tmp_path / "lm.ckpt", model, {"vocab_size": tok.vocab_size}, *TINY_LM, tokenizer=tok, lora=lora)
    written, _ = export(tmp_path / "lm.ckpt", tmp_path / "out", merge_lora=False)
    settings = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    modules = {name.rsplit(".", 1)[-1] for name in settings["target_modules"]}
    assert modules == ({"gpt": {"c_attn", "c_proj", "c_fc"} if "out" in targets else {"c_attn"},
                        "llama": {"q_proj", "v_proj", "gate_proj"}}[model])
    if targets == ["q", "v"]:  # c_attn's B (3 x 16, 2 + 2): q's block at q's rows, v's at v's, none at k's
        from safetensors.torch import load_file

        weights = load_file(tmp_path / "out" / "adapter" / "adapter_model.safetensors")
        b = next(v for k, v in weights.items() if k.endswith("h.0.attn.c_attn.lora_B.weight"))
        assert b.shape == (48, 4) and (b[:16, :2] != 0).all() and (b[32:, 2:] != 0).all()
        assert not b[16:32].any() and not b[:16, 2:].any() and not b[32:, :2].any()
    base = getattr(transformers, written).from_pretrained(tmp_path / "out").eval()
    ids = torch.tensor([tok.encode(TEXT[:40])])
    ours = net(ids)
    assert (base(ids).logits - ours).abs().max() > 1e-3  # the adapters change the outputs
    adapted = PeftModel.from_pretrained(base, str(tmp_path / "out" / "adapter")).eval()
    assert_matches(adapted(ids).logits, ours, what="adapted logits")

"""A user's inputs to the inference commands and to ``zoo export`` (issue 44): a 16-bit image reads
as its 8-bit equivalent in every command that loads one; what cannot be read (a folder, a device,
a decompression bomb, a wav of NaN or inf samples), what says nothing (CLIP over one label) and an
export that cannot be written (a read-only folder, a full disk) or whose converter names another
family is refused in one line naming the thing, as the command line prints it; a failed export
leaves no partial folder and keeps the earlier one."""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from PIL import Image

from conftest import ROOT
from test_export_clients import TEXT, TINY_LM, checkpoint
from test_transcribe_lengths import TINY as TINY_WHISPER
from zoo.cli.commands import COMMANDS, one_line_refusals
from zoo.config import compose_config
from zoo.data.audio import SAMPLE_RATE
from zoo.data.images import load_image
from zoo.data.tokenizers import CharTokenizer, WordTokenizer

TWO_TOWERS = ["model.net.n_layers=1", "model.net.block.d_model=32", "model.net.vision.n_layers=1",
              "model.net.vision.block.d_model=32"]


def refusal(capsys, command: str, overrides: list[str]) -> str:
    """The one line ``python -m zoo <command>`` prints on stderr for ``overrides`` (exit status 1):
    the command run under the command line's own handling of the zoo's refusals."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        one_line_refusals(COMMANDS[command].load())(compose_config(overrides, COMMANDS[command].config))
    err = capsys.readouterr().err  # (after any progress bar transformers draws on stderr)
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_.value.code == 1 and len(lines) == 1 and err.endswith(lines[0] + "\n"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(autouse=True)
def _short_errors(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


@pytest.fixture(scope="module", params=["clip", "siglip"])
def two_tower(request, tmp_path_factory) -> tuple[str, Path]:
    """(model, a tiny two-tower checkpoint with a word tokenizer that knows "cat" and "dog")."""
    tok = WordTokenizer.from_texts(["a photo of a cat", "a photo of a dog"])
    path = tmp_path_factory.mktemp(request.param) / "two_tower.ckpt"
    checkpoint(path, request.param, {"vocab_size": tok.vocab_size, "eos_id": tok.eos_id, "class_names": [],
                                     "class_prompts": []}, *TWO_TOWERS, tokenizer=tok)
    return request.param, path


def _grey(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (20, 24), dtype=np.uint8)


# --- 16-bit images --------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix,mode", [(".png", "I;16"), (".tif", "I;16"), (".tif", "I")])
def test_a_16_bit_image_loads_as_its_8_bit_equivalent(tmp_path, suffix, mode):
    """PIL opens 16-bit greyscale as ``I;16`` (older versions and 32-bit TIFFs: ``I``), whose
    ``convert("RGB")`` clips every value over 255 to white; the loader scales 65535 to 255."""
    grey = _grey()
    wide = grey.astype(np.uint16) * 257  # the same picture, 16 bits per pixel
    Image.fromarray(grey).save(tmp_path / "eight.png")
    Image.fromarray(wide if mode == "I;16" else wide.astype(np.int32)).save(tmp_path / f"sixteen{suffix}")
    assert Image.open(tmp_path / f"sixteen{suffix}").mode == mode
    loaded = np.asarray(load_image(tmp_path / f"sixteen{suffix}"))
    assert loaded.shape == (20, 24, 3) and loaded.dtype == np.uint8
    assert np.array_equal(loaded, np.asarray(load_image(tmp_path / "eight.png")))


def test_classify_scores_a_16_bit_png_as_its_8_bit_equivalent(tmp_path, capsys, two_tower):
    """Issue 44, item 12: the same picture at 16 bits gave other scores (99% of it read as white)."""
    from zoo.cli.commands import call

    grey = _grey(1)
    Image.fromarray(grey).save(tmp_path / "eight.png")
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path / "sixteen.png")
    scores = [dict(call("classify", [f"ckpt={two_tower[1]}", f"image={tmp_path / name}", "labels=[cat, dog]"]))
              for name in ("eight.png", "sixteen.png")]
    assert scores[0] == pytest.approx(scores[1], abs=1e-6)
    white = np.full_like(grey, 255)
    Image.fromarray(white).save(tmp_path / "white.png")  # the scores do depend on the image
    assert dict(call("classify", [f"ckpt={two_tower[1]}", f"image={tmp_path / 'white.png'}",
                                  "labels=[cat, dog]"])) != pytest.approx(scores[0], abs=1e-6)


# --- one label ------------------------------------------------------------------------------------

def test_one_label_is_refused_under_a_softmax_and_scored_under_a_sigmoid(tmp_path, capsys, two_tower):
    """CLIP's softmax over one label is 1.0 whatever the image: refused, naming the label; SigLIP's
    sigmoid scores each label on its own, so one label is a real question."""
    from zoo.cli.commands import call

    model, ckpt = two_tower
    Image.fromarray(_grey()).save(tmp_path / "x.png")
    overrides = [f"ckpt={ckpt}", f"image={tmp_path / 'x.png'}", "labels=[cat]"]
    if model == "clip":
        assert "labels=[cat] is one label" in refusal(capsys, "classify", overrides)
        return
    ((label, score),) = call("classify", overrides)
    assert label == "cat" and 0 < score < 1
    assert dict(call("classify", overrides[:-1] + ["labels=[cat, dog]"]))["cat"] == pytest.approx(score, abs=1e-6)


# --- files that are not an image ------------------------------------------------------------------

def _png_header(path: Path, width: int, height: int) -> Path:
    """A PNG whose header says ``width`` x ``height`` (8-bit grey), with a token of data: PIL reads
    the header only when it opens a file."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize("kind,said", [("bomb", "is refused as a decompression bomb"), ("folder", "is a folder"),
                                       ("/dev/zero", "is not a regular file"), ("fifo", "is not a regular file"),
                                       ("missing", "does not exist"), ("text", "is corrupt or not an image")])
def test_what_is_not_an_image_file_is_refused_in_one_line_naming_it(tmp_path, capsys, two_tower, kind, said):
    """A 40000 x 40000 PNG header (PIL's DecompressionBombError, raised from PIL, printed as a
    traceback), a folder, a device or a pipe (never read: ``/dev/zero`` would never end)."""
    if kind == "bomb":
        image = _png_header(tmp_path / "bomb.png", 40_000, 40_000)
    elif kind == "folder":
        (image := tmp_path / "pictures").mkdir()
        Image.fromarray(_grey()).save(image / "x.png")
    elif kind == "fifo":
        os.mkfifo(image := tmp_path / "pipe")
    elif kind == "text":
        (image := tmp_path / "x.png").write_text("not a picture")
    else:
        image = Path(kind) if kind.startswith("/") else tmp_path / "x.png"
    err = refusal(capsys, "classify", [f"ckpt={two_tower[1]}", f"image={image}", "labels=[cat, dog]"])
    assert f"image {image} {said}" in err


# --- audio of NaN or infinite samples -------------------------------------------------------------

@pytest.fixture(scope="module")
def whisper_ckpt(tmp_path_factory) -> Path:
    tok = CharTokenizer.from_text("one two three", specials=("<pad>", "<s>", "</s>"))
    path = tmp_path_factory.mktemp("whisper") / "asr.ckpt"
    dims = {"vocab_size": tok.vocab_size, "n_mels": 80, "pad_id": 0, "bos_id": 1, "eos_id": 2, "audio_window": None}
    checkpoint(path, "whisper", dims, *TINY_WHISPER, tokenizer=tok)
    return path


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("subtype", ["PCM_16", "FLOAT"])
def test_a_wav_of_nan_or_inf_samples_is_refused_naming_it(tmp_path, capsys, whisper_ckpt, value, subtype):
    """Issue 44, item 15: NaN written to a WAV by ``soundfile.write`` (16-bit PCM, its default) is
    stored as -1.0 (inf as full scale): no sample is NaN any more, and the transcript was empty,
    exit 0. A float WAV keeps its NaN (and is refused as not finite)."""
    wav = tmp_path / "nan.wav"
    soundfile.write(wav, np.full(SAMPLE_RATE // 2, value, dtype=np.float32), SAMPLE_RATE, subtype=subtype)
    err = refusal(capsys, "transcribe", [f"ckpt={whisper_ckpt}", f"audio={wav}"])
    assert f"audio file {wav} " in err
    assert ("holds no sound: all 8000 samples are" if subtype == "PCM_16" else "NaN or infinite samples") in err


def test_digital_silence_still_transcribes(tmp_path, capsys, whisper_ckpt):
    """All zeros is a recording of nothing, not a broken file: it is read."""
    from zoo.cli.commands import call

    wav = tmp_path / "silence.wav"
    soundfile.write(wav, np.zeros(SAMPLE_RATE // 2, dtype=np.float32), SAMPLE_RATE)
    capsys.readouterr()
    call("transcribe", [f"ckpt={whisper_ckpt}", f"audio={wav}"])
    assert capsys.readouterr().out.startswith(f"{wav}\t")


# --- export: a converter of another family, a folder that cannot be written ------------------------

@pytest.fixture(scope="module")
def gpt_ckpt(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpt") / "lm.ckpt"
    tok = CharTokenizer.from_text(TEXT)
    checkpoint(path, "gpt", {"vocab_size": tok.vocab_size}, *TINY_LM, tokenizer=tok)
    return path


@pytest.mark.parametrize("family,hf_class", [("bert", "BertForMaskedLM"), ("clip", "CLIPModel"),
                                             ("t5", "T5ForConditionalGeneration")])
def test_an_export_whose_converter_names_another_family_is_refused_naming_the_checkpoint(
        tmp_path, capsys, gpt_ckpt, family, hf_class):
    """A GPT checkpoint whose ``model.converter`` was edited to another family's: building that
    family's config failed deep in transformers (a validation TypeError) or in its table (KeyError)."""
    ckpt = torch.load(gpt_ckpt, weights_only=True)
    ckpt["hyper_parameters"]["converter"] = f"zoo.convert.{family}.pretrained"
    torch.save(ckpt, tmp_path / "edited.ckpt")
    err = refusal(capsys, "export", [f"ckpt={tmp_path / 'edited.ckpt'}", f"out={tmp_path / 'out'}"])
    assert f"{tmp_path / 'edited.ckpt'}: its model.converter=zoo.convert.{family}.pretrained names {hf_class}; " \
           f"its net is not one (" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def _earlier_export(gpt_ckpt: Path, out: Path) -> dict[str, bytes]:
    """Export ``gpt_ckpt`` to ``out``; returns its files' contents."""
    from zoo.convert.export import export

    export(gpt_ckpt, out)
    return {p.name: p.read_bytes() for p in out.iterdir()}


def _full_disk(monkeypatch, error: Exception) -> None:
    """The weights' write fails part way, as on a full disk."""
    import transformers.modeling_utils

    def write(state, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 100)
        raise error

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", write)


def _read_only(monkeypatch, folder: Path) -> None:
    """``folder`` on a read-only file system (the tests run as root, whom permissions do not stop)."""
    mkdir = os.mkdir

    def refuse(path, *args, **kwargs):
        if Path(path).parent == folder:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refuse)


def _safetensor_error() -> Exception:
    from safetensors import SafetensorError

    return SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                           '"No space left on device" })')


@pytest.mark.parametrize("fault,cause", [
    ("ENOSPC", "No space left on device"), ("SafetensorError", "No space left on device"),
    ("read-only", "Read-only file system")])
def test_an_export_that_cannot_be_written_is_refused_naming_the_folder_and_keeps_the_earlier_one(
        tmp_path, capsys, monkeypatch, gpt_ckpt, fault, cause):
    """``overwrite=true`` over an earlier export: the failure is one line naming ``out`` and the
    cause; the earlier export is there, byte for byte, and no partial folder is left beside it."""
    out = tmp_path / "exports" / "gpt"
    before = _earlier_export(gpt_ckpt, out)
    if fault == "read-only":
        _read_only(monkeypatch, out.parent)
    else:
        _full_disk(monkeypatch, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) if fault == "ENOSPC"
                   else _safetensor_error())
    err = refusal(capsys, "export", [f"ckpt={gpt_ckpt}", f"out={out}", "overwrite=true"])
    assert f"cannot write the export to {out}: " in err and cause in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["gpt"]


def test_an_export_put_in_place_keeps_the_earlier_one_if_the_last_move_fails(tmp_path, capsys, monkeypatch,
                                                                              gpt_ckpt):
    """The new folder replaces ``out`` by renames: the earlier ``out`` is moved aside first and
    back if the new one cannot take its place."""
    out = tmp_path / "exports" / "gpt"
    before = _earlier_export(gpt_ckpt, out)
    rename, moves_in = Path.rename, []

    def failing(self, target):  # the first move into out= (the new export's) fails
        moves_in.extend([target] if Path(target) == out else [])
        if moves_in == [target]:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    err = refusal(capsys, "export", [f"ckpt={gpt_ckpt}", f"out={out}", "overwrite=true"])
    assert f"cannot write the export to {out}: Input/output error" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["gpt"]


@pytest.mark.slow
@pytest.mark.parametrize("two_tower", ["clip"], indirect=True)
def test_the_command_line_prints_one_line_for_a_folder_image_and_an_edited_converter(tmp_path, two_tower,
                                                                                     gpt_ckpt):
    """The same refusals from ``python -m zoo``, no traceback."""
    (tmp_path / "pictures").mkdir()
    ckpt = torch.load(gpt_ckpt, weights_only=True)
    ckpt["hyper_parameters"]["converter"] = "zoo.convert.bert.pretrained"
    torch.save(ckpt, tmp_path / "edited.ckpt")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | {"PYTHONPATH": str(ROOT)}
    for args, said in [(["classify", f"ckpt={two_tower[1]}", f"image={tmp_path / 'pictures'}", "labels=[cat, dog]"],
                        "is a folder"),
                       (["export", f"ckpt={tmp_path / 'edited.ckpt'}", f"out={tmp_path / 'out'}"],
                        "names BertForMaskedLM; its net is not one")]:
        done = subprocess.run([sys.executable, "-m", "zoo", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 1 and said in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]

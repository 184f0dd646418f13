"""Bad input to the data and the optimizer, each ending in a message that names the file,
the key or the value (issue 13's poor cases), and downloads that stall or break off
(local servers on 127.0.0.1 only, with timeouts of a fraction of a second)."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import hydra
import pytest
import torch
import yaml
from conftest import ROOT, TINY_GPT
from PIL import Image
from test_llava import TINY, run_config
from test_transformer_multi30k import module, write_corpus

from zoo.convert.common import compose_config
from zoo.data.download import Patience, ensure_file
from zoo.objectives.optim import SETTINGS
from zoo.train.run import build, train

# --- downloads -----------------------------------------------------------------------------

QUICK = Patience(connect=1.0, read=0.3, retries=1, backoff=0.05)
BODY = bytes(range(256)) * 4  # what the servers below serve: 1024 bytes


def send(conn: socket.socket, body: bytes, length: int) -> None:
    """Read the request, then answer 200 with ``body`` under a Content-Length of ``length``."""
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % length + body)


@contextmanager
def server(reply: Callable[[socket.socket, int], None]) -> Iterator[tuple[str, list[int]]]:
    """A listener on 127.0.0.1 that hands its n-th connection to ``reply(conn, n)`` and keeps
    it open until the test ends; yields (a URL on it, the numbers of the connections taken)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop, taken, held = threading.Event(), [], []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)
            taken.append(len(taken))
            reply(conn, taken[-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/input.txt", taken
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def assert_nothing_left(folder: Path) -> None:
    assert list(folder.iterdir()) == [], "a partial download was left behind"


def test_download_from_a_server_that_never_replies_times_out(tmp_path):
    target = tmp_path / "data" / "input.txt"
    with server(lambda conn, n: None) as (url, taken):
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="could not download") as err:
            ensure_file(target, url, patience=QUICK)
        elapsed = time.monotonic() - start
    assert url in str(err.value) and str(target.parent) in str(err.value) and "2 tries" in str(err.value)
    assert len(taken) == 2  # one retry
    assert elapsed < 3  # two read timeouts of 0.3 s and a back-off, not forever
    assert_nothing_left(target.parent)


def test_download_cut_off_halfway_leaves_no_file(tmp_path):
    target = tmp_path / "data" / "input.txt"
    with server(lambda conn, n: (send(conn, BODY[:512], len(BODY)), conn.close())) as (url, taken):
        with pytest.raises(RuntimeError, match="512 of 1024 bytes") as err:
            ensure_file(target, url, patience=QUICK)
    assert url in str(err.value) and str(target.parent) in str(err.value)
    assert len(taken) == 2
    assert_nothing_left(target.parent)


def test_download_stalling_after_half_the_bytes_times_out(tmp_path):
    target = tmp_path / "data" / "input.txt"
    with server(lambda conn, n: send(conn, BODY[:512], len(BODY))) as (url, taken):  # then says nothing
        with pytest.raises(RuntimeError, match="timed out"):
            ensure_file(target, url, patience=QUICK)
    assert_nothing_left(target.parent)


def test_download_is_retried_and_checked_before_it_is_renamed(tmp_path):
    target = tmp_path / "data" / "input.txt"

    def flaky(conn: socket.socket, n: int) -> None:
        send(conn, BODY if n else BODY[:100], len(BODY))
        conn.close()

    with server(flaky) as (url, taken):
        assert ensure_file(target, url, size=len(BODY), patience=QUICK) == target
    assert target.read_bytes() == BODY and len(taken) == 2
    assert sorted(p.name for p in target.parent.iterdir()) == ["input.txt"]
    # a complete body that is not the expected file is no better than a cut one
    other = tmp_path / "other" / "input.txt"
    with server(lambda conn, n: (send(conn, BODY, len(BODY)), conn.close())) as (url, _):
        with pytest.raises(RuntimeError, match="expected SHA-256") as err:
            ensure_file(other, url, sha="0" * 64, patience=QUICK)
    assert url in str(err.value)
    assert_nothing_left(other.parent)


def test_download_from_a_closed_port_names_the_url(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as s:  # a port nobody listens on once closed
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/input.txt"
    with pytest.raises(RuntimeError, match="could not download") as err:
        ensure_file(tmp_path / "data" / "input.txt", url, patience=QUICK)
    assert url in str(err.value) and "refused" in str(err.value)
    assert_nothing_left(tmp_path / "data")


# --- data config values ---------------------------------------------------------------------

# A model for each data config, so that the data's interpolations (image size, context) resolve.
MODEL_OF = {"cifar10": "vit", "cifar10_captions": "llava", "flickr8k": "llava", "shapes_vqa": "llava",
            "fsdd": "whisper", "librispeech": "whisper", "ljspeech": "whisper", "speechcommands": "whisper",
            "yesno": "whisper", "multi30k": "transformer", "text": "gpt", "tokens": "gpt", "tinyshakespeare": "gpt", "wikitext": "bert",
            "moving_shapes": "vivit", "ucf101": "vivit", "shapes_detection": "yolos", "coco": "yolos"}
# labelled rows: task=classify's (an encoder's config; the task changes no data key)
MODEL_OF |= {"labelled": "bert", "sst2": "bert", "stsb": "bert", "rte": "bert", "trec": "bert"}
MODEL_OF |= {"images": "vit"}  # your own labelled images (data=images)
MODEL_OF |= {"pairs": "t5"}  # source / target pairs: an encoder-decoder's
MODEL_OF |= {"audio": "whisper"}  # your recordings from a manifest
MODEL_OF |= {"squad": "bert"}  # task=qa's SQuAD-format questions
# tagged sentences: task=tag's (likewise)
MODEL_OF |= {"conll": "roberta", "conll2003": "roberta"}
# prompt / response rows: task=sft's (a decoder's config; the task changes no data key)
MODEL_OF |= {"instructions": "qwen3", "gsm8k": "qwen3", "gpteacher_codegen": "qwen3"}


def test_every_data_config_is_paired_above():
    assert set(MODEL_OF) == {p.stem for p in (ROOT / "conf" / "data").glob("*.yaml")}


@pytest.mark.parametrize("data", sorted(MODEL_OF))
def test_every_data_module_refuses_a_bad_batch_size(tmp_path, data):
    cfg = compose_config([f"model={MODEL_OF[data]}", f"data={data}", "data.batch_size=0",
                          f"paths.data_dir={tmp_path}", f"paths.cache_dir={tmp_path}"])
    with pytest.raises(Exception, match=r"data\.batch_size=0: expected a whole number >= 1"):
        hydra.utils.instantiate(cfg.data)  # the data module's constructor, before it reads anything


@pytest.mark.parametrize("value, shown", [("abc", "'abc'"), ("0", "0"), ("-4", "-4"), ("2.5", "2.5")])
def test_bad_batch_size_names_the_key_and_value(shakespeare_dir, value, shown):
    cfg = compose_config([*TINY_GPT, f"data.batch_size={value}", f"paths.data_dir={shakespeare_dir}"])
    with pytest.raises(Exception, match=rf"data\.batch_size={shown}: expected a whole number >= 1"):
        build(cfg)


# --- optimizer settings ---------------------------------------------------------------------

def test_the_known_optim_settings_are_the_config_files():
    assert set(SETTINGS) == set(yaml.safe_load((ROOT / "conf" / "optim" / "adamw.yaml").read_text()))


@pytest.mark.parametrize("override, message", [
    ("optim.lr=0", r"optim\.lr=0: expected a number > 0"),
    ("optim.lr=-1e-3", r"optim\.lr=-0\.001: expected a number > 0"),
    ("optim.lr=abc", r"optim\.lr='abc': expected a number > 0"),
    ("optim.min_lr=1e-2", r"optim\.min_lr=0\.01: expected a number from 0 to optim\.lr=0\.001"),
    ("optim.min_lr=-1", r"optim\.min_lr=-1"),
    ("optim.warmup_steps=-1", r"optim\.warmup_steps=-1: expected a whole number >= 0"),
    ("optim.decay_steps=0", r"optim\.decay_steps=0: expected null"),
    ("optim.weight_decay=-0.1", r"optim\.weight_decay=-0\.1"),
    ("optim.betas=[0.9]", r"optim\.betas=\[0\.9\]: expected two numbers"),
    ("optim.schedule=linear", r"optim\.schedule='linear': expected one of \['cosine', 'inverse_sqrt'\]"),
    ("+optim.lrr=1", r"unknown optim setting\(s\) optim\.lrr: the settings are \['schedule', 'lr'"),
])
def test_bad_optim_setting_names_the_key_and_value(shakespeare_dir, override, message):
    cfg = compose_config([*TINY_GPT, override, f"paths.data_dir={shakespeare_dir}"])
    with pytest.raises(Exception, match=message):
        build(cfg)


def test_inverse_sqrt_takes_an_lr_below_the_default_min_lr(shakespeare_dir):
    cfg = compose_config([*TINY_GPT, "optim.schedule=inverse_sqrt", "optim.lr=1e-5",
                          f"paths.data_dir={shakespeare_dir}"])
    _, model = build(cfg)  # min_lr is the cosine schedule's floor only
    assert model.hparams.optim["lr"] == 1e-5


# --- data files -----------------------------------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b"", r"input\.txt holds 0 characters, too few"),
    (b"ROMEO: so short\n", r"input\.txt holds 16 characters, too few: .* data\.block_size=32"),
    (b"ROMEO:\nO happy dagger\n\xff\xfe this is Latin-1, not UTF-8\n" * 20,
     r"input\.txt is not UTF-8 text: byte 22 \(line 3\) is b'\\xff'"),
])
def test_bad_tinyshakespeare_file_is_named(tmp_path, content, message):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(content)
    cfg = compose_config([*TINY_GPT, f"paths.data_dir={tmp_path}"])  # TINY_GPT has data.check=false
    with pytest.raises(ValueError, match=message):
        build(cfg)


def test_truncated_multi30k_archive_is_named(tmp_path):
    write_corpus(tmp_path / "data")
    path = tmp_path / "data" / "multi30k" / "raw" / "train.en.gz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"train\.en\.gz is not a complete gzip file .*download it again"):
        module(tmp_path).setup()
    path.write_bytes(b"<html>not found</html>")  # e.g. an error page saved under the name
    with pytest.raises(ValueError, match=r"train\.en\.gz is not a complete gzip file"):
        module(tmp_path).setup()


def test_multi30k_archive_that_is_not_utf8_is_named(tmp_path):
    write_corpus(tmp_path / "data")
    path = tmp_path / "data" / "multi30k" / "raw" / "val.de.gz"
    lines = gzip.decompress(path.read_bytes()).split(b"\n")
    lines[3] = "Ein Hund läuft.".encode("latin-1")
    path.write_bytes(gzip.compress(b"\n".join(lines)))
    with pytest.raises(ValueError, match=r"val\.de\.gz is not UTF-8 text: byte \d+ \(line 4\) is b'\\xe4'"):
        module(tmp_path).setup()


# --- LLaVA on CIFAR-10 captions -------------------------------------------------------------

def cifar10_folder(root: Path) -> Path:
    """A tiny ImageFolder in data=cifar10's layout: 3 classes x 6 images per split."""
    for split in ("train", "test"):
        for k, name in enumerate(("airplane", "cat", "dog")):
            (root / "cifar10" / split / name).mkdir(parents=True)
            for i in range(6):
                Image.new("RGB", (32, 32), (90 * k, 40 * i, 200 - 90 * k)).save(root / "cifar10" / split / name / f"{i}.jpg")
    return root


def test_llava_on_cifar10_captions_fits_and_tests(tmp_path):
    data = cifar10_folder(tmp_path / "data")
    cfg = run_config(tmp_path / "run", ["model=llava", "data=cifar10_captions", f"paths.data_dir={data}",
                                        "trainer.max_steps=3", *TINY])
    metrics = train(cfg)
    assert {"test/accuracy", "test/accuracy_blank_image", "test/loss"} <= set(metrics)
    assert "greedy:" in (tmp_path / "run" / "examples.txt").read_text()


def test_llava_answers_never_hold_the_image_placeholder(tmp_path):
    """The test pass's greedy answers: a network that favours ``<image>`` (as an untrained one
    may) must not produce it, since the next step would feed it back without its image."""
    data = cifar10_folder(tmp_path / "data")
    cfg = run_config(tmp_path / "run", ["model=llava", "data=cifar10_captions", f"paths.data_dir={data}",
                                        "model.net.head.bias=true", *TINY])
    datamodule, model = build(cfg)
    image_id = model.net.embedder.image_token_id
    with torch.no_grad():
        model.net.head.proj.bias[image_id] = 100.0
    datamodule.setup("test")
    batch = next(iter(datamodule.test_dataloader()))
    with torch.no_grad():
        assert model.net(model.prepare(batch)[0], images=batch.images).argmax(-1).eq(image_id).all()
    answers = model.answer_tokens(batch)
    assert len(answers) == len(batch.tokens) and all(answers)
    assert not any(image_id in row for row in answers)

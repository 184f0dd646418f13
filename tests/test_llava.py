"""LLaVA: the splice, the cache, the masks, the stages, the data sets and their bad inputs,
and train.py / zoo answer end to end on tiny runs."""

from __future__ import annotations

import collections

import pytest
import torch
from omegaconf import open_dict
from PIL import Image

from exactness import assert_matches, randomise
from zoo.convert.common import build_net, compose_config
from zoo.data.flickr8k import Flickr8k, split_of
from zoo.data.images import load_image, to_tensor
from zoo.data.shapes_vqa import COUNTS, ShapesExamples, blind_baseline, make_question, vocabulary
from zoo.data.shapes_vqa import split_of as shapes_split_of
from zoo.models.sampling import generate
from zoo.nn.masks import PrefixLMMask
from zoo.nn.multimodal import expand_batch, expand_image_placeholder

DIMS = {"vocab_size": 40, "image_token_id": 3, "prompt": "<image>", "metric": "exact_match"}
TINY_LM = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=4", "model.net.block.d_ff=64"]
TINY = [*TINY_LM, "model.net.embedder.vision.model.block.d_model=32", "model.net.embedder.vision.model.n_layers=2",
        "model.net.embedder.vision.model.embedder.patch_size=16"]


def tiny_net(model: str = "llava", extra: list[str] = (), base: list[str] = TINY):
    torch.manual_seed(0)
    return build_net(model, [*base, *extra], DIMS).eval()


def prompt_tokens(net, text_ids=(5, 6, 7, 8)) -> torch.Tensor:
    ids, _ = expand_image_placeholder([9, 3, *text_ids], 3, net.embedder.n_image_tokens)
    return torch.tensor([ids, ids])


# --- the splice and the cache ------------------------------------------------------------

def test_image_features_replace_the_image_tokens_only():
    net = tiny_net()
    tokens, images = prompt_tokens(net), torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        x = net.embedder(tokens, images=images)
        features = net.embedder.image_features(images)
        text = net.embedder.text(tokens)
    where = tokens == 3
    assert where.sum() == 2 * net.embedder.n_image_tokens == 8
    assert torch.equal(x[where], features.flatten(0, 1))
    assert torch.equal(x[~where], text[~where])


def test_cached_decoding_with_image_prefix_matches_full_forward():
    for model in ("llava", "llava_gpt"):
        net = randomise(tiny_net(model))  # norms and biases away from 1 and 0, so a mis-cached one shows
        tokens, images = prompt_tokens(net), torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            full = net(tokens, images=images)
            cache = net.new_cache()
            prefix = 7  # the image goes through the cache on the first step
            steps = [net(tokens[:, :prefix], cache=cache, images=images)]
            steps += [net(tokens[:, t : t + 1], cache=cache) for t in range(prefix, tokens.shape[1])]
        assert_matches(torch.cat(steps, 1), full, what=f"{model} cached decoding")
        cached = generate(net, tokens, 5, temperature=0, images=images)
        uncached = generate(net, tokens, 5, temperature=0, use_cache=False, images=images)
        assert torch.equal(cached, uncached)


def test_prefix_lm_sees_the_whole_prompt_and_the_answer_stays_causal():
    net = tiny_net(extra=["model.net.mask._target_=zoo.nn.masks.PrefixLMMask"])
    assert isinstance(net.mask, PrefixLMMask)
    tokens, images = prompt_tokens(net), torch.randn(2, 3, 32, 32)
    changed = tokens.clone()
    changed[:, 6] = 11  # a late prompt token (the prefix is the first 7 positions)
    prefix = torch.tensor([7, 7])
    with torch.no_grad():
        a, b = (net(t, images=images, prefix_len=prefix) for t in (tokens, changed))
        later = tokens.clone()
        later[:, 8] = 12  # an answer token
        c = net(later, images=images, prefix_len=prefix)
    assert not torch.allclose(a[:, 0], b[:, 0])  # the first position saw the later prompt token
    assert torch.allclose(a[:, :8], c[:, :8], atol=1e-6)  # nobody before it saw the answer token


def test_timm_vision_tower_builds_and_feeds_the_lm():
    net = tiny_net("llava_timm", ["model.net.embedder.vision.name=vit_tiny_patch16_224",
                                  "model.net.embedder.vision.patch_size=16", "+model.net.embedder.vision.depth=2"],
                   base=TINY_LM)
    tokens = prompt_tokens(net)
    assert net.embedder.n_image_tokens == 4
    with torch.no_grad():
        assert net(tokens, images=torch.randn(2, 3, 32, 32)).shape == (2, tokens.shape[1], 40)


# --- bad input -------------------------------------------------------------------------

def test_two_placeholders_for_one_image_fail_clearly():
    with pytest.raises(ValueError, match="2 <image> placeholders"):
        expand_image_placeholder([3, 5, 3], 3, 4)


def test_prompt_without_placeholder_gets_the_image_in_front():
    ids, at = expand_image_placeholder([5, 6], 3, 4)
    assert (ids, at) == ([3, 3, 3, 3, 5, 6], 0)


def test_prompt_plus_image_longer_than_context_names_the_lengths():
    with pytest.raises(ValueError, match=r"20 text tokens \+ 16 image tokens = 36 .* context of 32"):
        expand_image_placeholder([3, *range(5, 25)], 3, 16, context=32)
    net = tiny_net(extra=["model.net.context=8"])
    with pytest.raises(ValueError, match="image tokens .* context of 8"):
        net(prompt_tokens(net), images=torch.randn(2, 3, 32, 32))


def test_image_token_count_must_match_the_image():
    net = tiny_net()
    with pytest.raises(ValueError, match="rows hold \\[1, 1\\] <image> tokens but each image gives 4"):
        net(torch.tensor([[9, 3, 5], [9, 3, 5]]), images=torch.randn(2, 3, 32, 32))


def test_missing_and_corrupt_images_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.jpg"):
        load_image(tmp_path / "nothere.jpg")
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match="broken.jpg"):
        load_image(tmp_path / "broken.jpg")


def test_wrong_image_size_is_resized_or_fails_with_sizes():
    image = Image.new("RGB", (50, 40), (255, 0, 0))
    pixels = to_tensor(image, 32)
    assert pixels.shape == (3, 32, 32) and torch.allclose(pixels[0], torch.ones(32, 32))
    with pytest.raises(ValueError, match="50x40.*32x32"):
        to_tensor(image, 32, resize=False)


def test_expand_batch_aligns_targets_and_prefix():
    tokens = torch.tensor([[9, 3, 5, 6, 0], [3, 5, 6, 7, 8]])
    targets = torch.tensor([[-100, -100, 6, 2, -100], [-100, -100, 7, 8, 2]])
    new_tokens, new_targets, prefix = expand_batch(tokens, targets, torch.tensor([3, 2]), 3, 3, pad_id=0)
    assert new_tokens.tolist() == [[9, 3, 3, 3, 5, 6, 0], [3, 3, 3, 5, 6, 7, 8]]
    assert new_targets.tolist() == [[-100] * 4 + [6, 2, -100], [-100] * 4 + [7, 8, 2]]
    assert prefix.tolist() == [5, 4]


# --- data ------------------------------------------------------------------------------

def test_shapes_vqa_is_deterministic_balanced_and_disjoint():
    a, b = ShapesExamples("train", 600, 0, 32), ShapesExamples("train", 600, 0, 32)
    assert [e.prompt for e in a] == [e.prompt for e in b]
    assert torch.equal(to_tensor(a[5].image(), 32), to_tensor(b[5].image(), 32))
    test = ShapesExamples("test", 600, 0, 32)
    assert [e.prompt for e in a] != [e.prompt for e in test]
    per_kind = collections.defaultdict(collections.Counter)
    val = list(ShapesExamples("val", 2000, 0, 32))  # drawn once: each val example takes ~16 draws (split_of)
    for e in val:
        per_kind[e.kind][e.answers[0]] += 1
    assert set(per_kind) == {"colour", "shape", "count", "exists", "relation"}
    for kind, counts in per_kind.items():  # every answer of a kind about equally often
        assert max(counts.values()) < 1.4 * min(counts.values()), (kind, counts)
    majority, per_kind_majority = blind_baseline(val)
    assert majority < 0.25 and per_kind_majority < 0.45
    assert all(1 not in vocabulary().encode(e.prompt + " " + e.answers[0]) for e in a)


def test_shapes_vqa_splits_share_no_example_whatever_the_seeds():
    # Independent draws repeat (a few hundred in these sizes when the splits only had
    # different seeds): the splits are disjoint by content, across seeds too.
    def content(split: str, seed: int, n: int) -> set:
        examples = ShapesExamples(split, n, seed, 32, jitter=0.25)
        assert all(shapes_split_of(e.prompt, e.image()) == split for e in examples)
        return {(e.prompt, e.image().tobytes()) for e in examples}

    test, val = content("test", 0, 200), content("val", 1, 200)
    train = content("train", 0, 2000) | content("train", 1, 2000)
    assert not test & train and not val & train and not test & val
    assert content("train", 0, 50) != content("train", 1, 50)  # the seed picks other examples
    with pytest.raises(ValueError, match="unknown shapes_vqa split 'dev'"):
        ShapesExamples("dev", 1, 0, 32)


def test_shapes_vqa_answers_agree_with_the_drawn_shapes():
    import random

    for i in range(300):
        kind, question, answer, objects = make_question(random.Random(i))
        assert 1 <= len(objects) <= 4 and len({o.cell for o in objects}) == len(objects)
        if kind == "count":
            shape = question.split()[2][:-1]
            assert COUNTS[sum(o.shape == shape for o in objects)] == answer
        elif kind == "colour":
            shape = question.split()[-1][:-1]
            assert [o.colour for o in objects if o.shape == shape] == [answer]
        elif kind == "exists":
            colour, shape = question.split()[3], question.split()[4][:-1]
            assert any((o.colour, o.shape) == (colour, shape) for o in objects) == (answer == "yes")


def test_flickr8k_reads_the_layout_and_names_a_missing_image(tmp_path):
    root = tmp_path / "flickr8k"
    (root / "Images").mkdir(parents=True)
    names = [f"{i}_img.jpg" for i in range(20)]
    for i, name in enumerate(names):
        Image.new("RGB", (40 + i, 30), (10 * i, 100, 50)).save(root / "Images" / name)
    lines = ["image,caption"] + [f"{n},a dog runs , on grass number {k} ." for n in names for k in range(5)]
    (root / "captions.txt").write_text("\n".join(lines) + "\n")
    data = Flickr8k(str(tmp_path), str(tmp_path / "cache"), batch_size=2, image_size=32)
    data.setup()
    expected = collections.Counter(split_of(n) for n in names)
    assert len(data.examples["train"]) == 5 * expected["train"]  # one example per caption
    assert (len(data.examples["val"]), len(data.examples["test"])) == (expected["val"], expected["test"])
    item = data.dataset("train")[0]
    assert item["images"].shape == (3, 32, 32)  # every photo size resized
    test = data.examples["test"] + data.examples["val"]
    assert all(len(e.answers) == 5 for e in test)
    (root / "Images" / names[0]).unlink()
    owner = next(s for s, v in data.examples.items() for k, e in enumerate(v) if e.image.args[0].name == names[0])
    index = next(k for k, e in enumerate(data.examples[owner]) if e.image.args[0].name == names[0])
    with pytest.raises(FileNotFoundError, match=names[0]):
        data.dataset(owner)[index]
    empty = Flickr8k(str(tmp_path / "none"), str(tmp_path / "cache"), batch_size=2, image_size=32)
    with pytest.raises(FileNotFoundError, match="captions.txt is missing.*kaggle"):
        empty.prepare_data()


def test_cifar10_captions_from_the_imagefolder_layout(tmp_path):
    from zoo.data.cifar10_captions import Cifar10Captions

    for split in ("train", "test"):
        for c in ("airplane", "cat"):
            (tmp_path / "cifar10" / split / c).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (32, 32), (i, 0, 0)).save(tmp_path / "cifar10" / split / c / f"{i}.jpg")
    data = Cifar10Captions(str(tmp_path), str(tmp_path / "c"), batch_size=2, image_size=32)
    data.setup()
    assert sorted({e.answers[0] for e in data.examples["test"]}) == ["a photo of a cat", "a photo of an airplane"]
    assert len(data.examples["train"]) + len(data.examples["val"]) == 6
    # val and test are read in order: the classes take turns, so that a batch is not one class's
    assert [e.kind for e in data.examples["test"]] == ["airplane", "cat"] * 3
    with pytest.raises(FileNotFoundError, match="cifar10/train"):
        Cifar10Captions(str(tmp_path / "none"), "c", 2, 32).setup()


# --- end to end ------------------------------------------------------------------------

def run_config(tmp_path, overrides: list[str]):
    cfg = compose_config([
        *overrides, f"paths.output_dir={tmp_path}", "trainer.val_check_interval=4", "trainer.limit_val_batches=1",
        "+trainer.enable_progress_bar=false", "~callbacks.progress_bar", "data.batch_size=4",
        "+trainer.enable_model_summary=false",
    ])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)
    return cfg


def test_train_llava_on_shapes_then_answer_from_the_checkpoint(tmp_path):
    from zoo.inference.answering import Answerer
    from zoo.cli.commands import call
    from zoo.data.shapes_vqa import draw
    from zoo.train.run import train

    cfg = run_config(tmp_path, ["model=llava", "data=shapes_vqa", "trainer.max_steps=4", "data.val_size=8",
                                "data.test_size=8", *TINY])
    metrics = train(cfg)
    assert {"test/accuracy", "test/accuracy_blank_image", "test/loss"} <= set(metrics)
    assert 0.0 <= metrics["test/accuracy_blank_image"] <= 1.0
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    answerer = Answerer(ckpt)
    example = ShapesExamples("test", 1, 0, 32)[0]
    image_path = tmp_path / "shapes.png"
    example.image().resize((64, 64)).save(image_path)  # another size: resized for the tower
    answer = answerer(load_image(image_path), "what color is the circle?")
    assert isinstance(answer, str) and "<image>" not in answer
    call("answer", [f"ckpt={ckpt}", f"image={image_path}", "question=how many circles are there?"])
    with pytest.raises(FileNotFoundError, match="missing.png"):
        call("answer", [f"ckpt={ckpt}", f"image={tmp_path / 'missing.png'}", "question=what?"])
    assert draw  # the drawing used above is the data's own
    examples = (tmp_path / "examples.txt").read_text()  # the test pass shows answers next to references
    assert "prompt:" in examples and "reference:" in examples and "greedy:" in examples
    call("attention-maps", [f"ckpt={ckpt}", f"image={image_path}", "question=what color is the circle?",
                            f"out={tmp_path / 'att'}"])
    assert (tmp_path / "att" / "rollout.png").is_file() and (tmp_path / "att" / "self_layer00.png").is_file()
    with pytest.raises(ValueError, match="image_text input .* but image input was given"):
        call("attention-maps", [f"ckpt={ckpt}", f"image={image_path}"])


def test_the_run_seed_picks_the_init_the_training_examples_and_their_order(tmp_path):
    import lightning as L

    from zoo.train.run import build

    def start(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = run_config(tmp_path, ["model=llava", "data=shapes_vqa", "trainer.max_steps=8", *TINY, f"seed={seed}"])
        L.seed_everything(cfg.seed)  # as zoo.train.run.train does
        data, model = build(cfg)
        batch = next(iter(data.train_dataloader()))
        return model.net.embedder.vision.model.embedder.patchify.weight, batch.images, batch.tokens

    first, again, other = start(3), start(3), start(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not any(torch.equal(a, b) for a, b in zip(first, other))  # tower init, images (jitter too), questions


def test_stage1_freezes_all_but_the_projector_and_inits_load(tmp_path):
    from zoo.train.run import build

    cfg = run_config(tmp_path, ["model=llava", "data=shapes_vqa", "trainer.max_steps=2", *TINY])
    _, donor = build(cfg)  # stands in for a ViT trained by model=vit and an LM trained by model=llama
    vit, lm = tmp_path / "vit.ckpt", tmp_path / "lm.ckpt"
    e = donor.net.embedder
    torch.save({"state_dict": {f"net.{k}": v for k, v in e.vision.model.state_dict().items()}}, vit)
    torch.save({"state_dict": {f"net.{part}.{k}": v for part, module in
                               (("embedder", e.text), ("stack", donor.net.stack), ("head", donor.net.head))
                               for k, v in module.state_dict().items()}}, lm)
    cfg = run_config(tmp_path, ["experiment=llava_stage1", "data=shapes_vqa", "trainer.max_steps=2", *TINY,
                                f"model.vision_init={vit}", f"model.lm_init={lm}", "seed=7"])
    _, stage1 = build(cfg)
    assert all(p.requires_grad == n.startswith("embedder.projector") for n, p in stage1.net.named_parameters())
    for name, value in stage1.net.state_dict().items():  # vision and LM weights came from the checkpoints
        if not name.startswith("embedder.projector"):
            assert torch.equal(value, donor.net.state_dict()[name]), name
    assert not torch.equal(stage1.net.embedder.projector[0].weight, e.projector[0].weight)
    bad = tmp_path / "bad.ckpt"
    torch.save({"state_dict": {"net.embedder.tokens.weight": torch.zeros(3, 3)}}, bad)
    with pytest.raises(Exception, match="missing"):
        build(run_config(tmp_path, ["model=llava", "data=shapes_vqa", *TINY, f"model.vision_init={bad}"]))
    stage1.train()
    assert not stage1.net.embedder.vision.training and stage1.net.embedder.projector.training
    saved = tmp_path / "hparams.pt"  # what its checkpoints store, read back as zoo.checkpoint reads them
    torch.save(dict(stage1.hparams), saved)
    assert torch.load(saved, weights_only=True)["trainable"] == ["projector"]


def write_flickr8k(data: Path) -> None:
    """30 generated images with five captions each in data=flickr8k's layout under ``data``."""
    root = data / "flickr8k"
    (root / "Images").mkdir(parents=True)
    names = [f"{i}_x.jpg" for i in range(30)]
    for i, name in enumerate(names):
        Image.new("RGB", (48, 40), (8 * i, 60, 200 - 5 * i)).save(root / "Images" / name)
    captions = ["a dog runs on the grass .", "two people walk .", "a red car .", "a child plays .", "a big dog ."]
    (root / "captions.txt").write_text("image,caption\n" + "".join(f"{n},{c}\n" for n in names for c in captions))


def test_train_llava_gpt_on_flickr8k_reports_bleu(tmp_path):
    from zoo.train.run import train

    write_flickr8k(tmp_path / "data")
    cfg = run_config(tmp_path / "out", ["model=llava_gpt", "data=flickr8k", f"paths.data_dir={tmp_path / 'data'}",
                                        "trainer.max_steps=2", "data.min_count=1", "model.max_answer_tokens=6",
                                        *TINY])
    metrics = train(cfg)
    assert 0.0 <= metrics["test/bleu"] <= 100.0
    assert (tmp_path / "out" / "captions.txt").exists()

"""shapes_vqa: a built-in visual question answering set (no download).

Each image holds 1-4 coloured shapes (circle, square, triangle), one per cell of a
2x2 grid, of two sizes and jittered inside their cell. Questions need both the
image and the question: the colour of a shape, the shape of a colour, how many of a
shape, whether a coloured shape is there, and left/right relations. Within each
question type the answer is drawn uniformly first and the image built to fit it, so
answers are balanced and the best an image-blind answerer can do is the majority
answer of each question type (:func:`blind_baseline`).

An example is a pure function of (split, seed, index) and nothing is stored. The splits
are disjoint by content, whatever the seeds: an example (its prompt and drawn image)
belongs to the split its hash picks (1/16 of all possible examples test, 1/16 val, the
rest train), and each split draws until it gets one of its own. (The set is small
enough that independent draws repeat: a train run of 900k examples saw most of a
2,000-question test split when the splits only used different seeds.)
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass

from PIL import Image, ImageDraw

from zoo.data.image_text import Example, ImageTextData
from zoo.data.tokenizers import WordTokenizer

COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (60, 90, 240), "yellow": (235, 215, 40)}
SHAPES = ("circle", "square", "triangle")
COUNTS = ("zero", "one", "two", "three")
KINDS = ("colour", "shape", "count", "exists", "relation")
PROMPT = "<image>\nquestion: {question}\nanswer:"
SPLIT_BUCKETS = 16  # an example's hash mod this: 0 = test, 1 = val, the others train


@dataclass
class Shape:
    colour: str
    shape: str
    cell: int  # 0..3: row-major in the 2x2 grid (0, 2 on the left; 1, 3 on the right)
    large: bool
    jitter: tuple[float, float]  # where in its cell, each in [0, 1)

    @property
    def column(self) -> int:
        return self.cell % 2


def _fill(rng: random.Random, objects: list[Shape], n: int, allowed) -> list[Shape]:
    """Add random shapes, each (colour, shape) new and ``allowed(colour, shape)``, in free cells, up to n."""
    free = [c for c in range(4) if c not in {o.cell for o in objects}]
    rng.shuffle(free)
    while len(objects) < n:
        options = [(c, s) for c in COLOURS for s in SHAPES
                   if allowed(c, s) and (c, s) not in {(o.colour, o.shape) for o in objects}]
        colour, shape = rng.choice(options)
        objects.append(Shape(colour, shape, free.pop(), rng.random() < 0.5, (rng.random(), rng.random())))
    return objects


def make_question(rng: random.Random) -> tuple[str, str, str, list[Shape]]:
    """(kind, question, answer, shapes) with a uniformly drawn kind and answer."""
    kind = rng.choice(KINDS)
    n = rng.randint(1, 4)
    new = lambda c, s: Shape(c, s, rng.randrange(4), rng.random() < 0.5, (rng.random(), rng.random()))  # noqa: E731
    if kind == "colour":  # the asked shape appears once; its colour is the answer
        colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
        objects = _fill(rng, [new(colour, shape)], n, lambda c, s: s != shape)
        question, answer = f"what color is the {shape}?", colour
    elif kind == "shape":  # the asked colour appears once; its shape is the answer
        colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
        objects = _fill(rng, [new(colour, shape)], n, lambda c, s: c != colour)
        question, answer = f"what shape is the {colour} one?", shape
    elif kind == "count":  # k of the asked shape, 0..3
        shape, k = rng.choice(SHAPES), rng.randrange(len(COUNTS))
        n = rng.randint(max(k, 1), 4)
        objects = _fill(rng, [], k, lambda c, s: s == shape)
        objects = _fill(rng, objects, n, lambda c, s: s != shape)
        question, answer = f"how many {shape}s are there?", COUNTS[k]
    elif kind == "exists":  # yes: it is there; no: only its colour or its shape may be
        colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
        yes = rng.random() < 0.5
        objects = _fill(rng, [new(colour, shape)] if yes else [], n, lambda c, s: (c, s) != (colour, shape))
        question, answer = f"is there a {colour} {shape}?", "yes" if yes else "no"
    else:  # relation: one shape in the left column, one in the right, 0-2 more anywhere
        left, right = (Shape(c, s, cell, rng.random() < 0.5, (rng.random(), rng.random()))
                       for (c, s), cell in zip(rng.sample([(c, s) for c in COLOURS for s in SHAPES], 2),
                                               (rng.choice((0, 2)), rng.choice((1, 3)))))
        objects = _fill(rng, [left, right], rng.randint(2, 4), lambda c, s: True)
        relation, yes = rng.choice(("left", "right")), rng.random() < 0.5
        a, b = (left, right) if (relation == "left") == yes else (right, left)
        question, answer = f"is the {a.colour} {a.shape} {relation} of the {b.colour} {b.shape}?", "yes" if yes else "no"
    return kind, question, answer, objects


def draw(objects: list[Shape], image_size: int, jitter: float = 1.0) -> Image.Image:
    """Shapes on a black canvas: each in its cell, large (80% of the cell) or small (50%),
    shifted inside the cell by up to ``jitter`` x the room it has."""
    image = Image.new("RGB", (image_size, image_size))
    pen = ImageDraw.Draw(image)
    cell = image_size / 2
    for o in objects:
        size = round(cell * (0.8 if o.large else 0.5))
        room = cell - size
        x0 = (o.cell % 2) * cell + room * (0.5 + jitter * (o.jitter[0] - 0.5))
        y0 = (o.cell // 2) * cell + room * (0.5 + jitter * (o.jitter[1] - 0.5))
        box = [x0, y0, x0 + size - 1, y0 + size - 1]
        colour = COLOURS[o.colour]
        if o.shape == "circle":
            pen.ellipse(box, fill=colour)
        elif o.shape == "square":
            pen.rectangle(box, fill=colour)
        else:
            pen.polygon([(x0 + (size - 1) / 2, y0), (x0, y0 + size - 1), (x0 + size - 1, y0 + size - 1)], fill=colour)
    return image


def split_of(prompt: str, image: Image.Image) -> str:
    """The split an example belongs to, by a hash of what the model sees (so no prompt and
    image can be in two splits)."""
    digest = hashlib.blake2b(prompt.encode() + image.tobytes(), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % SPLIT_BUCKETS
    return "test" if bucket == 0 else "val" if bucket == 1 else "train"


class ShapesExamples:
    """A lazily generated split: example i is a pure function of (split, seed, i), drawn
    until it is one of the split's own (:func:`split_of`)."""

    def __init__(self, split: str, size: int, seed: int, image_size: int, jitter: float = 1.0):
        if split not in ("train", "val", "test"):
            raise ValueError(f"unknown shapes_vqa split {split!r}: expected 'train', 'val' or 'test'")
        self.split, self.size, self.seed, self.image_size, self.jitter = split, size, seed, image_size, jitter

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> Example:
        if not 0 <= i < self.size:
            raise IndexError(i)
        rng = random.Random(f"shapes_vqa/{self.split}/{self.seed}/{i}")
        while True:
            kind, question, answer, objects = make_question(rng)
            prompt, image = PROMPT.format(question=question), draw(objects, self.image_size, self.jitter)
            if split_of(prompt, image) == self.split:
                return Example(lambda: image, prompt, [answer], kind)


def vocabulary() -> WordTokenizer:
    """Every word the questions and answers use (fixed, so checkpoints agree)."""
    texts = [PROMPT.format(question="what color is the shape one how many are there a left right of the"),
             "yes no ?", *COLOURS, *SHAPES, *(f"{s}s" for s in SHAPES), *COUNTS]
    return WordTokenizer.from_texts(texts)


def blind_baseline(examples) -> tuple[float, float]:
    """(accuracy of always answering the most common answer, of answering the most common
    answer of each question type): what an answerer that ignores the image can reach."""
    answers = Counter(ex.answers[0] for ex in examples)
    per_kind: dict[str, Counter] = {}
    for ex in examples:
        per_kind.setdefault(ex.kind, Counter())[ex.answers[0]] += 1
    n = len(examples)
    return answers.most_common(1)[0][1] / n, sum(c.most_common(1)[0][1] for c in per_kind.values()) / n


class ShapesVQA(ImageTextData):
    """Generated shapes VQA: ``train_size`` / ``val_size`` / ``test_size`` examples, the
    splits disjoint by content (:func:`split_of`); ``jitter`` (0..1) how far shapes move inside their
    cell. See the module docstring."""

    prompt = PROMPT

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, image_size: int, train_size: int,
                 val_size: int, test_size: int, seed: int = 0, jitter: float = 1.0, resize: bool = True,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, image_size, resize, tokenizer_from, num_workers)
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.seed, self.jitter = seed, jitter

    def prepare_data(self) -> None:
        """Nothing to download."""

    def setup(self, stage: str | None = None) -> None:
        self.tokenizer = vocabulary()
        self.examples = {split: ShapesExamples(split, size, self.seed, self.image_size, self.jitter)
                         for split, size in self.sizes.items()}
        self._set_tokenizer_and_dims()

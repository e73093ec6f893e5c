"""Class-level benchmarks: datasets whose classes are split into *seen* and *unseen*, as data.

Why: ViTeRB (Ruthardt et al., §4) measures zero-shot transfer in the traditional sense, on classes that are
strictly disjoint from the training classes (seen and unseen sets with an empty intersection), so the split *is*
the benchmark.
This module holds the one shape every such dataset takes (:class:`ClassBenchmark`: classes with a role,
images with a class and a role), the seeded split rule, the checksummed split files, the two datasets
of the small config: the emoji concepts (drawings, the emoji corpus's family-disjoint split) and Fashion-MNIST
(photos, a seeded 7 / 3 class split), the medium config's corpus (``medium_benchmark``: ~7,900 concepts of
four drawing sources, split by concept families), and the protocol's diagram drawn from these objects. The full
config's four datasets are read by :mod:`corpora.full_sets` into the same shape. See notebooks/viterb.py, section
"Seen and unseen classes, as data".
"""
from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from lib.core.atomic import write_json
from lib.core.checksums import file_sha256
from lib.core.paths import REPO_ROOT
from corpora import emoji, manifests

__all__ = ["ImageSource", "ClassBenchmark", "seeded_class_split", "write_fashion_split", "load_split_file",
           "EMOJI_SUBSET", "EMOJI_SUBSET_SEED", "emoji_split", "emoji_concepts", "emoji_benchmark",
           "FashionImages", "fashion_benchmark", "medium_benchmark", "MEDIUM_SPLITS", "FASHION_SPLIT_SEED",
           "FASHION_UNSEEN", "SPLIT_DIR", "ROLES", "split_diagram", "resplit"]

SPLIT_DIR = REPO_ROOT / "data_manifests" / "splits"
FASHION_SPLIT_SEED = 0
FASHION_UNSEEN = 3
ROLES = ("seen", "val", "unseen")  # class roles; image roles are train, val, test


@dataclass(frozen=True)
class ImageSource:
    """A set of images whose features are cached as one store entry (``ids`` and ``source`` key it);
    ``lib.core.features.image`` reads ``name``, ``ids``, ``load_image(i)`` and ``source``."""

    name: str
    ids: tuple[str, ...]
    load_image: Callable
    source: dict


@dataclass(frozen=True)
class ClassBenchmark:
    """One dataset of a class-level benchmark: classes with a role each, images with a class and a role each.

    ``class_role``: ``seen`` (training images), ``val`` (held-out seen-side classes whose images stop the
    training early: emoji) or ``unseen``. ``image_role``: ``train``, ``val`` or ``test`` (test images are
    always of unseen classes, and only they are). Image ``i`` is row ``image_rows[i][1]`` of the features of
    ``image_sources[image_rows[i][0]]``, so one cached entry can serve several benchmarks.
    """

    name: str
    class_keys: tuple[str, ...]
    class_names: tuple[str, ...]
    class_role: tuple[str, ...]
    image_sources: tuple[ImageSource, ...]
    image_rows: tuple[tuple[int, int], ...]
    image_labels: tuple[int, ...]  # index into class_keys
    image_role: tuple[str, ...]

    def classes(self, role: str) -> list[int]:
        return [i for i, r in enumerate(self.class_role) if r == role]

    def images(self, role: str) -> list[int]:
        return [i for i, r in enumerate(self.image_role) if r == role]

    def check_no_leak(self) -> None:
        """No image of an unseen class is used for training or validation; test images are all unseen."""
        unseen = set(self.classes("unseen"))
        for i, (label, role) in enumerate(zip(self.image_labels, self.image_role)):
            if (role == "test") != (label in unseen):
                raise AssertionError(f"{self.name}: image {i} ({role}) is of class {self.class_keys[label]!r} "
                                     f"({self.class_role[label]}): an unseen class leaked into training")

    def counts(self) -> dict[str, int]:
        """Classes per role and images per role (the split table and the method diagram read these)."""
        out = {f"{role} classes": len(self.classes(role)) for role in ROLES}
        out.update({f"{role} images": len(self.images(role)) for role in ("train", "val", "test")})
        return out


# --------------------------------------------------------------------------------------------- splits
IMAGE_ROLE = {"seen": "train", "val": "val", "unseen": "test"}


def resplit(bench: ClassBenchmark, seed: int, family: Callable[[str], str]) -> ClassBenchmark:
    """The same classes and images with the roles drawn again: whole families (``family(class name)``) to
    seen / val / unseen by a seeded shuffle, filling each role to this benchmark's share of the classes
    (``corpora.openclipart.assign``: unseen first, then val, the rest seen); every image takes its class's role.

    Why: a verdict that rests on one split may be a fact about that split. Drawing a split per seed puts the
    split's own variance into a paired interval over seeds, while the features stay those of the one store
    (an image's features do not depend on its role)."""
    from corpora import openclipart

    counts, total = Counter(bench.class_role), len(bench.class_keys)
    fractions = {"unseen": counts["unseen"] / total, "val": counts["val"] / total, "train": counts["seen"] / total}
    families = [family(name) for name in bench.class_names]
    drawn = openclipart.assign(Counter(families), seed, fractions)
    roles = tuple({"train": "seen", "val": "val", "unseen": "unseen"}[drawn[f]] for f in families)
    image_role = tuple(IMAGE_ROLE[roles[c]] for c in bench.image_labels)
    out = dataclasses.replace(bench, class_role=roles, image_role=image_role)
    out.check_no_leak()
    return out


def seeded_class_split(classes: Sequence[str], n_unseen: int, seed: int) -> dict:
    """Seeded random split of a class list into seen / unseen classes (both in the list's order).

    The same function makes Fashion-MNIST's 7 / 3 split (written to ``data_manifests/splits``) and
    FGVC-Aircraft's 50 / 20 split of its 70 families at load time (ViTeRB: "randomly assigning aircraft
    types into 50 seen and 20 unseen classes").
    """
    order = list(classes)
    random.Random(seed).shuffle(order)
    unseen = sorted(order[:n_unseen], key=list(classes).index)
    seen = [c for c in classes if c not in unseen]
    return {"seed": seed, "rule": f"random.Random({seed}).shuffle(classes); first {n_unseen} unseen",
            "seen": seen, "unseen": unseen}


def write_fashion_split() -> Path:
    """Write ``data_manifests/splits/fashion-mnist.json`` (the manifest records its sha256)."""
    classes = manifests.load("fashion-mnist")["classes"]
    path = SPLIT_DIR / "fashion-mnist.json"
    write_json(path, seeded_class_split(classes, FASHION_UNSEEN, FASHION_SPLIT_SEED))
    return path


def load_split_file(dataset: str) -> dict:
    """A dataset's split file, checked against the sha256 its manifest records under ``splits:``."""
    entry = manifests.load(dataset).get("splits", {})
    path = REPO_ROOT / entry["file"]
    if not path.is_file():
        raise manifests.DatasetMissingError(f"{path} is missing: regenerate it with `{entry.get('made_by')}`")
    expected = entry.get("sha256")
    if expected and file_sha256(path) != expected:
        raise manifests.DatasetMissingError(
            f"{path} does not match the sha256 in data_manifests/{dataset}.yaml: the split changed; "
            f"regenerate it with `{entry.get('made_by')}` and record the new hash")
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------------------- emoji
# Emoji concepts of the small config: a seeded subset of each split of the emoji corpus. Generating one
# description and one article for all 1,906 concepts with SmolLM2 on two CPU cores would take about 38
# minutes (measured: 3.7 concepts/s for 40 new tokens, 1.1 for 90; the class-text files record their
# seconds), so every text type uses these 448 concepts (a fair comparison: the same concepts for all).
EMOJI_SUBSET = {"train": 192, "val": 64, "unseen": 192}
EMOJI_SUBSET_SEED = 0


def emoji_split(split: str) -> list:
    """The ViTeRB emoji concepts of one split (``train`` = seen, ``val`` = held out for early stopping,
    ``unseen``): a seeded subset of ``corpora.emoji``'s family-disjoint split, in corpus order."""
    concepts = emoji.split_concepts(split)
    keep = {c.key for c in random.Random(f"{EMOJI_SUBSET_SEED}-{split}").sample(concepts, EMOJI_SUBSET[split])}
    return [c for c in concepts if c.key in keep]


def emoji_concepts() -> list:
    """Every ViTeRB emoji concept (seen, val and unseen), in corpus order."""
    chosen = {c.key for split in EMOJI_SUBSET for c in emoji_split(split)}
    return [c for c in emoji.load_concepts() if c.key in chosen]


def emoji_benchmark(style: str = "google") -> ClassBenchmark:
    """Emoji concepts, one drawing each: seen concepts give the training pairs, val concepts the
    early-stopping pairs, unseen concepts the test. The image sources are the emoji corpus's whole
    split sets (``corpora.datasets.emoji_pairs``, the ShareLock chapter's store entries); rows are
    selected by concept."""
    from corpora.datasets import emoji_pairs

    keys, names, roles, rows, labels, image_roles, sources = [], [], [], [], [], [], []
    for split, class_role, image_role in (("train", "seen", "train"), ("val", "val", "val"),
                                          ("unseen", "unseen", "test")):
        pairs = emoji_pairs(split, style, "label")
        sources.append(ImageSource(pairs.name, pairs.ids, pairs.load_image, pairs.source))
        position = {key: row for row, key in enumerate(pairs.concepts)}
        for concept in emoji_split(split):
            labels.append(len(keys))
            keys.append(concept.key)
            names.append(concept.label)
            roles.append(class_role)
            rows.append((len(sources) - 1, position[concept.key]))
            image_roles.append(image_role)
    return ClassBenchmark("emoji", tuple(keys), tuple(names), tuple(roles), tuple(sources), tuple(rows),
                          tuple(labels), tuple(image_roles))


# --------------------------------------------------------------------------------------------- medium
# The medium corpus's concept split (corpora.medium: whole concept families to train / val / unseen) as a
# class benchmark: train concepts are seen, val concepts stop the training early, unseen concepts are the test.
MEDIUM_SPLITS = (("train", "seen", "train"), ("val", "val", "val"), ("unseen", "unseen", "test"))


def medium_benchmark() -> ClassBenchmark:
    """The medium corpus's concepts (class = concept name, e.g. "bicycle", "grinning face"), every image of the
    four training sources: seen concepts give the training images, val concepts the early-stopping images,
    unseen concepts the test. The image sources are ``corpora.medium.pairs(split, captions="label")``, the
    very sets (name, ids, source) whose features the ShareLock chapter's medium config stores."""
    from corpora import medium

    keys, roles, rows, labels, image_roles, sources = [], [], [], [], [], []
    index: dict[str, int] = {}
    for split, class_role, image_role in MEDIUM_SPLITS:
        pairs = medium.pairs(split, captions="label")
        sources.append(ImageSource(pairs.name, pairs.ids, pairs.load_image, pairs.source))
        for row, concept in enumerate(pairs.concepts):
            if concept not in index:
                index[concept] = len(keys)
                keys.append(concept)
                roles.append(class_role)
            labels.append(index[concept])
            rows.append((len(sources) - 1, row))
            image_roles.append(image_role)
    return ClassBenchmark("medium", tuple(keys), tuple(keys), tuple(roles), tuple(sources), tuple(rows),
                          tuple(labels), tuple(image_roles))


# ------------------------------------------------------------------------------------- Fashion-MNIST
@dataclass(frozen=True)
class FashionImages:
    """Fashion-MNIST t10k photos per class in the small config. With at most 100 per class the image
    source is the ShareLock chapter's zero-shot set (``fashion_mnist_labelled(100)``), one store entry."""

    train_per_class: int = 75  # seen classes: head training
    val_per_class: int = 25  # seen classes: early stopping
    test_per_class: int = 100  # unseen classes: the score


def fashion_benchmark(images: FashionImages = FashionImages()) -> ClassBenchmark:
    """Fashion-MNIST photos (t10k): seen classes give training and validation photos, unseen classes the
    test photos (the first ones of each class in file order). One cached feature entry covers them all."""
    from corpora.datasets import fashion_mnist_labelled

    split = load_split_file("fashion-mnist")
    per_class = max(images.train_per_class + images.val_per_class, images.test_per_class)
    photos = fashion_mnist_labelled(per_class, prompts="name")
    source = ImageSource(photos.name, photos.ids, photos.load_image, photos.source)
    classnames = list(photos.classnames)
    role = {c: "seen" for c in split["seen"]} | {c: "unseen" for c in split["unseen"]}
    rows, labels, image_roles, taken = [], [], [], {}
    for row, label in enumerate(photos.labels):
        name = classnames[label]
        k = taken[name] = taken.get(name, 0) + 1
        if role[name] == "unseen":
            take = "test" if k <= images.test_per_class else None
        else:
            take = ("train" if k <= images.train_per_class
                    else "val" if k <= images.train_per_class + images.val_per_class else None)
        if take:
            rows.append((0, row))
            labels.append(label)
            image_roles.append(take)
    return ClassBenchmark("fashion-mnist", tuple(classnames), tuple(classnames), tuple(role[c] for c in classnames),
                          (source,), tuple(rows), tuple(labels), tuple(image_roles))


# ------------------------------------------------------------------------------------ the split diagram
def split_diagram(benches: dict[str, ClassBenchmark], score_datasets: Sequence[str] = ()):
    """ViTeRB's protocol drawn from the benchmark objects themselves (a matplotlib figure): for each dataset its
    seen / val / unseen classes (bar widths: shares of its classes; labels: class and image counts; whether it
    is in the score or a separate check), and what each part is used for."""
    import matplotlib.pyplot as plt

    colours = {"seen": "#4C72B0", "val": "#8FB3DE", "unseen": "#C44E52"}
    fig, (bars, flow) = plt.subplots(1, 2, figsize=(10.5, (1.2 + 0.9 * len(benches) * 0.95)),
                                     gridspec_kw={"width_ratios": [1.6, 1]})
    for y, (name, bench) in enumerate(reversed(list(benches.items()))):
        counts, left = bench.counts(), 0.0
        images = {"seen": counts["train images"], "val": counts["val images"], "unseen": counts["test images"]}
        for role in ROLES:
            n = counts[f"{role} classes"]
            if n:
                width = n / len(bench.class_keys)
                bars.barh(y, width, left=left, height=0.5, color=colours[role], edgecolor="white")
                bars.text(left + width / 2, y, f"{n} {role}\n{images[role]} img", ha="center", va="center",
                          fontsize=9, color="white" if width > 0.1 else "black")
                left += width
        where = "the score" if name in score_datasets else "a separate check"
        extra = (f"; val: {images['val']} held-out photos of the seen classes"
                 if images["val"] and not counts["val classes"] else "")
        bars.text(0, y + 0.32, f"{name}: {where}, chance {100 / counts['unseen classes']:.1f} %{extra}", fontsize=9,
                  ha="left", va="bottom")
    bars.set(xlim=(0, 1.0), ylim=(-0.5, len(benches) - 0.2), yticks=[], xlabel="share of the dataset's classes")
    bars.grid(False)
    bars.spines[["top", "right", "left"]].set_visible(False)
    steps = [("seen", "seen classes: train the head on\n(image, class text) pairs, one text\n"
                      "of the class drawn per step"),
             ("val", "val images: early stopping"),
             ("unseen", "unseen classes: classify each test\nimage among the unseen classes by\n"
                        "the mean score of their texts;\nscore = mean per-class accuracy")]
    for i, (role, text) in enumerate(steps):
        flow.text(0.02, 0.95 - 0.3 * i, text, fontsize=9.5, va="top", ha="left",
                  bbox=dict(boxstyle="round", facecolor=colours[role], alpha=0.25, edgecolor=colours[role]))
    flow.axis("off")
    fig.suptitle("ViTeRB's protocol: disjoint seen and unseen classes per dataset", fontsize=11)
    fig.tight_layout()
    return fig

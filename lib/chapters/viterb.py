"""ViTeRB: which language model's features align best with a frozen vision model, on *unseen* classes.

The benchmark of Ruthardt et al. (*Do better language models have crisper vision?*, §4-5): for each
dataset, classes are split into *seen* and *unseen*; a ShareLock head is trained on (image feature,
class-text feature) pairs of the seen classes only, and scored by mean per-class accuracy on images
of the unseen classes, whose class texts it has never seen. The score, averaged over datasets, ranks
language models by how "visual" their representation of text is.

This module holds everything the chapter needs and nothing it shows: the splits (as data, checksummed),
the class texts of each type (each a named source with its own store key), the text generation of
``tools/generate_class_texts.py``, a model's perplexity on held-out text, and the train-and-score
loop. See notebooks/viterb.py, sections "Seen and unseen classes, as data", "Text per class" and
"Train on seen classes, score on unseen ones".
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

import torch
import yaml

from lib.data import emoji, manifests, wordnet
from lib.core.atomic import write_bytes, write_json
from lib.core.checksums import file_sha256
from lib.core.config import HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.paths import REPO_ROOT

SMALL_DATASETS = ("emoji", "fashion-mnist")
TEXT_KINDS = ("name", "description", "encyclopedia", "reference")
GENERATED_KINDS = ("description", "encyclopedia")
CLASS_TEXT_DIR = REPO_ROOT / "data_manifests" / "class_texts"
CLASS_TEXT_MANIFEST = REPO_ROOT / "data_manifests" / "class_texts.yaml"
SPLIT_DIR = REPO_ROOT / "data_manifests" / "splits"

# The recorded prompts (``{c}`` = the class name) and decoding settings of the generated text types.
PROMPTS = {
    "description": "Describe what a {c} looks like in one sentence.",
    "encyclopedia": "Write a short encyclopedia entry about {c}.",
}
MAX_NEW_TOKENS = {"description": 40, "encyclopedia": 90}
# Template of the ``name`` text type. The same text is used for training and for the unseen classes'
# prototypes: a last-token decoder must see the same kind of text at test time as in training
# (notebooks/sharelock.py, "Prompts must look like the training captions").
NAME_TEMPLATE = "{c}"

# Fashion-MNIST class -> (WordNet noun lemma, sense number): the synset whose gloss is the class's
# reference text. Senses were chosen by reading the glosses (sense 1 in every case).
FASHION_WORDNET = {
    "T-shirt/top": ("t-shirt", 1), "Trouser": ("trouser", 1), "Pullover": ("pullover", 1),
    "Dress": ("dress", 1), "Coat": ("coat", 1), "Sandal": ("sandal", 1), "Shirt": ("shirt", 1),
    "Sneaker": ("sneaker", 1), "Bag": ("bag", 1), "Ankle boot": ("boot", 1),
}
FASHION_SPLIT_SEED = 0
FASHION_UNSEEN = 3


# --------------------------------------------------------------------------------------- splits
def seeded_class_split(classes: Sequence[str], n_unseen: int, seed: int, n_val: int = 0) -> dict:
    """Seeded random split of a class list into seen / (val) / unseen classes.

    The same function makes Fashion-MNIST's 7/3 split (written to ``data_manifests/splits``) and
    FGVC-Aircraft's 50/20 split of its 70 families at load time (from the manifest's class list).
    ``val`` classes are a subset of the seen ones, held out for early stopping.
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
    split = seeded_class_split(classes, FASHION_UNSEEN, FASHION_SPLIT_SEED)
    path = SPLIT_DIR / "fashion-mnist.json"
    write_json(path, split)
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


# ---------------------------------------------------------------------------- generated texts
def generation_classes(dataset: str) -> dict[str, str]:
    """Class key -> class name for every class whose texts the script generates."""
    if dataset == "emoji":
        return {c.key: c.label for c in emoji_concepts()}
    if dataset == "fashion-mnist":
        return {c: c for c in manifests.load("fashion-mnist")["classes"]}
    raise ValueError(f"no small-config class list for {dataset!r}")


# Emoji concepts in ViTeRB's small config. Generating two texts for all 1,906 concepts with SmolLM2 on
# two CPU cores would take ~70 minutes (measured: 1.4 concepts/s for 40 new tokens), so the small
# config uses a seeded subset of each split; every text type uses the same concepts (a fair comparison).
EMOJI_SUBSET = {"train": 192, "val": 64, "unseen": 192}
EMOJI_SUBSET_SEED = 0


def emoji_split(split: str) -> list:
    """The ViTeRB emoji concepts of one split (``train`` = seen, ``val`` = seen, held out for early
    stopping, ``unseen``): a seeded subset of ``lib.data.emoji``'s family-disjoint split, in corpus order."""
    concepts = emoji.split_concepts(split)
    keep = {c.key for c in random.Random(f"{EMOJI_SUBSET_SEED}-{split}").sample(concepts, EMOJI_SUBSET[split])}
    return [c for c in concepts if c.key in keep]


def emoji_concepts() -> list:
    """Every ViTeRB emoji concept (seen, val and unseen), in corpus order."""
    chosen = {c.key for split in EMOJI_SUBSET for c in emoji_split(split)}
    return [c for c in emoji.load_concepts() if c.key in chosen]


def generate_texts(model_name: str, classes: dict[str, str], kind: str, *, batch_size: int = 64,
                   device: str = "cpu") -> dict:
    """Generate one text per class with an instruction-tuned causal LM: its chat template around the
    recorded prompt, greedy decoding, batched with left padding. Returns the record that
    ``write_class_texts`` stores (model, prompt, generation settings, texts)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lib.core.models import resolve

    resolved = resolve(model_name, "transformers")
    tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=torch.float32).eval().to(device)
    prompt = PROMPTS[kind]
    settings = {"do_sample": False, "max_new_tokens": MAX_NEW_TOKENS[kind], "repetition_penalty": 1.1}
    chats = {key: tokenizer.apply_chat_template([{"role": "user", "content": prompt.replace("{c}", name)}],
                                                add_generation_prompt=True, tokenize=False)
             for key, name in classes.items()}
    keys = sorted(chats, key=lambda k: len(chats[k]))  # similar lengths per batch: little padding
    texts = {}
    with torch.no_grad():
        for start in range(0, len(keys), batch_size):
            batch_keys = keys[start : start + batch_size]
            batch = tokenizer([chats[k] for k in batch_keys], return_tensors="pt", padding=True,
                              add_special_tokens=False).to(device)
            out = model.generate(**batch, **settings, pad_token_id=tokenizer.pad_token_id)
            for key, row in zip(batch_keys, out[:, batch["input_ids"].shape[1]:]):
                texts[key] = " ".join(tokenizer.decode(row, skip_special_tokens=True).split())
    return {
        "model": {"name": model_name, **resolved.identity},
        "prompt": prompt,
        "chat_template": "the model's own (tokenizer.apply_chat_template, add_generation_prompt=True)",
        "generation": {**settings, "batch_size": batch_size, "padding_side": "left", "dtype": "float32"},
        "texts": {k: texts[k] for k in classes},
    }


def class_text_path(dataset: str, kind: str) -> Path:
    return CLASS_TEXT_DIR / f"{dataset}-{kind}.json"


def _text_manifest() -> dict:
    if CLASS_TEXT_MANIFEST.is_file():
        return yaml.safe_load(CLASS_TEXT_MANIFEST.read_text()) or {}
    return {}


def write_class_texts(dataset: str, kind: str, record: dict) -> Path:
    """Write a generated-text file and record its sha256 in ``data_manifests/class_texts.yaml``."""
    path = class_text_path(dataset, kind)
    write_json(path, record)
    manifest = _text_manifest()
    manifest.setdefault("name", "class_texts")
    manifest.setdefault("description", "ViTeRB class texts generated by tools/generate_class_texts.py "
                        "(never edited by hand); one JSON file per dataset and text type.")
    manifest.setdefault("made_by", "python -m tools.generate_class_texts --dataset <dataset> --kind <kind>")
    manifest.setdefault("obtain", "shipped in this repository; regenerate with `python -m tools.generate_class_texts "
                        "--dataset <dataset> --kind <kind>`")
    manifest.setdefault("location", "data_manifests/class_texts")
    files = [f for f in manifest.get("files", []) if f["file"] != path.name]
    files.append({"file": path.name, "dataset": dataset, "kind": kind, "model": record["model"]["name"],
                  "prompt": record["prompt"], "classes": len(record["texts"]), "sha256": file_sha256(path)})
    manifest["files"] = sorted(files, key=lambda f: f["file"])
    write_bytes(CLASS_TEXT_MANIFEST, yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=110).encode())
    return path


def load_class_texts(dataset: str, kind: str) -> dict:
    """A generated-text file, checked against the sha256 in ``data_manifests/class_texts.yaml``."""
    path = class_text_path(dataset, kind)
    entries = {f["file"]: f for f in _text_manifest().get("files", [])}
    how = f"python -m tools.generate_class_texts --dataset {dataset} --kind {kind}"
    if not path.is_file() or path.name not in entries:
        raise manifests.DatasetMissingError(f"{path} (or its manifest entry) is missing: generate it with `{how}`")
    if file_sha256(path) != entries[path.name]["sha256"]:
        raise manifests.DatasetMissingError(f"{path} does not match its sha256 in {CLASS_TEXT_MANIFEST}: "
                                            f"regenerate it with `{how}`")
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class FashionImages:
    """Fashion-MNIST t10k images per class in ViTeRB's small config (the vision models run at ~20 img/s)."""

    train_per_class: int = 150  # seen classes: head training
    val_per_class: int = 50  # seen classes: early stopping
    test_per_class: int = 200  # unseen classes: the score


TextKind = Literal["name", "description", "encyclopedia", "reference"]


@dataclass(frozen=True)
class ViterbConfig:
    """``notebooks/configs/viterb.yaml``, validated field by field on load (``lib.core.config``)."""

    datasets: tuple[str, ...]
    text_kinds: tuple[TextKind, ...]
    vision: tuple[VisionModelConfig, ...]  # the first is the chapter's main image model
    text: tuple[TextModelConfig, ...]
    head: HeadConfig = field(default_factory=HeadConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    fashion: FashionImages = field(default_factory=FashionImages)
    vision_check_seeds: int = 1  # the other vision models run only the first N seeds (a check, not the table)
    vision_check_kinds: tuple[TextKind, ...] = ("name", "reference")  # ... and only these text types
    perplexity_texts: int = 200  # held-out WordNet glosses for each decoder's own perplexity
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)


def load_config(name: str, overrides: dict | None = None) -> ViterbConfig:
    """``small`` / ``full`` of ``notebooks/configs/viterb.yaml`` (or a YAML path), validated."""
    from lib.core import config as configs

    return configs.load("viterb", name, ViterbConfig, overrides)


# ----------------------------------------------------------------------------- the benchmark
@dataclass(frozen=True)
class ImageSource:
    """A set of images whose features are cached as one store entry (ids and source key it)."""

    name: str
    ids: tuple[str, ...]
    load_image: Callable
    source: dict


@dataclass(frozen=True)
class Benchmark:
    """One ViTeRB dataset: classes with a role each, images with a class and a role each.

    ``class_role``: ``seen`` (train images), ``val`` (emoji: held-out seen-side concepts) or ``unseen``.
    ``image_role``: ``train``, ``val`` or ``test`` (test images are always of unseen classes).
    Image ``i`` is row ``image_rows[i][1]`` of the features of ``image_sources[image_rows[i][0]]``.
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


def emoji_benchmark(style: str = "google") -> Benchmark:
    """Emoji concepts: one drawing per concept, so seen concepts give the training pairs, the val
    concepts the early-stopping pairs, the unseen concepts the test. Image features are those of the
    ShareLock chapter's full ``emoji_pairs`` sets (same store entries), rows selected by concept."""
    from lib.data.datasets import emoji_pairs

    keys, names, roles, rows, labels, image_roles, sources = [], [], [], [], [], [], []
    for split, class_role, image_role in (("train", "seen", "train"), ("val", "val", "val"), ("unseen", "unseen", "test")):
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
    return Benchmark("emoji", tuple(keys), tuple(names), tuple(roles), tuple(sources), tuple(rows),
                     tuple(labels), tuple(image_roles))


def fashion_benchmark(images: FashionImages = FashionImages()) -> Benchmark:
    """Fashion-MNIST photos (t10k): seen classes give training and validation images, unseen classes
    the test images. One cached feature entry (``datasets.fashion_mnist_labelled``) covers them all."""
    from lib.data.datasets import fashion_mnist_labelled

    split = load_split_file("fashion-mnist")
    per_class = max(images.train_per_class + images.val_per_class, images.test_per_class)
    photos = fashion_mnist_labelled(per_class, prompts="name")
    source = ImageSource(photos.name, photos.ids, photos.load_image, photos.source)
    classnames = list(photos.classnames)
    role = {c: "seen" for c in split["seen"]} | {c: "unseen" for c in split["unseen"]}
    rows, labels, image_roles, seen_count = [], [], [], {}
    for row, label in enumerate(photos.labels):
        name = classnames[label]
        k = seen_count.get(name, 0)
        seen_count[name] = k + 1
        if role[name] == "unseen":
            take = "test" if k < images.test_per_class else None
        else:
            take = "train" if k < images.train_per_class else "val" if k < images.train_per_class + images.val_per_class else None
        if take:
            rows.append((0, row))
            labels.append(label)
            image_roles.append(take)
    return Benchmark("fashion-mnist", tuple(classnames), tuple(classnames), tuple(role[c] for c in classnames),
                     (source,), tuple(rows), tuple(labels), tuple(image_roles))


def full_split(dataset: str, classes: Sequence[str], counts: dict[str, int] | None = None) -> dict:
    """Seen / unseen class lists of a full-config dataset from its manifest (``classes`` = the dataset's
    own class list, read at load time). AWA2 / CUB: Xian et al.'s proposed split; FGVC-Aircraft: a seeded
    random 50 / 20 split of the 70 families; ImageNet+: the seen manifest's classes (IN-1k) seen, and
    among the other ``classes`` (the synset folders on disk) the ``n_unseen`` with the largest ``counts``
    (image files per folder) unseen, unless the manifest lists ``unseen_wnids``."""
    splits = manifests.load(dataset)["splits"]
    if "seen_manifest" in splits:
        seen = list(manifests.load(splits["seen_manifest"])["class_dirs"])
        seen_set = set(seen)
        candidates = [c for c in classes if c not in seen_set]
        if "unseen_wnids" in splits:
            unseen = sorted(splits["unseen_wnids"])
            missing = [c for c in unseen if c not in candidates]
            if missing:
                raise manifests.DatasetMissingError(f"{dataset}: unseen classes {missing[:3]} (splits.unseen_wnids of "
                                                    f"data_manifests/{dataset}.yaml) are not among the synset folders")
            return {"seen": seen, "unseen": unseen}
        n_unseen = int(splits["n_unseen"])
        if counts is None:
            raise ValueError(f"{dataset}: the {splits.get('unseen_rule')!r} rule needs the image count of each class")
        ranked = sorted((c for c in candidates if counts.get(c, 0) > 0), key=lambda c: (-counts[c], c))
        if len(ranked) < n_unseen:
            raise manifests.DatasetMissingError(
                f"{dataset}: only {len(ranked)} non-empty synset folders besides the {splits['seen_manifest']} classes, "
                f"{n_unseen} needed for the unseen classes: add the missing IN-21k synsets")
        return {"seen": seen, "unseen": sorted(ranked[:n_unseen]),
                "rule": f"the {n_unseen} non-{splits['seen_manifest']} synsets with the most images (ties: smaller wnid)"}
    if "unseen" in splits and isinstance(splits["unseen"], list):
        unseen = list(splits["unseen"])
        missing = [c for c in unseen if c not in classes]
        if missing:
            raise manifests.DatasetMissingError(f"{dataset}: unseen classes {missing[:3]} are not in the dataset's class list")
        return {"seen": [c for c in classes if c not in unseen], "unseen": unseen}
    if "n_unseen" in splits:
        return seeded_class_split(classes, int(splits["n_unseen"]), int(splits["seed"]))
    raise manifests.DatasetMissingError(f"{dataset}: {splits.get('unseen', 'no class list')}")


# --------------------------------------------------------------------- full-config image loaders
# Each loader reads one dataset in its released layout (the manifest's ``layout``: where the class list,
# the image lists and the images are), checks that every class the split names is there with images, and
# hands (class key, display name, relative image paths) to ``_full_benchmark``, which applies the split and
# the manifest's ``images`` settings the same way for all four. Nothing is decoded until ``load_image(i)``.
def _obtain(dataset: str) -> str:
    return " ".join(str(manifests.load(dataset).get("obtain", "")).split())


def _image_names(folder: Path) -> list[str]:
    """Image file names in one folder, sorted (os.scandir: ImageNet folders hold ~1,300 files each)."""
    from lib.data.datasets import IMAGE_SUFFIXES

    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if e.is_file() and Path(e.name).suffix.lower() in IMAGE_SUFFIXES)


def _class_folder_images(dataset: str, folder: Path, key: str, role: str) -> list[str]:
    """The images of one class folder; a missing or empty folder stops the run naming class and folder."""
    if not folder.is_dir():
        raise manifests.DatasetMissingError(
            f"dataset {dataset!r}: class {key!r} ({role} in the split of data_manifests/{dataset}.yaml) has no "
            f"folder {folder}: the copy is incomplete or not laid out as the manifest says. Get it: {_obtain(dataset)}")
    names = _image_names(folder)
    if not names:
        raise manifests.DatasetMissingError(
            f"dataset {dataset!r}: class folder {folder} (class {key!r}, {role}) holds no images: an interrupted "
            f"extraction? Extract it again. Get it: {_obtain(dataset)}")
    return names


def _role(split: dict, key: str) -> str:
    return "unseen" if key in set(split["unseen"]) else "seen"


def _n_val(n: int, fraction: float) -> int:
    """Validation images of a seen class: ``round(fraction * n)``, at least one when the class has two."""
    if n < 2 or fraction <= 0:
        return 0
    return min(n - 1, max(1, round(fraction * n)))


def _full_benchmark(dataset: str, root: Path, classes: Sequence[tuple[str, str]], split: dict,
                    images: dict[str, list[str]]) -> Benchmark:
    """Assemble a full-config ``Benchmark`` the same way for every dataset.

    ``classes``: (key, display name) in the dataset's own order; ``images``: class key -> image paths
    relative to ``root``. Rows follow the class order, then the sorted path within a class, so the ids
    (and the feature-store key built from them) do not depend on the file system's listing order.
    The manifest's ``images`` settings: a class over its cap (``seen_per_class`` / ``unseen_per_class``,
    null = no cap) keeps a seeded sample; a seen class's images are split into ``train`` and ``val``
    (early stopping) by a seeded shuffle keyed by the class, so adding images to one class never moves
    another's; unseen classes' images are ``test`` images only.
    """
    from lib.data.datasets import open_image

    settings = manifests.load(dataset).get("images") or {}
    seed = int(settings.get("seed", 0))
    val_fraction = float(settings.get("val_fraction", 0.1))
    caps = {"seen": settings.get("seen_per_class"), "unseen": settings.get("unseen_per_class")}
    ids, labels, image_roles = [], [], []
    for label, (key, _) in enumerate(classes):
        role = _role(split, key)
        paths = sorted(images[key])
        cap = caps[role]
        if cap is not None and len(paths) > int(cap):
            paths = sorted(random.Random(f"{seed}:cap:{key}").sample(paths, int(cap)))
        if role == "unseen":
            roles = ["test"] * len(paths)
        else:
            shuffled = list(paths)
            random.Random(f"{seed}:val:{key}").shuffle(shuffled)
            val = set(shuffled[: _n_val(len(paths), val_fraction)])
            roles = ["val" if p in val else "train" for p in paths]
        ids += paths
        labels += [label] * len(paths)
        image_roles += roles
    files = [root / i for i in ids]
    source = ImageSource(dataset, tuple(ids), lambda i: open_image(files[i]),
                         {"dataset": dataset, "manifest": manifests.manifest_hash(dataset), "benchmark": "viterb"})
    return Benchmark(dataset, tuple(k for k, _ in classes), tuple(n for _, n in classes),
                     tuple(_role(split, k) for k, _ in classes), (source,), tuple((0, i) for i in range(len(ids))),
                     tuple(labels), tuple(image_roles))


def awa2_benchmark() -> Benchmark:
    """AWA2: ``<location>/<class>/*.jpg`` for the manifest's 50 classes (AwA2's classes.txt order); display
    name = the folder name with ``+`` as a space ("grizzly bear")."""
    from lib.data.datasets import _manifest_folder

    folder = _manifest_folder("awa2", "")
    classes = list(manifests.load("awa2")["classes"])
    split = full_split("awa2", classes)
    images = {c: [f"{c}/{n}" for n in _class_folder_images("awa2", folder / c, c, _role(split, c))] for c in classes}
    return _full_benchmark("awa2", folder, [(c, c.replace("+", " ")) for c in classes], split, images)


def _numbered_lines(path: Path) -> list[tuple[str, str]]:
    """``"<id> <rest>"`` lines (CUB's classes.txt / images.txt, FGVC-Aircraft's image lists)."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            parts = line.strip().split(maxsplit=1)
            if len(parts) != 2:
                raise manifests.DatasetMissingError(f"{path} line {number} is not '<id> <name>': {line!r}; "
                                                    "the file is damaged, extract it again")
            rows.append((parts[0], parts[1]))
    return rows


def _check_listed_files(dataset: str, root: Path, paths: Sequence[str], listing: Path | str) -> None:
    """Every image a list names exists: a half-extracted archive would otherwise fail mid-way through feature extraction."""
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        raise manifests.DatasetMissingError(
            f"dataset {dataset!r}: {len(missing)} of the {len(paths)} images listed in {listing} are missing "
            f"(e.g. {root / missing[0]}): the extraction is incomplete. Get it: {_obtain(dataset)}")


def cub_benchmark() -> Benchmark:
    """CUB-200-2011: classes from ``classes.txt`` (id order), images from ``images.txt`` (the dataset's own
    list, so a stray file in a folder is never scored); display name = the species without its number and
    underscores ("Yellow bellied Flycatcher")."""
    from lib.data.datasets import _manifest_folder

    layout = manifests.load("cub")["layout"]
    folder = _manifest_folder("cub", layout["classes"])
    _manifest_folder("cub", layout["images"])
    classes = [name for _, name in _numbered_lines(folder / layout["classes"])]
    absent = [c for c in manifests.load("cub")["splits"]["unseen"] if c not in classes]
    if absent:
        raise manifests.DatasetMissingError(
            f"dataset 'cub': class {absent[0]!r} (unseen in the split of data_manifests/cub.yaml) is not in "
            f"{folder / layout['classes']} and has no folder {folder / layout['image_dir'] / absent[0]}"
            f"{f' ({len(absent)} such classes)' if len(absent) > 1 else ''}: another version of CUB? Get it: {_obtain('cub')}")
    split = full_split("cub", classes)
    images: dict[str, list[str]] = {c: [] for c in classes}
    for _, path in _numbered_lines(folder / layout["images"]):
        class_dir = path.split("/")[0]
        if class_dir not in images:
            raise manifests.DatasetMissingError(f"{folder / layout['images']} lists {path!r}, whose class is not in "
                                                f"{folder / layout['classes']}: the two files are of different versions")
        images[class_dir].append(f"{layout['image_dir']}/{path}")
    for c in classes:
        _class_folder_images("cub", folder / layout["image_dir"] / c, c, _role(split, c))
    _check_listed_files("cub", folder, [p for c in classes for p in images[c]], folder / layout["images"])
    names = [(c, c.split(".", 1)[-1].replace("_", " ")) for c in classes]
    return _full_benchmark("cub", folder, names, split, images)


def aircraft_benchmark() -> Benchmark:
    """FGVC-Aircraft families: ``families.txt`` (file order, which the seeded 50/20 split shuffles); images:
    the union of the three official lists (ViTeRB splits by family, not by the official partition)."""
    from lib.data.datasets import _manifest_folder

    dataset = "fgvc-aircraft"
    layout = manifests.load(dataset)["layout"]
    folder = _manifest_folder(dataset, layout["classes"])
    families = [line.strip() for line in (folder / layout["classes"]).read_text(encoding="utf-8").splitlines() if line.strip()]
    split = full_split(dataset, families)
    images: dict[str, list[str]] = {f: [] for f in families}
    family_of: dict[str, str] = {}
    for listing in layout["images"]:
        _manifest_folder(dataset, listing)
        for image_id, family in _numbered_lines(folder / listing):
            if family not in images:
                raise manifests.DatasetMissingError(f"{folder / listing}: image {image_id} has family {family!r}, which "
                                                    f"is not in {folder / layout['classes']}: files of different versions?")
            if family_of.setdefault(image_id, family) != family:
                raise manifests.DatasetMissingError(f"image {image_id} has two families ({family_of[image_id]!r}, "
                                                    f"{family!r}) in {folder}: the image lists are damaged")
            images[family].append(f"{layout['image_dir']}/{image_id}{layout['image_suffix']}")
    images = {f: sorted(set(paths)) for f, paths in images.items()}
    empty = [f for f in families if not images[f]]
    if empty:
        raise manifests.DatasetMissingError(
            f"dataset {dataset!r}: family {empty[0]!r} ({_role(split, empty[0])}) of {folder / layout['classes']} has no "
            f"image in {', '.join(layout['images'])} under {folder}: the lists are incomplete. Get it: {_obtain(dataset)}")
    _check_listed_files(dataset, folder, [p for f in families for p in images[f]], f"{folder}/{{{','.join(layout['images'])}}}")
    return _full_benchmark(dataset, folder, [(f, f) for f in families], split, images)


def imagenet_plus_benchmark() -> Benchmark:
    """ImageNet+: the 1,000 IN-1k synsets (``seen/<wnid>/``, names from ``imagenet-1k.yaml``) and the unseen
    IN-21k synsets (``unseen/<wnid>/``, chosen by ``full_split``'s rule from the folders' image counts;
    display name = the synset's first WordNet 3.0 lemma). Caps per class come from the manifest."""
    from lib.data.datasets import _manifest_folder

    dataset = "imagenet-plus"
    manifest = manifests.load(dataset)
    layout = manifest["layout"]
    folder = _manifest_folder(dataset, layout["seen_dir"])
    _manifest_folder(dataset, layout["unseen_dir"])
    seen_manifest = manifests.load(manifest["splits"]["seen_manifest"])
    seen_names = dict(zip(seen_manifest["class_dirs"], seen_manifest["classes"]))
    unseen_root = folder / layout["unseen_dir"]
    with os.scandir(unseen_root) as entries:
        candidates = sorted(e.name for e in entries if e.is_dir() and e.name not in seen_names)
    counts = {c: len(_image_names(unseen_root / c)) for c in candidates}
    split = full_split(dataset, candidates, counts)
    images = {}
    for wnid in split["seen"]:
        names = _class_folder_images(dataset, folder / layout["seen_dir"] / wnid, wnid, "seen")
        images[wnid] = [f"{layout['seen_dir']}/{wnid}/{n}" for n in names]
    classes = [(wnid, seen_names[wnid]) for wnid in split["seen"]]
    for wnid in split["unseen"]:
        names = _class_folder_images(dataset, unseen_root / wnid, wnid, "unseen")
        images[wnid] = [f"{layout['unseen_dir']}/{wnid}/{n}" for n in names]
        classes.append((wnid, _wordnet_name(wnid, unseen_root / wnid)))
    return _full_benchmark(dataset, folder, classes, split, images)


def _wordnet_name(wnid: str, folder: Path) -> str:
    try:
        return wordnet.synset_at(int(wnid[1:])).words[0]
    except ValueError:
        raise manifests.DatasetMissingError(f"{folder}: {wnid!r} is not a WordNet 3.0 noun synset id (n + 8 digits): "
                                            "remove the folder or rename it to its synset's wnid") from None


FULL_LOADERS = {"awa2": awa2_benchmark, "cub": cub_benchmark, "fgvc-aircraft": aircraft_benchmark,
                "imagenet-plus": imagenet_plus_benchmark}


def load_benchmark(dataset: str, cfg: ViterbConfig) -> Benchmark:
    """The ``Benchmark`` of one dataset. Small config: emoji, Fashion-MNIST (sizes from ``cfg``); full config:
    the four datasets read from their manifests' locations (sizes from the manifests: the images are data,
    and the same images must back every run that shares their store entries)."""
    if dataset == "emoji":
        return emoji_benchmark()
    if dataset == "fashion-mnist":
        return fashion_benchmark(cfg.fashion)
    if dataset in FULL_LOADERS:
        return FULL_LOADERS[dataset]()
    raise ValueError(f"ViTeRB has no dataset {dataset!r}: one of {SMALL_DATASETS + tuple(FULL_LOADERS)}")


# ------------------------------------------------------------------------------- class texts
def class_texts(bench: Benchmark, kind: str) -> list[str]:
    """One text per class of ``bench`` (in ``class_keys`` order) of the given type.

    ``name``: the class name in ``NAME_TEMPLATE``; ``description`` / ``encyclopedia``: generated by
    ``tools/generate_class_texts.py`` (checksummed files); ``reference``: real reference text — emoji:
    the CLDR label and keywords ("label: tag, tag"), Fashion-MNIST: the WordNet 3.0 gloss.
    """
    if kind == "name":
        return [NAME_TEMPLATE.replace("{c}", name) for name in bench.class_names]
    if kind in GENERATED_KINDS:
        texts = load_class_texts(bench.name, kind)["texts"]
        missing = [k for k in bench.class_keys if k not in texts]
        if missing:
            raise manifests.DatasetMissingError(f"{class_text_path(bench.name, kind)} has no text for {missing[:3]}: regenerate it")
        return [texts[k] for k in bench.class_keys]
    if kind == "reference":
        if bench.name == "emoji":
            by_key = {c.key: c for c in emoji.load_concepts()}
            return [emoji.caption(by_key[k], "label_tags") for k in bench.class_keys]
        if bench.name == "fashion-mnist":
            return [f"{name}: {wordnet.gloss(*FASHION_WORDNET[name])}" for name in bench.class_names]
        raise manifests.DatasetMissingError(f"{bench.name}: reference text (Wikipedia articles in the paper) is not shipped")
    raise ValueError(f"text kind {kind!r} is not one of {TEXT_KINDS}")


def text_source(bench: Benchmark, kind: str) -> dict:
    """The named source of a text type: part of its store key (the texts themselves are keyed too)."""
    source = {"viterb": bench.name, "kind": kind, "classes_sha256": hashlib.sha256(
        json.dumps(list(bench.class_keys)).encode()).hexdigest()}
    if kind in GENERATED_KINDS:
        source["file_sha256"] = file_sha256(class_text_path(bench.name, kind))
    elif kind == "reference" and bench.name == "fashion-mnist":
        source["wordnet"] = "3.0 (Debian wordnet-base)"
    return source


def token_lengths(model_name: str, texts: Sequence[str]) -> list[int]:
    """Token counts under a model's tokenizer (to report what ``max_length`` truncates)."""
    from transformers import AutoTokenizer

    from lib.core.models import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve(model_name, "transformers").load_path)
    return [len(ids) for ids in tokenizer(list(texts))["input_ids"]]


# ------------------------------------------------------------------------ capability measures
def capability(model_name: str, texts: Sequence[str], *, batch_size: int = 16, device: str = "cpu") -> dict:
    """Parameter count of a text model and, for a causal LM, its perplexity on ``texts``.

    Perplexity = exp(mean negative log-likelihood per predicted token), each text scored alone after
    the model's BOS token when it has one (padding masked out). Encoders get ``perplexity = None``
    (a masked LM has no comparable left-to-right likelihood). Cached as JSON under the cache folder,
    keyed by the model identity and the texts.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    from lib.core.atomic import write_json as _write
    from lib.core.models import resolve
    from lib.core.paths import cache_root

    resolved = resolve(model_name, "transformers")
    key = hashlib.sha256(json.dumps([resolved.identity, list(texts)], sort_keys=True).encode()).hexdigest()[:20]
    path = cache_root() / "viterb" / f"capability-{key}.json"
    if path.is_file():
        return json.loads(path.read_text())
    config = AutoConfig.from_pretrained(resolved.load_path)
    decoder = bool(getattr(config, "is_decoder", False)) or any("CausalLM" in a for a in (config.architectures or []))
    decoder = decoder or config.model_type in ("gemma3_text", "gemma3", "llama", "mistral", "qwen2", "gpt2")
    tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
    result = {"model": model_name, "decoder": decoder, "perplexity": None, "texts": len(texts)}
    if not decoder:
        model = AutoModel.from_pretrained(resolved.load_path)
        result["params"] = sum(p.numel() for p in model.parameters())
    else:
        model = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=torch.float32).eval().to(device)
        result["params"] = sum(p.numel() for p in model.parameters())
        tokenizer.padding_side = "right"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        nll, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(list(texts[start : start + batch_size]), return_tensors="pt", padding=True).to(device)
                ids, mask = batch["input_ids"], batch["attention_mask"]
                if tokenizer.bos_token_id is not None and not bool((ids[:, 0] == tokenizer.bos_token_id).all()):
                    bos = torch.full((len(ids), 1), tokenizer.bos_token_id, dtype=ids.dtype)
                    ids, mask = torch.cat([bos, ids], 1), torch.cat([torch.ones_like(bos), mask], 1)
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                target, keep = ids[:, 1:], mask[:, 1:].bool()
                losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
                nll += float(losses[keep].sum())
                count += int(keep.sum())
        result["perplexity"] = float(torch.exp(torch.tensor(nll / count)))
        result["tokens"] = count
    del model
    _write(path, result)
    return result


# ------------------------------------------------------------------------- train and score
@torch.no_grad()
def unseen_score(method, image_features: torch.Tensor, class_text_features: torch.Tensor, bench: Benchmark) -> float:
    """ViTeRB's score: mean per-class accuracy on test images, classified among the unseen classes
    only, whose prototypes are the head's embeddings of their class texts."""
    from lib.core.evaluate import mean_per_class_recall

    method.eval()
    unseen = bench.classes("unseen")
    test = bench.images("test")
    remap = {c: i for i, c in enumerate(unseen)}
    prototypes = method.embed_text(class_text_features[unseen])
    logits = method.embed_image(image_features[test]) @ prototypes.T
    labels = torch.tensor([remap[bench.image_labels[i]] for i in test])
    return mean_per_class_recall(logits, labels)


def train_and_score(bench: Benchmark, image_features: torch.Tensor, class_text_features: torch.Tensor,
                    cfg: ViterbConfig, seed: int, *, shuffle_texts: bool = False) -> dict:
    """Train a ShareLock head on (image, class text) pairs of the seen classes, early-stop on the val
    images, score on the unseen classes. ``image_features`` has one row per benchmark image,
    ``class_text_features`` one row per class. ``shuffle_texts``: the control (class texts permuted among
    the seen classes: the pairing is broken, everything else kept)."""
    from lib.core import train as training
    from lib.core.config import as_dict
    from lib.methods.sharelock import ShareLock

    bench.check_no_leak()
    training.seed_everything(seed)
    method = ShareLock(class_text_features.shape[1], image_features.shape[1], cfg.head, cfg.loss, kind="mlp")
    text_rows = torch.arange(len(bench.class_keys))
    if shuffle_texts:
        seen = torch.tensor(bench.classes("seen"))
        text_rows[seen] = seen[torch.randperm(len(seen), generator=torch.Generator().manual_seed(seed))]
    labels = torch.tensor(bench.image_labels)

    def pairs(role):
        rows = torch.tensor(bench.images(role))
        return {"image": image_features[rows], "text": class_text_features[text_rows[labels[rows]]]}

    settings = training.TrainConfig(**{**as_dict(cfg.train), "seed": seed, "device": cfg.device})
    result = training.fit(method, pairs("train"), pairs("val"), settings)
    return {"score": unseen_score(method, image_features, class_text_features, bench),
            "chance": 1 / len(bench.classes("unseen")), "best_step": result.best_step,
            "train_s": round(result.seconds, 2)}

"""What a chapter trains and tests on, in one shape for the small and the full config.

Why one shape: the small config (emoji drawings + Fashion-MNIST photos) and the full config
(CC3M-LLaVA / COCO caption pairs + ImageNet) must run through the *same* notebook code, so both are
turned into the same three things: image-caption ``Pairs`` for training, validation and retrieval,
and ``Labelled`` image sets for zero-shot classification. The full config reads its datasets from
the folders its manifests name (``pairs.jsonl`` + images; one folder per class); tests exercise
that path on small local folders. See ``notebooks/sharelock.py``, section "The data".
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal
from pathlib import Path
from typing import Callable, Sequence

from PIL import Image

from corpora import emoji, fashion_mnist, manifests
from lib.data import shards
from lib.data.images import BadImageError, open_image  # noqa: F401  (re-exported: the loaders' one image reader)
from corpora.templates import EMOJI_TEMPLATES, IMAGENET_TEMPLATES, NAME_ONLY, PHOTO_TEMPLATES

@dataclass(frozen=True)
class DataConfig:
    """What a chapter trains and tests on (validated by ``lib.core.config``): the emoji corpus or image-caption
    ``pairs`` of a manifest, caption and prompt styles, extra zero-shot sets, and size limits."""

    corpus: Literal["emoji", "pairs", "medium"]  # medium: corpora.medium's pooled corpus (corpora.benchmarks)
    captions: Literal["label", "label_tags", "long"] = "label_tags"
    # zero-shot prompts: the bare class name, or CLIP-style templates
    prompts: Literal["name", "sentences"] = "sentences"
    train_style: Literal["google", "twitter"] = "google"
    other_style: Literal["google", "twitter"] = "twitter"
    pairs_dataset: str | None = None  # full config: a manifest name (image-caption pairs)
    zero_shot: tuple[str, ...] = ()  # extra zero-shot datasets by manifest name
    zero_shot_per_class: int | None = None  # cap images per class (small config); None = all
    limit: int | None = None  # keep only the first N training concepts/pairs (tests)



SEEN_CLASSES = 381  # seen-concept ceiling: as many classes as the unseen test, drawn from training
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


@dataclass(frozen=True)
class Pairs:
    """Images with their captions; ``concepts`` names the concept of each row (for leak checks)."""

    name: str
    ids: tuple[str, ...]
    captions: tuple[str, ...]
    concepts: tuple[str, ...]
    load_image: Callable[[int], Image.Image]
    source: dict  # dataset identity for store keys (manifest hash, style, split)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Labelled:
    """Images with class labels, for zero-shot classification."""

    name: str
    ids: tuple[str, ...]
    labels: tuple[int, ...]
    classnames: tuple[str, ...]
    templates: tuple[str, ...]
    load_image: Callable[[int], Image.Image]
    source: dict
    groups: tuple[int, ...] | None = None  # a group id per class: synonyms share one (corpora.synonyms)

    def __len__(self) -> int:
        return len(self.ids)


def emoji_pairs(split: str, style: str, captions: str, limit: int | None = None) -> Pairs:
    concepts = emoji.split_concepts(split)[:limit]
    return Pairs(
        name=f"emoji-{split}-{style}",
        ids=tuple(f"{c.key}/{style}" for c in concepts),
        captions=tuple(emoji.caption(c, captions) for c in concepts),
        concepts=tuple(c.key for c in concepts),
        load_image=lambda i, cs=concepts: cs[i].image(style),
        source={"dataset": "emoji", "manifest": manifests.manifest_hash("emoji"), "split": split, "style": style},
    )


def emoji_labelled(split: str, style: str, limit: int | None = None, prompts: str = "sentences") -> Labelled:
    """Zero-shot classification among the concepts of one split: the class name is the CLDR label.

    ``limit`` keeps the first N concepts (the seen-concept ceiling needs no 1,300-way test).
    """
    concepts = emoji.split_concepts(split)[:limit]
    return Labelled(
        name=f"emoji-{'seen' if split == 'train' else split}-{style}",
        ids=tuple(f"{c.key}/{style}" for c in concepts),
        labels=tuple(range(len(concepts))),
        classnames=tuple(c.label for c in concepts),
        templates=tuple(NAME_ONLY if prompts == "name" else EMOJI_TEMPLATES),
        load_image=lambda i, cs=concepts: cs[i].image(style),
        source={"dataset": "emoji", "manifest": manifests.manifest_hash("emoji"), "split": split, "style": style},
    )


def fashion_mnist_labelled(per_class: int | None, prompts: str = "sentences") -> Labelled:
    photos = fashion_mnist.load_test(per_class)
    return Labelled(
        name="fashion-mnist",
        ids=photos.ids,
        labels=tuple(int(x) for x in photos.labels),
        classnames=photos.classnames,
        templates=tuple(NAME_ONLY if prompts == "name" else PHOTO_TEMPLATES),
        load_image=photos.image,
        source={"dataset": "fashion-mnist", "manifest": manifests.manifest_hash("fashion-mnist"), "split": "t10k"},
    )


def prepared_folder(name: str, marker: str) -> Path:
    folder = manifests.location(name)
    if not (folder / marker).exists():
        how = " ".join(str(manifests.load(name).get("obtain", "")).split())
        raise manifests.DatasetMissingError(
            f"dataset {name!r}: {folder / marker} is missing. Get it: {how} Put it in {folder} "
            f"(or set {name.upper().replace('-', '_')}_DIR)."
        )
    return folder


def jsonl_pairs(name: str, split: str, limit: int | None = None) -> Pairs:
    """Full config: ``<location>/<split>.jsonl``, one pair per line: ``{"shard", "member", "offset", "size", "key",
    "caption"}`` for an image inside a webdataset tar shard (what ``python -m provision.prepare`` writes; read with
    :mod:`lib.data.shards`), or ``{"image": path, "caption"}`` for a loose image file (a layout made by hand).

    Every line is checked where it enters: UTF-8 (a bad byte names the line), a JSON object, a non-empty caption (a
    caption ``null`` would otherwise become the text "None" and be trained on), paths inside the folder.
    """
    folder = prepared_folder(name, f"{split}.jsonl")
    path = folder / f"{split}.jsonl"
    ids, captions, images = [], [], []

    def bad(number: int, problem: str) -> manifests.DatasetMissingError:
        return manifests.DatasetMissingError(f"{path} line {number}: {problem}; fix that line (each line must be "
                                             '{"shard", "member", "offset", "size", "caption"} or {"image": "<path>", '
                                             '"caption": "<text>"}) or prepare the dataset again')

    def inside(number: int, field_name: str, rel) -> str:
        if not isinstance(rel, str) or not rel.strip():
            raise bad(number, f"{field_name} is {rel!r}, not a non-empty string")
        if rel.startswith(("/", "\\")) or ".." in rel.replace("\\", "/").split("/") or ":" in rel[:3]:
            raise bad(number, f"{field_name} {rel!r} is not a path inside {folder}")
        return rel

    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise bad(number, f"is not UTF-8 ({error.reason} at byte {error.start})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise bad(number, f"is not JSON ({error.msg})") from None
            if not isinstance(row, dict) or "caption" not in row or not ("image" in row or "shard" in row):
                raise bad(number, "is not an object with a \"caption\" and an \"image\" or a \"shard\"")
            caption = row["caption"]
            if not isinstance(caption, str) or not caption.strip():
                raise bad(number, f"caption is {caption!r}, not a non-empty string")
            if "shard" in row:
                member, offset, size = row.get("member"), row.get("offset"), row.get("size")
                if not isinstance(member, str) or not member or "/" in member:
                    raise bad(number, f"member {member!r} is not a file name inside the shard")
                if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, size)):
                    raise bad(number, f"offset {offset!r} / size {size!r} are not byte counts")
                images.append(shards.Member(folder / inside(number, "shard", row["shard"]), member, offset, size))
                ids.append(str(row.get("key") or f"{row['shard']}/{member}"))
            else:
                images.append(folder / inside(number, "image", row["image"]))
                ids.append(row["image"])
            captions.append(caption)
            if limit and len(ids) >= limit:
                break
    return Pairs(
        name=f"{name}-{split}",
        ids=tuple(ids),
        captions=tuple(captions),
        concepts=tuple(ids),
        load_image=lambda i: _open(images[i]),
        source={"dataset": name, "manifest": manifests.manifest_hash(name), "split": split},
    )


def _open(image: Path | shards.Member) -> Image.Image:
    return shards.open_member_image(image) if isinstance(image, shards.Member) else open_image(image)


def folder_labelled(name: str, per_class: int | None = None, prompts: str = "sentences") -> Labelled:
    """Full config zero-shot set: ``<location>/<class folder>/<images>``; class names from the manifest; ``prompts``:
    CLIP's 80 ImageNet templates (``sentences``) or the bare class name (``name``), as ``data.prompts`` says."""
    manifest = manifests.load(name)
    folder = prepared_folder(name, "")
    class_dirs: Sequence[str] = manifest["class_dirs"]
    classnames = manifest["classes"]
    allowed = set(manifest.get("known_duplicate_classes") or ())  # a published list's own repeats, declared
    for what, values in (("classes", classnames), ("class_dirs", class_dirs)):
        repeated = sorted({v for v in values if list(values).count(v) > 1} - (allowed if what == "classes" else set()))
        if repeated:
            raise manifests.DatasetMissingError(
                f"dataset {name!r}: data_manifests/{name}.yaml lists {what} {repeated[0]!r} more than once; two "
                "classes with one name cannot be told apart by a zero-shot classifier: merge or rename them (or list "
                "it under known_duplicate_classes if a published list repeats it)")
    if len(classnames) != len(class_dirs):
        raise manifests.DatasetMissingError(
            f"dataset {name!r}: data_manifests/{name}.yaml has {len(classnames)} classes but {len(class_dirs)} "
            "class_dirs: give one name per folder")
    missing = [d for d in class_dirs if not (folder / d).is_dir()]
    if missing:
        raise manifests.DatasetMissingError(
            f"dataset {name!r}: {len(missing)} of {len(class_dirs)} class folders are missing under {folder} "
            f"(e.g. {missing[0]}): a partial copy would be scored as complete; finish the download"
        )
    ids, labels, paths = [], [], []
    for label, class_dir in enumerate(class_dirs):
        files = sorted(p for p in (folder / class_dir).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        for path in files[:per_class]:
            ids.append(str(path.relative_to(folder)))
            labels.append(label)
            paths.append(path)
    if not ids:
        raise manifests.DatasetMissingError(f"dataset {name!r}: no images under {folder}/<class folder>/")
    return Labelled(
        name=name,
        ids=tuple(ids),
        labels=tuple(labels),
        classnames=tuple(classnames),
        templates=tuple(NAME_ONLY if prompts == "name" else IMAGENET_TEMPLATES),
        load_image=lambda i: open_image(paths[i]),
        source={"dataset": name, "manifest": manifests.manifest_hash(name)},
    )


@dataclass(frozen=True)
class Benchmark:
    """Everything a frozen-feature chapter trains and tests on (same shape in small and full configs)."""

    train: Pairs
    val: Pairs
    retrieval: Pairs  # held-out (unseen) concepts: image <-> caption retrieval
    zero_shot: tuple[Labelled, ...]  # the first is the headline set (unseen concepts / ImageNet)


def build_benchmark(data) -> Benchmark:
    """Assemble the benchmark that a ``lib.core.config.DataConfig`` describes."""
    extra = []
    for name in data.zero_shot:
        if name == "fashion-mnist":
            extra.append(fashion_mnist_labelled(data.zero_shot_per_class, data.prompts))
        else:
            extra.append(folder_labelled(name, data.zero_shot_per_class, data.prompts))
    if data.corpus == "emoji":
        style, other = data.train_style, data.other_style
        return Benchmark(
            train=emoji_pairs("train", style, data.captions, data.limit),
            val=emoji_pairs("val", style, data.captions),
            retrieval=emoji_pairs("unseen", style, data.captions),
            zero_shot=(emoji_labelled("unseen", style, prompts=data.prompts),
                       emoji_labelled("unseen", other, prompts=data.prompts),
                       emoji_labelled("train", style, limit=SEEN_CLASSES, prompts=data.prompts), *extra),
        )
    if not data.pairs_dataset:
        raise manifests.DatasetMissingError("data.pairs_dataset: a `pairs` corpus needs a manifest name")
    val = jsonl_pairs(data.pairs_dataset, "val")
    return Benchmark(
        train=jsonl_pairs(data.pairs_dataset, "train", data.limit),
        val=val,
        retrieval=val,
        zero_shot=tuple(extra),
    )

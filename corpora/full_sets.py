"""The full config's class-level datasets (AWA2, CUB, FGVC-Aircraft, ImageNet+), read in their released layouts.

Why: ViTeRB (Ruthardt et al., §4) selects AWA2, CUB, FGVC-Aircraft and ImageNet+ for their complementary
characteristics (40 to 1,000 seen classes).
Each loader reads one dataset as its manifest's ``layout`` describes (where the class list, the image lists
and the images are), checks that every class the split names is there with images, and hands (class key,
display name, relative image paths) to ``_full_benchmark``, which applies the split and the manifest's
``images`` settings the same way for all four. Nothing is decoded until ``load_image(i)``. The splits:
"For AWA2 and CUB, we utilize the splits proposed by Xian et al. (2017) while randomly assigning aircraft
types into 50 seen and 20 unseen classes"; ImageNet+ "defines the ImageNet-1k classes as seen concepts and
treats the 500 most populated classes (i.e., highest number of training samples) of ImageNet-21k as unseen
ones". The real datasets are not on this machine; tests/test_viterb_full.py runs every loader on a tiny
synthetic copy in the released layout. See notebooks/viterb.py, section "Seen and unseen classes, as data".
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Sequence

from corpora import manifests, wordnet
from corpora.class_splits import ClassBenchmark, ImageSource, seeded_class_split

__all__ = ["full_split", "awa2_benchmark", "cub_benchmark", "aircraft_benchmark", "imagenet_plus_benchmark",
           "FULL_LOADERS", "load_full"]


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
                f"{dataset}: only {len(ranked)} non-empty synset folders besides the {splits['seen_manifest']} "
                f"classes, {n_unseen} needed for the unseen classes: add the missing IN-21k synsets")
        return {"seen": seen, "unseen": sorted(ranked[:n_unseen]),
                "rule": f"the {n_unseen} non-{splits['seen_manifest']} synsets with the most images "
                        "(ties: smaller wnid)"}
    if "unseen" in splits and isinstance(splits["unseen"], list):
        unseen = list(splits["unseen"])
        missing = [c for c in unseen if c not in classes]
        if missing:
            raise manifests.DatasetMissingError(f"{dataset}: unseen classes {missing[:3]} are not in the dataset's "
                                                "class list")
        return {"seen": [c for c in classes if c not in unseen], "unseen": unseen}
    if "n_unseen" in splits:
        return seeded_class_split(classes, int(splits["n_unseen"]), int(splits["seed"]))
    raise manifests.DatasetMissingError(f"{dataset}: {splits.get('unseen', 'no class list')}")


# --------------------------------------------------------------------- full-config image loaders
def _obtain(dataset: str) -> str:
    return " ".join(str(manifests.load(dataset).get("obtain", "")).split())


def _image_names(folder: Path) -> list[str]:
    """Image file names in one folder, sorted (os.scandir: ImageNet folders hold ~1,300 files each)."""
    from corpora.datasets import IMAGE_SUFFIXES

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
                    images: dict[str, list[str]]) -> ClassBenchmark:
    """Assemble a full-config :class:`ClassBenchmark` the same way for every dataset.

    ``classes``: (key, display name) in the dataset's own order; ``images``: class key -> image paths
    relative to ``root``. Rows follow the class order, then the sorted path within a class, so the ids
    (and the feature-store key built from them) do not depend on the file system's listing order.
    The manifest's ``images`` settings: a class over its cap (``seen_per_class`` / ``unseen_per_class``,
    null = no cap) keeps a seeded sample; a seen class's images are split into ``train`` and ``val``
    (early stopping) by a seeded shuffle keyed by the class, so adding images to one class never moves
    another's; unseen classes' images are ``test`` images only.
    """
    from corpora.datasets import open_image

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
    return ClassBenchmark(dataset, tuple(k for k, _ in classes), tuple(n for _, n in classes),
                     tuple(_role(split, k) for k, _ in classes), (source,), tuple((0, i) for i in range(len(ids))),
                     tuple(labels), tuple(image_roles))


def awa2_benchmark() -> ClassBenchmark:
    """AWA2: ``<location>/<class>/*.jpg`` for the manifest's 50 classes (AwA2's classes.txt order); display
    name = the folder name with ``+`` as a space ("grizzly bear")."""
    from corpora.datasets import prepared_folder

    folder = prepared_folder("awa2", "")
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
    """Every image a list names exists: a half-extracted archive would otherwise fail mid-way through feature
    extraction."""
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        raise manifests.DatasetMissingError(
            f"dataset {dataset!r}: {len(missing)} of the {len(paths)} images listed in {listing} are missing "
            f"(e.g. {root / missing[0]}): the extraction is incomplete. Get it: {_obtain(dataset)}")


def cub_benchmark() -> ClassBenchmark:
    """CUB-200-2011: classes from ``classes.txt`` (id order), images from ``images.txt`` (the dataset's own
    list, so a stray file in a folder is never scored); display name = the species without its number and
    underscores ("Yellow bellied Flycatcher")."""
    from corpora.datasets import prepared_folder

    layout = manifests.load("cub")["layout"]
    folder = prepared_folder("cub", layout["classes"])
    prepared_folder("cub", layout["images"])
    classes = [name for _, name in _numbered_lines(folder / layout["classes"])]
    absent = [c for c in manifests.load("cub")["splits"]["unseen"] if c not in classes]
    if absent:
        raise manifests.DatasetMissingError(
            f"dataset 'cub': class {absent[0]!r} (unseen in the split of data_manifests/cub.yaml) is not in "
            f"{folder / layout['classes']} and has no folder {folder / layout['image_dir'] / absent[0]}"
            f"{f' ({len(absent)} such classes)' if len(absent) > 1 else ''}: another version of CUB? "
            f"Get it: {_obtain('cub')}")
    split = full_split("cub", classes)
    images: dict[str, list[str]] = {c: [] for c in classes}
    for _, path in _numbered_lines(folder / layout["images"]):
        class_dir = path.split("/")[0]
        if class_dir not in images:
            raise manifests.DatasetMissingError(f"{folder / layout['images']} lists {path!r}, whose class is not in "
                                                f"{folder / layout['classes']}: the two files are of different "
                                                "versions")
        images[class_dir].append(f"{layout['image_dir']}/{path}")
    for c in classes:
        _class_folder_images("cub", folder / layout["image_dir"] / c, c, _role(split, c))
    _check_listed_files("cub", folder, [p for c in classes for p in images[c]], folder / layout["images"])
    names = [(c, c.split(".", 1)[-1].replace("_", " ")) for c in classes]
    return _full_benchmark("cub", folder, names, split, images)


def aircraft_benchmark() -> ClassBenchmark:
    """FGVC-Aircraft families: ``families.txt`` (file order, which the seeded 50/20 split shuffles); images:
    the union of the three official lists (ViTeRB splits by family, not by the official partition)."""
    from corpora.datasets import prepared_folder

    dataset = "fgvc-aircraft"
    layout = manifests.load(dataset)["layout"]
    folder = prepared_folder(dataset, layout["classes"])
    families = [line.strip() for line in (folder / layout["classes"]).read_text(encoding="utf-8").splitlines()
                if line.strip()]
    split = full_split(dataset, families)
    images: dict[str, list[str]] = {f: [] for f in families}
    family_of: dict[str, str] = {}
    for listing in layout["images"]:
        prepared_folder(dataset, listing)
        for image_id, family in _numbered_lines(folder / listing):
            if family not in images:
                raise manifests.DatasetMissingError(f"{folder / listing}: image {image_id} has family {family!r}, "
                                                    f"which is not in {folder / layout['classes']}: files of "
                                                    "different versions?")
            if family_of.setdefault(image_id, family) != family:
                raise manifests.DatasetMissingError(f"image {image_id} has two families ({family_of[image_id]!r}, "
                                                    f"{family!r}) in {folder}: the image lists are damaged")
            images[family].append(f"{layout['image_dir']}/{image_id}{layout['image_suffix']}")
    images = {f: sorted(set(paths)) for f, paths in images.items()}
    empty = [f for f in families if not images[f]]
    if empty:
        raise manifests.DatasetMissingError(
            f"dataset {dataset!r}: family {empty[0]!r} ({_role(split, empty[0])}) of {folder / layout['classes']} "
            f"has no image in {', '.join(layout['images'])} under {folder}: the lists are incomplete. "
            f"Get it: {_obtain(dataset)}")
    _check_listed_files(dataset, folder, [p for f in families for p in images[f]],
                        f"{folder}/{{{','.join(layout['images'])}}}")
    return _full_benchmark(dataset, folder, [(f, f) for f in families], split, images)


def imagenet_plus_benchmark() -> ClassBenchmark:
    """ImageNet+: the 1,000 IN-1k synsets (``seen/<wnid>/``, names from ``imagenet-1k.yaml``) and the unseen
    IN-21k synsets (``unseen/<wnid>/``, chosen by ``full_split``'s rule from the folders' image counts;
    display name = the synset's first WordNet 3.0 lemma). Caps per class come from the manifest."""
    from corpora.datasets import prepared_folder

    dataset = "imagenet-plus"
    manifest = manifests.load(dataset)
    layout = manifest["layout"]
    folder = prepared_folder(dataset, layout["seen_dir"])
    prepared_folder(dataset, layout["unseen_dir"])
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


def load_full(dataset: str) -> ClassBenchmark:
    """The :class:`ClassBenchmark` of one full-config dataset (its sizes come from its manifest: the images
    are data, and the same images must back every run that shares their store entries)."""
    if dataset not in FULL_LOADERS:
        raise ValueError(f"no full-config dataset {dataset!r}: one of {', '.join(FULL_LOADERS)}")
    return FULL_LOADERS[dataset]()

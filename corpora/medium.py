"""The medium config's corpus: five offline sources pooled into ~17,500 images with concept and category splits.

Why pool: ShareLock-style zero-shot asks whether a head trained on *seen* concepts transfers to *unseen*
ones; the answer needs more concepts and more kinds of picture than the small config's emoji. The
medium corpus pools every medium source, each image with human-written text:

=================  =========  ===========================================  =========================
source             styles     text                                         manifest
=================  =========  ===========================================  =========================
Openclipart        png        cleaned title, keywords, description          data_manifests/openclipart.yaml
OpenMoji           color,     CLDR annotation + tags, group                 data_manifests/openmoji.yaml
                   black
Fluent UI emoji    modern,    CLDR label, tags, group (joined by name)      data_manifests/fluentui-emoji.yaml
                   flat,
                   high-
                   contrast
game-icons         silhou-    the icon's name                               data_manifests/game-icons.yaml
                   ette
Tux Paint stamps   stamp      an English sentence + ~60 translations        data_manifests/tuxpaint.yaml
=================  =========  ===========================================  =========================

A *concept* is a class name, lower-cased ("cat", "grinning face"): the same concept drawn by several
sources is one concept, so it is seen or unseen everywhere at once. Concepts are grouped into *families*
(:func:`family`: ``corpora.emoji.family_key`` collapses person and gender variants, then the head noun,
``corpora.openclipart.family_key``), and whole families go to train / val / unseen (70/10/20 % of the
concepts, seeded): the **concept-level** split, for ShareLock-style zero-shot. **Category-level** splits
hold out whole categories (Openclipart's and Tux Paint's folders, the emoji groups shared by OpenMoji and
Fluent, game-icons as one) for cross-domain transfer. Both are data with their sha256:
``data_manifests/splits/medium.json`` (``python -m corpora.medium --write-splits``).

Tux Paint is a test set only (never trained on): its photo-like stamps test drawings-to-photos transfer,
its translations multilingual retrieval and zero-shot (:func:`tuxpaint_pairs`, :func:`tuxpaint_labelled`).
Every ``Pairs`` / ``Labelled`` carries a ``source`` dict with the hash of every manifest involved and the
SVG renderer's version, so cached features follow the bytes. See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import Counter
from functools import lru_cache

from lib.core.atomic import write_json
from lib.core.paths import REPO_ROOT
from corpora import emoji, manifests, openclipart, svg, synonyms, tuxpaint, vector_icons
from corpora.datasets import Benchmark, Labelled, Pairs
from corpora.templates import EMOJI_TEMPLATES, NAME_ONLY, PHOTO_TEMPLATES

NAME = "medium"
SOURCES = ("openclipart", "openmoji", "fluentui-emoji", "game-icons", "tuxpaint")
TRAIN_SOURCES = ("openclipart", "openmoji", "fluentui-emoji", "game-icons")  # Tux Paint: tests only
SPLITS_FILE = REPO_ROOT / "data_manifests" / "splits" / "medium.json"
SPLIT_FRACTIONS = {"train": 0.7, "val": 0.1, "unseen": 0.2}
SPLIT_SEED = 0
CAPTIONS = ("label", "label_tags", "long")


def family(name: str) -> str:
    """Family of a concept: emoji's person/gender collapse, then the head noun ("woman cook" -> "cook")."""
    return openclipart.family_key(emoji.family_key(name))


def _emoji_caption(concept: dict, kind: str) -> str:
    label, tags = concept["label"], concept["tags"]
    if kind == "label" or not tags:
        return label if kind != "long" else f"{label}. Group: {concept['group']}."
    if kind == "label_tags":
        return f"{label}: {', '.join(tags)}"
    return f"{label}. Keywords: {', '.join(tags)}. Group: {concept['group']}, {concept['subgroup']}."


@lru_cache(maxsize=1)
def items() -> tuple[dict, ...]:
    """Every image of the pooled corpus: ``id`` (``<source>/<style>/<key>``), ``source``, ``style``, ``concept``,
    ``family``, ``category``, ``captions`` (kind -> text) and the source's own ``key``, in a fixed order."""
    out = []
    for item in openclipart.items():
        out.append({"id": f"openclipart/png/{item['id']}", "source": "openclipart", "style": "png", "key": item["id"],
                    "concept": item["name"], "category": item["category"],
                    "captions": {k: openclipart.caption(item, k) for k in CAPTIONS}})
    for name in ("openmoji", "fluentui-emoji"):
        for concept in vector_icons.concepts(name):
            for style in vector_icons.SOURCES[name][1]:
                if style in concept["svg"]:
                    out.append({"id": f"{name}/{style}/{concept['key']}", "source": name, "style": style,
                                "key": concept["key"], "concept": concept["label"].lower(),
                                "category": vector_icons.slug(concept["group"]),
                                "captions": {k: _emoji_caption(concept, k) for k in CAPTIONS}})
    for concept in vector_icons.concepts("game-icons"):
        out.append({"id": f"game-icons/silhouette/{concept['key']}", "source": "game-icons", "style": "silhouette",
                    "key": concept["key"], "concept": concept["label"], "category": "game-icons",
                    "captions": dict.fromkeys(CAPTIONS, concept["label"])})
    for item in tuxpaint.items():
        out.append({"id": f"tuxpaint/stamp/{item['id']}", "source": "tuxpaint", "style": "stamp", "key": item["id"],
                    "concept": item["name"], "category": item["category"], "photo_like": item["photo_like"],
                    "captions": {"label": item["name"], "label_tags": item["sentence"], "long": item["sentence"]}})
    for row in out:
        row["family"] = family(row["concept"])
        row["captions"] = {k: re.sub(r"\s+", " ", v).strip() for k, v in row["captions"].items()}
    return tuple(out)


def load_image(row: dict):
    """The image of one corpus row, RGBA (rendered SVGs from their cache, PNGs from their package)."""
    if row["source"] == "openclipart":
        return openclipart.image(_openclipart_items()[row["key"]])
    if row["source"] == "tuxpaint":
        return tuxpaint.image(_tuxpaint_items()[row["key"]])
    return vector_icons.image(row["source"], row["style"], row["key"])


@lru_cache(maxsize=1)
def _openclipart_items() -> dict:
    return {i["id"]: i for i in openclipart.items()}


@lru_cache(maxsize=1)
def _tuxpaint_items() -> dict:
    return {i["id"]: i for i in tuxpaint.items()}


# --------------------------------------------------------------------------------------------- splits

def make_splits(rows, seed: int = SPLIT_SEED) -> dict:
    """Concept-level (whole families; 70/10/20 % of the concepts) and category-level (whole categories;
    70/10/20 % of the training sources' images) splits, by a seeded shuffle (``openclipart.assign``)."""
    concept_family = {r["concept"]: r["family"] for r in rows}
    by_family = openclipart.assign(Counter(concept_family.values()), seed, SPLIT_FRACTIONS)
    trainable = [r for r in rows if r["source"] in TRAIN_SOURCES]
    by_category = openclipart.assign(Counter(r["category"] for r in trainable), seed, SPLIT_FRACTIONS)
    for category in sorted({r["category"] for r in rows} - set(by_category)):
        by_category[category] = "unseen"  # a category only Tux Paint has is unseen by construction
    concepts = {c: by_family[f] for c, f in sorted(concept_family.items())}
    return {
        "seed": seed, "fractions": SPLIT_FRACTIONS,
        "rule": "concepts: whole families (corpora.medium.family) per split, counted in concepts; categories: "
                "whole categories, counted in the training sources' images; filled unseen, then val, rest train; "
                "Tux Paint is never trained on",
        "counts": {"concepts": Counter(concepts.values()), "categories": Counter(by_category.values()),
                   "images_by_concept_split": Counter(concepts[r["concept"]] for r in trainable),
                   "images_by_category_split": Counter(by_category[r["category"]] for r in trainable)},
        "concepts": concepts, "categories": dict(sorted(by_category.items())),
    }


@lru_cache(maxsize=1)
def load_splits() -> dict:
    if not SPLITS_FILE.is_file():
        raise manifests.DatasetMissingError(f"{SPLITS_FILE} is missing: `python -m corpora.medium --write-splits`")
    expected = manifests.load(NAME)["splits"]["sha256"]
    actual = hashlib.sha256(SPLITS_FILE.read_bytes()).hexdigest()
    if actual != expected:
        raise manifests.DatasetMissingError(f"{SPLITS_FILE} has sha256 {actual[:12]}…, data_manifests/medium.yaml "
                                            f"{expected[:12]}…: regenerate "
                                            "(`python -m corpora.medium --write-splits`)")
    return json.loads(SPLITS_FILE.read_text(encoding="utf-8"))


def split_rows(split: str, level: str = "concepts", sources=TRAIN_SOURCES, styles=None) -> list[dict]:
    """Corpus rows of ``sources`` (and ``styles``) whose concept (``level="concepts"``) or category
    (``"categories"``) is in ``split``; a row of an unknown concept or category is an error, not a gap."""
    if split not in SPLIT_FRACTIONS or level not in ("concepts", "categories"):
        raise ValueError(f"split {split!r} / level {level!r}: choose from {tuple(SPLIT_FRACTIONS)} / concepts, "
                         "categories")
    table, key = load_splits()[level], "concept" if level == "concepts" else "category"
    rows = [r for r in items() if r["source"] in sources and (styles is None or r["style"] in styles)]
    unknown = [r[key] for r in rows if r[key] not in table]
    if unknown:
        raise manifests.DatasetMissingError(f"{len(unknown)} rows (e.g. {unknown[0]!r}) have no split in "
                                            f"{SPLITS_FILE}: the corpus changed; "
                                            "`python -m corpora.medium --write-splits`")
    return [r for r in rows if table[r[key]] == split]


def source_identity(sources) -> dict:
    """What keys cached features of these rows: every manifest's sha256 (the pool's and each source's) and the
    SVG renderer's version."""
    hashes = {name: manifests.manifest_hash(name) for name in (NAME, *sorted(sources))}
    return {"dataset": NAME, "manifest": hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest(),
            "manifests": hashes, "renderer": svg.renderer()}


def _pairs(name: str, rows: list[dict], captions: str, extra: dict, text=None) -> Pairs:
    return Pairs(name=name, ids=tuple(r["id"] for r in rows),
                 captions=tuple(text(r) if text else r["captions"][captions] for r in rows),
                 concepts=tuple(r["concept"] for r in rows), load_image=lambda i, rs=rows: load_image(rs[i]),
                 source={**source_identity({r["source"] for r in rows} or {NAME}), **extra})


def _labelled(name: str, rows: list[dict], templates, extra: dict, classname=None) -> Labelled:
    names = list(dict.fromkeys((classname or (lambda r: r["concept"]))(r) for r in rows))
    index = {n: i for i, n in enumerate(names)}
    return Labelled(name=name, ids=tuple(r["id"] for r in rows),
                    labels=tuple(index[(classname or (lambda r: r["concept"]))(r)] for r in rows),
                    classnames=tuple(names), templates=tuple(templates),
                    load_image=lambda i, rs=rows: load_image(rs[i]),
                    source={**source_identity({r["source"] for r in rows} or {NAME}), **extra},
                    groups=synonyms.groups(names))


def pairs(split: str, level: str = "concepts", captions: str = "label_tags", sources=TRAIN_SOURCES, styles=None,
          limit: int | None = None) -> Pairs:
    """Image-caption pairs of one split of the pooled corpus (training sources by default)."""
    if captions not in CAPTIONS:
        raise ValueError(f"caption kind {captions!r} is not one of {CAPTIONS}")
    rows = split_rows(split, level, sources, styles)[:limit]
    return _pairs(f"medium-{level}-{split}", rows, captions, {"split": split, "level": level,
                  "sources": sorted(sources), "styles": sorted(styles) if styles else "all"})


def labelled(split: str, level: str = "concepts", sources=TRAIN_SOURCES, styles=None, prompts: str = "sentences",
             limit: int | None = None, max_classes: int | None = None) -> Labelled:
    """Zero-shot classification among the concepts of one split (class = concept name); ``max_classes`` keeps the
    first N concepts (in corpus order) with all their images, e.g. a seen-concept ceiling as wide as the unseen test."""
    rows = split_rows(split, level, sources, styles)
    if max_classes is not None:
        kept = set(list(dict.fromkeys(r["concept"] for r in rows))[:max_classes])
        rows = [r for r in rows if r["concept"] in kept]
    rows = rows[:limit]
    name = f"medium-{level}-{split}" + (f"-{max_classes}-classes" if max_classes is not None else "")
    return _labelled(name, rows, NAME_ONLY if prompts == "name" else EMOJI_TEMPLATES,
                     {"split": split, "level": level, "sources": sorted(sources),
                      "styles": sorted(styles) if styles else "all",
                      **({"max_classes": max_classes} if max_classes is not None else {})})


def tuxpaint_pairs(locale: str = "en", subset: str = "all", split: str | None = None) -> Pairs:
    """Tux Paint stamps with their sentence in ``locale`` (stamps without one are left out); ``subset``: all,
    photo, drawing; ``split``: only stamps whose concept is in that concept-level split (None: every stamp)."""
    chosen = {i["id"]: i for i in tuxpaint.items(subset) if locale == "en" or locale in i["locales"]}
    rows = [r for r in items() if r["source"] == "tuxpaint" and r["key"] in chosen]
    if split is not None:
        rows = [r for r in rows if load_splits()["concepts"][r["concept"]] == split]
    return _pairs(f"tuxpaint-{subset}-{locale}", rows, "label_tags",
                  {"split": split or "all", "subset": subset, "locale": locale},
                  text=lambda r: tuxpaint.caption(chosen[r["key"]], locale))


def tuxpaint_labelled(subset: str = "photo", split: str | None = "unseen", prompts: str = "sentences") -> Labelled:
    """Zero-shot classification of Tux Paint stamps (default: the photo-like stamps of unseen concepts)."""
    chosen = {i["id"] for i in tuxpaint.items(subset)}
    rows = [r for r in items() if r["source"] == "tuxpaint" and r["key"] in chosen]
    if split is not None:
        rows = [r for r in rows if load_splits()["concepts"][r["concept"]] == split]
    return _labelled(f"tuxpaint-{subset}-{split or 'all'}", rows, NAME_ONLY if prompts == "name" else PHOTO_TEMPLATES,
                     {"split": split or "all", "subset": subset})


def benchmark(data) -> Benchmark:
    """The ``medium`` config's benchmark (``data.corpus: medium``): training, validation and unseen pairs split by
    concept families over the four training sources; zero-shot on the unseen concepts (the headline set), on Tux
    Paint's photo-like stamps of unseen concepts (drawings to photo-like cut-outs), on a seen-concept ceiling with as
    many classes as the unseen test, then ``data.zero_shot``'s extra sets: Fashion-MNIST, and GCompris' real
    photographs by title (``gcompris``) or by category (``gcompris-categories``)."""
    from corpora import gcompris
    from corpora.datasets import fashion_mnist_labelled

    unseen = labelled("unseen", prompts=data.prompts)
    offered = {"fashion-mnist": lambda: fashion_mnist_labelled(data.zero_shot_per_class, data.prompts),
               "gcompris": lambda: gcompris.labelled("en", prompts=data.prompts),
               "gcompris-categories": lambda: gcompris.categories("en", prompts=data.prompts)}
    unknown = [name for name in data.zero_shot if name not in offered]
    if unknown:
        raise ValueError(f"data.zero_shot: {unknown} cannot be added to the medium corpus (it offers "
                         f"{', '.join(offered)})")
    extra = [offered[name]() for name in data.zero_shot]
    return Benchmark(
        train=pairs("train", captions=data.captions, limit=data.limit),
        val=pairs("val", captions=data.captions),
        retrieval=pairs("unseen", captions=data.captions),
        zero_shot=(unseen, tuxpaint_labelled("photo", "unseen", prompts=data.prompts),
                   labelled("train", prompts=data.prompts, max_classes=len(unseen.classnames)), *extra),
    )


def summary() -> dict:
    rows = items()
    return {"images": len(rows), "concepts": len({r["concept"] for r in rows}),
            "families": len({r["family"] for r in rows}),
            "by_source": Counter(f"{r['source']}/{r['style']}" for r in rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-splits", action="store_true", help=f"write {SPLITS_FILE}")
    parser.add_argument("--build", action="store_true", help="build every index and render every SVG set once")
    args = parser.parse_args()
    if args.build:
        for name, (_, styles) in vector_icons.SOURCES.items():
            for style in styles:
                report = vector_icons.render_report(name, style)
                print(f"{name}/{style}: {len(report['files'])} rendered ({len(report['failed'])} failed), "
                      f"{report['seconds']} s, {report['per_second']}/s")
    print(json.dumps(summary(), indent=1))
    if args.write_splits:
        write_json(SPLITS_FILE, make_splits(items()))
        print(f"wrote {SPLITS_FILE}: sha256 {hashlib.sha256(SPLITS_FILE.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()

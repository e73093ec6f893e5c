"""Tux Paint's stamps (Debian ``tuxpaint-stamps-default``): a photo-like test set, described in ~60 languages.

Why: every other medium source is a drawing; Tux Paint's stamps include a few hundred *photographs* cut
out on a transparent background (animals, food, plants, vehicles), so a head trained on drawings can be
tested on photos of unseen objects. And each stamp's ``<name>.txt`` holds an English sentence ("A red
kangaroo.") followed by translations (``de.utf8=Ein rotes Riesenkänguru.``), human-written, in ~60 locales:
a real multilingual test, captions per locale.

What it holds (2022.06.04-1; 161 MB .deb, mostly sounds): 1,044 images (796 PNG, 248 SVG) under
``/usr/share/tuxpaint/stamps/<category>/...``; 83 stamps have both (the PNG is kept), 11 mirrored PNGs have
no text (dropped). SVGs are rendered once with resvg (``corpora.svg``).

*Photo-like* is measured, not declared: the share of horizontally adjacent opaque pixels whose colours are
(nearly) equal, :func:`flatness`. Vector drawings are flat (most above 0.9), photographs are not; below
:data:`PHOTO_FLATNESS` (0.4) a contact sheet shows photographs with a few painted exceptions. The threshold
and the count are recorded in data_manifests/tuxpaint.yaml. See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import argparse
import hashlib
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from lib.core.atomic import building_dir, write_json
from lib.core.paths import assets_dir
from corpora import manifests, svg
from lib.data.images import open_image
from corpora.openclipart import family_key

NAME = "tuxpaint"
SETUP = "make setup-medium"
PHOTO_FLATNESS = 0.4
LOCALE_COVERAGE = 0.9  # a locale is offered when at least this share of the stamps has a translation
INDEX_VERSION = 1
_ARTICLE = re.compile(r"^(a|an|the|some|a pair of|a piece of|a slice of|a bunch of|a group of)\s+", re.I)


def root() -> Path:
    return manifests.location(NAME)


def parse_text(path: Path) -> tuple[str, dict[str, str]]:
    """The English sentence (first line) and ``{locale: sentence}`` of one stamp's ``.txt``."""
    english, locales = "", {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        match = re.match(r"^([A-Za-z_@]+)\.utf8=(.*)$", line)
        if match:
            if match.group(2).strip():
                locales[match.group(1)] = match.group(2).strip()
        elif line and not english:
            english = line
    return english, locales


def class_name(sentence: str) -> str:
    """"A red kangaroo." -> "red kangaroo"; "Pluto—until recently, ..." -> "pluto"."""
    head = re.split(r"[.,;:!?()\u2014\u2013]| - ", sentence, maxsplit=1)[0]
    return " ".join(_ARTICLE.sub("", head.strip()).split()).lower().strip("'\" ")


def flatness(image) -> float:
    """Share of horizontally adjacent opaque pixel pairs whose RGB differ by at most 2 (1.0: no pairs)."""
    a = np.asarray(image.convert("RGBA")).astype(np.int16)
    opaque = (a[:, 1:, 3] > 250) & (a[:, :-1, 3] > 250)
    if opaque.sum() <= 50:
        return 1.0
    same = np.abs(a[:, 1:, :3] - a[:, :-1, :3]).max(-1) <= 2
    return float(same[opaque].mean())


def tree_digest(folder: Path) -> str:
    """sha256 over ``relative path  sha256`` of every .png, .svg and .txt (the sounds are not read)."""
    from lib.core.checksums import file_sha256

    lines = [f"{p.relative_to(folder)}  {file_sha256(p)}" for p in sorted(folder.rglob("*"))
             if p.suffix in (".png", ".svg", ".txt") and p.is_file()]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _folder() -> Path:
    return assets_dir() / f"{NAME}-{manifests.manifest_hash(NAME)[:12]}-v{INDEX_VERSION}"


def _build_index(target: Path) -> None:
    base = root()
    if not base.is_dir():
        raise manifests.DatasetMissingError(f"{base} is missing: run `{SETUP}` (Debian tuxpaint-stamps-default)")
    digest, expected = tree_digest(base), manifests.load(NAME)["tree_sha256"]
    if digest != expected:
        raise manifests.DatasetMissingError(f"{base}: tree sha256 {digest[:12]}…, manifest {expected[:12]}…: another "
                                            f"version of Debian tuxpaint-stamps-default; reinstall it ({SETUP})")
    stems = sorted({p.with_suffix("") for p in base.rglob("*") if p.suffix in (".png", ".svg")})
    items, dropped = [], {}
    for stem in stems:
        rel = str(stem.relative_to(base))
        text = stem.with_suffix(".txt")
        if not text.is_file():
            dropped.setdefault("no text", []).append(rel)
            continue
        english, locales = parse_text(text)
        name = class_name(english)
        if not name:
            dropped.setdefault("no English sentence", []).append(rel)
            continue
        png = stem.with_suffix(".png")
        kind = "png" if png.is_file() else "svg"
        flat = flatness(open_image(png, mode="RGBA")) if kind == "png" else 1.0
        items.append({"id": rel, "kind": kind, "category": rel.split("/")[0],
                      "subcategory": "/".join(rel.split("/")[1:-1]), "sentence": english, "name": name,
                      "family": family_key(name), "locales": locales, "flatness": round(flat, 4),
                      "photo_like": flat < PHOTO_FLATNESS})
    coverage = Counter(loc for item in items for loc in item["locales"])
    with building_dir(target) as tmp:
        write_json(tmp / "index.json", {"items": items, "dropped": dropped, "photo_flatness": PHOTO_FLATNESS,
                                        "locale_counts": dict(sorted(coverage.items()))})


@lru_cache(maxsize=1)
def load_index() -> dict:
    """The stamps, their text and flatness (built once from the Debian files, checked against the manifest),
    with the SVG stamps rendered into a cached folder (``svg/``)."""
    target = _folder()
    index = manifests.index_once(target, _build_index)
    svg_paths = {i["id"]: root() / f"{i['id']}.svg" for i in index["items"] if i["kind"] == "svg"}
    sources = {rid: (lambda p=p: p) for rid, p in svg_paths.items()}
    index["rendered"] = svg.cached(target.with_name(target.name + "-svg"), sources, fix=f" (or run `{SETUP}`)")
    index["folder"] = str(target)
    missing = [i["id"] for i in index["items"] if i["kind"] == "png" and not (root() / f"{i['id']}.png").is_file()]
    if missing:
        raise manifests.DatasetMissingError(f"{len(missing)} Tux Paint stamps are missing (e.g. {missing[0]}): "
                                            f"reinstall Debian tuxpaint-stamps-default ({SETUP})")
    failed = index["rendered"]["failed"]
    index["items"] = [i for i in index["items"] if i["id"] not in failed]
    return index


def items(subset: str = "all") -> list[dict]:
    """``all`` stamps, the ``photo`` (photo-like) ones, or the ``drawing`` ones."""
    if subset not in ("all", "photo", "drawing"):
        raise ValueError(f"subset {subset!r} is not one of ('all', 'photo', 'drawing')")
    chosen = load_index()["items"]
    return [i for i in chosen if subset == "all" or i["photo_like"] == (subset == "photo")]


def locales(min_coverage: float = LOCALE_COVERAGE) -> tuple[str, ...]:
    """Locales with a translation for at least ``min_coverage`` of the stamps (``en`` first)."""
    index = load_index()
    counts, total = index["locale_counts"], len(index["items"])
    return ("en", *sorted(loc for loc, n in counts.items() if n >= min_coverage * total and loc != "en"))


def image(item: dict):
    if item["kind"] == "png":
        return open_image(root() / f"{item['id']}.png", mode="RGBA",
                          fix=f"reinstall Debian tuxpaint-stamps-default ({SETUP})")
    return svg.open_cached(Path(load_index()["folder"] + "-svg"), item["id"])


def caption(item: dict, locale: str = "en") -> str:
    """The stamp's sentence in ``locale`` (``en``: the English first line); KeyError when it has none."""
    return item["sentence"] if locale == "en" else item["locales"][locale]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    index = load_index()
    every = index["items"]
    print(f"{len(every)} stamps ({sum(i['kind'] == 'svg' for i in every)} rendered from SVG), "
          f"{sum(i['photo_like'] for i in every)} photo-like, {len({i['name'] for i in every})} classes; "
          f"dropped { {k: len(v) for k, v in index['dropped'].items()} }; rendering failed "
          f"{sorted(index['rendered']['failed'])}; locales with >= 90 %: {len(locales())}")


if __name__ == "__main__":
    main()

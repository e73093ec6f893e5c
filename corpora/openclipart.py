"""Openclipart (Debian ``openclipart-png`` + ``openclipart-svg``): public-domain drawings with human titles.

Why: the medium config needs several thousand image-text pairs that install offline and whose text was
written by people for each image. Debian's Openclipart 0.18 has 6,900 unique PNGs (8,121 paths; 1,221
are symlinks to another path) under ``/usr/share/openclipart/png/<category>/<sub>/``, transparent, median
217 px on the longest side, and beside each its SVG, whose metadata carries ``<dc:title>``, keywords
(``<dc:subject><rdf:Bag><rdf:li>``) and, for ~1,100 of the kept ones, a description.

What is dropped, and why (counts: ``python -m corpora.openclipart``, recorded in data_manifests/openclipart.yaml):

* the folders ``computer/ shapes/ special/ buttons/ logos/``: user-interface icons, geometric shapes and
  logos, not concepts a caption names;
* generic titles ("Various Cliparts", "Part of the Flat Icon Collection…");
* titles that are not English (none of their words is a WordNet lemma: "Cavallo", "Orso");
* PNGs that PIL refuses to decode (decompression bombs, over 178,956,970 px; the two 623-megapixel stop
  signs): skipped and listed in the index (``skipped``). PNGs over :data:`MAX_PIXELS` (16 MP) are decoded
  once, shrunk, and cached (``large/``) so that a feature pass never decodes them again.

Titles are cleaned, not trusted: an author template ("Clipart by Nicu Buculei - book_01" sits on a brush,
a crayon and a mug) or a catalogue label ("SVG Road Signs", "AIGA_Symbol_Signs", "Map Symbols") names the
set, not the drawing, so those files are named by their file name instead ("ahead_only" -> "ahead only");
trailing numbers and version tags go ("smiley111" -> "smiley"); " - body part"-style suffixes go.

Classes are the cleaned titles; concept-level splits keep near-duplicate titles in one split as a family
(:func:`family_key`: the head noun, i.e. the last content word, singular: "red apple" and "apple" are one
family), and 20 % of the titles are unseen; category-level splits hold out whole top-level folders. Both
are written as data with their sha256 (``data_manifests/splits/openclipart.json``; ``python -m
corpora.openclipart --write-splits``). See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import xml.etree.ElementTree as ET
from collections import Counter
from functools import lru_cache
from pathlib import Path

from lib.core.atomic import building_dir, write_json
from lib.core.paths import REPO_ROOT, assets_dir
from corpora import manifests, wordnet
from lib.data.images import BadImageError, open_image

NAME = "openclipart"
SETUP = "make setup-medium"
DROPPED_CATEGORIES = ("computer", "shapes", "special", "buttons", "logos")
MAX_PIXELS = 16_000_000  # larger PNGs are decoded once and cached shrunk to LARGE_SIDE
LARGE_SIDE = 1024
SPLITS_FILE = REPO_ROOT / "data_manifests" / "splits" / "openclipart.json"
SPLIT_FRACTIONS = {"train": 0.7, "val": 0.1, "unseen": 0.2}
SPLIT_SEED = 0
INDEX_VERSION = 1  # bump when the cleaning rules change: the cached index is rebuilt
GENERIC_TITLES = ("various cliparts", "part of the flat icon collection")  # prefixes
GENERIC_NAMES = {"untitled", "clipart", "clip art", "image", "drawing", "new document"}
_CATALOGUE = re.compile(r"\b(clip ?arts?|collection|icons?|iconset|symbols?|signs|maps|sibmission|submission|"
                        r"elements|set|advertising)\b", re.I)
_AUTHOR = re.compile(r"^\s*(clip ?art|drawing|image|illustration)s?\s+by\s+.+?\s+[-–:]\s*", re.I)
_TRAILING = re.compile(r"(?:(?<=[a-z])\d+[a-z]?|[\s_.#-]+(?:v?\d+(?:\.\d+)*[a-z]?|bw|md|r|ok))+$", re.I)
_PAREN = re.compile(r"\((?:b ?(?:and|&|/) ?w|bw|black and white|colou?re?d?|outline|simple)\)", re.I)
_TAILS = {"body part", "clothing", "iconset", "historic"}
_STOP = {"a", "an", "the", "of", "and", "with", "in", "on", "for", "to", "at", "by", "or", "from", "s"}
_DESCRIPTORS = {"black", "white", "red", "green", "blue", "yellow", "orange", "pink", "purple", "brown", "grey",
                "gray", "gold", "golden", "silver", "dark", "light", "small", "big", "large", "little", "old", "new",
                "cartoon", "simple", "stylized", "stylised", "outline", "contour", "silhouette", "icon", "clipart",
                "drawing", "illustration", "image", "picture", "symbol", "sign", "bw", "color", "colour", "colored",
                "cute", "happy", "funny", "left", "right", "front", "side", "view", "top", "bottom", "version"}
_NS = {"dc": "http://purl.org/dc/elements/1.1/", "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#"}


def root() -> Path:
    return manifests.location(NAME)


# ----------------------------------------------------------------------------------------- text

@lru_cache(maxsize=1)
def _english() -> frozenset[str]:
    """Every WordNet 3.0 lemma (all parts of speech) and irregular form: the English test of a title."""
    folder, words = wordnet.wordnet_dir(), set()
    for pos in ("noun", "verb", "adj", "adv"):
        with open(folder / f"index.{pos}", encoding="utf-8") as handle:
            words |= {line.split(" ", 1)[0] for line in handle if not line.startswith("  ")}
        with open(folder / f"{pos}.exc", encoding="utf-8") as handle:
            words |= {line.split()[0] for line in handle if line.strip()}
    return frozenset(words)


def singular(word: str) -> str:
    for suffix, repl in (("ies", "y"), ("ves", "f"), ("ses", "s"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"),
                         ("s", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 2 and not word.endswith("ss"):
            candidate = word[: -len(suffix)] + repl
            if candidate in _english():
                return candidate
    return word


def is_english_word(word: str) -> bool:
    word = word.lower().strip("'")
    return word in _english() or singular(word) in _english() or word.rstrip("s") in _english()


def is_english(title: str) -> bool:
    """At least half of the title's words of three or more letters are English (WordNet lemmas)."""
    words = [w for w in re.findall(r"[a-z']+", title.lower()) if len(w) >= 3 and w not in _STOP]
    return bool(words) and sum(is_english_word(w) for w in words) * 2 >= len(words)


def _tidy(text: str) -> str:
    text = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text)  # CamelCase file names
    text = re.sub(r"[_\s]+", " ", text.replace("-", " ")).strip(" .,:;-_'\"").lower()
    previous = None
    while previous != text:
        previous, text = text, _TRAILING.sub("", text).strip(" .,:;-_")
    return re.sub(r"\s+", " ", text)


def name_from_file(png_name: str) -> str:
    stem = Path(png_name).stem
    stem = re.sub(r"^(aiga|contour)_", "", stem, flags=re.I)
    stem = re.sub(r"_\d+(m|cm)_bwh$|_symbol$", "", _tidy(stem).replace(" ", "_")).replace("_", " ")
    return _tidy(re.sub(r"\b(symbol|\d+)\b", " ", stem))


def _squash(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def clean_title(title: str | None, png_name: str, shared_by: int = 1) -> tuple[str | None, str]:
    """``(class name, how)``; the name is None when the image is dropped, ``how`` says why or where the name
    came from (``title``, ``file name``, ``generic title``, ``not English``, ``no name``). ``shared_by``: how many
    files carry this exact title (a catalogue label names a set of files)."""
    raw = " ".join((title or "").split())
    if raw.lower().startswith(GENERIC_TITLES) or raw.lower() in GENERIC_NAMES:
        return None, "generic title"
    text, source, from_file = raw, "title", name_from_file(png_name)
    author = _AUTHOR.match(text)
    if author:  # "Clipart by X - name": a template title unless the name is the file's own
        text = text[author.end():]
        if not (_squash(from_file) and (_squash(from_file) in _squash(text) or _squash(text) in _squash(from_file))):
            text = ""
    pieces = re.split(r"\s+[-–]\s+", text)
    if len(pieces) > 1 and (_CATALOGUE.search(_tidy(pieces[-1])) or _tidy(pieces[-1]) in _TAILS):
        pieces = pieces[:-1]  # "tree - RPG map elements" -> "tree"; "mouth - body part" -> "mouth"
    text = _PAREN.sub(" ", " ".join(pieces))
    if shared_by >= 3 and _CATALOGUE.search(_tidy(text)):
        text = ""
    if not _tidy(text):
        text, source = from_file, "file name"
    text = _tidy(text)
    if not text or not re.search(r"[a-z]{2}", text):
        return None, "no name"
    if not is_english(text):
        return None, "not English"
    return text, source


def family_key(name: str) -> str:
    """The head noun of a class name: its last content word, singular ("red apples" -> "apple")."""
    words = [w for w in re.findall(r"[a-z0-9']+", name.lower()) if w not in _STOP]
    content = [w for w in words if w not in _DESCRIPTORS] or words
    return singular(content[-1]) if content else name


def clean_keywords(keywords, name: str) -> tuple[str, ...]:
    out = []
    for word in keywords:
        word = " ".join((word or "").replace("_", " ").split()).lower()
        if word and word != name and word not in out and word not in ("hash", "mapsym", "map symbol"):
            out.append(word)
    return tuple(out)


def clean_description(text: str | None, name: str) -> str:
    text = re.sub(r"https?://\S+|www\.\S+", "", " ".join((text or "").split())).strip(" .")
    if len(text.split()) < 3 or text.lower() == name or re.search(r"converted from", text, re.I):
        return ""
    return text + "."


# ---------------------------------------------------------------------------------------- index

def svg_metadata(path: Path) -> dict:
    """Title, keywords and description from an SVG's ``<metadata>`` (the first ``cc:Work``)."""
    try:
        for _, element in ET.iterparse(path, events=("end",)):
            if element.tag.endswith("}Work"):
                title, description = element.find("dc:title", _NS), element.find("dc:description", _NS)
                return {"title": title.text if title is not None else None,
                        "description": description.text if description is not None else None,
                        "keywords": [li.text for li in element.findall("dc:subject/rdf:Bag/rdf:li", _NS)]}
            if element.tag.endswith("}metadata"):
                break
    except ET.ParseError:
        pass
    return {"title": None, "description": None, "keywords": []}


def _png_size(path: Path) -> tuple[int, int]:
    with open(path, "rb") as handle:
        head = handle.read(24)
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def tree_digest(folder: Path, suffix: str) -> str:
    """sha256 over the sorted ``relative path  sha256-of-file`` lines of every file (symlinks by target)."""
    from lib.core.checksums import file_sha256

    lines = []
    for path in sorted(folder.rglob(f"*{suffix}")):
        target = path.resolve().relative_to(folder.resolve()) if path.is_symlink() else None
        lines.append(f"{path.relative_to(folder)}  {'-> ' + str(target) if target else file_sha256(path)}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _build_index(target: Path) -> None:
    base, manifest = root(), manifests.load(NAME)
    for sub, key in (("png", "png_tree_sha256"), ("svg", "svg_tree_sha256")):
        if not (base / sub).is_dir():
            raise manifests.DatasetMissingError(f"{base / sub} is missing: run `{SETUP}` (Debian openclipart-{sub})")
        digest = tree_digest(base / sub, f".{sub}")
        if digest != manifest[key]:
            raise manifests.DatasetMissingError(f"{base / sub}: tree sha256 {digest[:12]}…, "
                                                f"manifest {manifest[key][:12]}…: another version of Debian "
                                                f"openclipart-{sub}; reinstall it ({SETUP})")
    pngs = sorted(p for p in (base / "png").rglob("*.png") if not p.is_symlink())
    meta = {p: svg_metadata(base / "svg" / p.relative_to(base / "png").with_suffix(".svg")) for p in pngs}
    shared = Counter(" ".join((m["title"] or "").split()) for m in meta.values())
    aliases: dict[str, list[str]] = {}
    for link in (p for p in (base / "png").rglob("*.png") if p.is_symlink()):
        aliases.setdefault(str(link.resolve().relative_to((base / "png").resolve())), []).append(
            str(link.relative_to(base / "png")))
    items, dropped, skipped = [], {}, []
    with building_dir(target) as tmp:
        for path in pngs:
            rel = str(path.relative_to(base / "png"))
            parts = rel.split("/")
            if parts[0] in DROPPED_CATEGORIES:
                dropped.setdefault(f"folder {parts[0]}/", []).append(rel)
                continue
            m = meta[path]
            name, how = clean_title(m["title"], path.name, shared[" ".join((m["title"] or "").split())])
            if name is None:
                dropped.setdefault(how, []).append(rel)
                continue
            width, height = _png_size(path)
            large = None
            if width * height > MAX_PIXELS:
                try:
                    image = open_image(path, mode="RGBA", max_pixels=MAX_PIXELS)
                except BadImageError as error:
                    skipped.append({"id": rel, "pixels": width * height, "reason": str(error)})
                    continue
                image.thumbnail((LARGE_SIDE, LARGE_SIDE))
                large = f"large/{rel}"
                (tmp / large).parent.mkdir(parents=True, exist_ok=True)
                image.save(tmp / large)
            items.append({"id": rel, "category": parts[0], "subcategory": "/".join(parts[1:-1]), "name": name,
                          "name_from": how, "title": m["title"], "family": family_key(name),
                          "keywords": clean_keywords(m["keywords"], name),
                          "description": clean_description(m["description"], name),
                          "size": [width, height], "large": large, "aliases": sorted(aliases.get(rel, []))})
        write_json(tmp / "index.json", {"items": items, "dropped": {k: sorted(v) for k, v in sorted(dropped.items())},
                                        "skipped": skipped, "unique_pngs": len(pngs),
                                        "symlinks": sum(len(v) for v in aliases.values())})


_checked: set[Path] = set()


@lru_cache(maxsize=1)
def load_index() -> dict:
    """The cleaned index (built once from the Debian files, checked against the manifest's tree sha256);
    on first open in a process, every kept PNG is checked to be present with its recorded size."""
    target = assets_dir() / f"{NAME}-{manifests.manifest_hash(NAME)[:12]}-v{INDEX_VERSION}"
    index = manifests.index_once(target, _build_index)
    index["folder"] = str(target)
    if target not in _checked:
        missing = [i["id"] for i in index["items"] if not (root() / "png" / i["id"]).is_file()
                   or (i["large"] and not (target / i["large"]).is_file())]
        if missing:
            raise manifests.DatasetMissingError(f"{len(missing)} Openclipart files are missing (e.g. {missing[0]}): "
                                                f"reinstall Debian openclipart-png ({SETUP}), or delete {target}")
        _checked.add(target)
    return index


def items() -> list[dict]:
    return load_index()["items"]


def image(item: dict):
    """One drawing, RGBA (the cached shrunk copy for the few PNGs over :data:`MAX_PIXELS`)."""
    path = Path(load_index()["folder"]) / item["large"] if item["large"] else root() / "png" / item["id"]
    return open_image(path, mode="RGBA", max_pixels=MAX_PIXELS,
                      fix=f"reinstall Debian openclipart-png ({SETUP})")


def caption(item: dict, kind: str = "label_tags") -> str:
    """``label``: the cleaned title; ``label_tags``: title and keywords; ``long``: title, keywords, description."""
    name, tags = item["name"], [k for k in item["keywords"] if k != item["name"]]
    if kind == "label":
        return name
    if kind == "label_tags":
        return f"{name}: {', '.join(tags)}" if tags else name
    if kind == "long":
        text = f"{name}. Keywords: {', '.join(tags) or name}."
        return f"{text} {item['description']}" if item["description"] else text
    raise ValueError(f"caption kind {kind!r} is not one of ('label', 'label_tags', 'long')")


# --------------------------------------------------------------------------------------- splits

def assign(sizes: dict[str, int], seed: int, fractions: dict[str, float] = SPLIT_FRACTIONS) -> dict[str, str]:
    """Whole groups (families or categories) to splits by a seeded shuffle: fill unseen, then val, rest train."""
    groups = sorted(sizes)
    random.Random(seed).shuffle(groups)
    total, filled, out = sum(sizes.values()), {name: 0 for name in fractions}, {}
    for group in groups:
        for split in ("unseen", "val", "train"):
            if split == "train" or filled[split] + sizes[group] <= fractions[split] * total:
                out[group], filled[split] = split, filled[split] + sizes[group]
                break
    return out


def make_splits(entries: list[dict], seed: int = SPLIT_SEED) -> dict:
    """Concept-level (classes by family; 20 % of the classes unseen) and category-level (whole folders;
    ~20 % of the images unseen) splits of ``entries`` (index items)."""
    classes = sorted({i["name"] for i in entries})
    family = {i["name"]: i["family"] for i in entries}
    by_family = assign(Counter(family[c] for c in classes), seed)
    by_category = assign(Counter(i["category"] for i in entries), seed)
    concepts = {c: by_family[family[c]] for c in classes}
    return {
        "seed": seed, "fractions": SPLIT_FRACTIONS,
        "rule": "concepts: whole families (corpora.openclipart.family_key) per split, counted in classes; "
                "categories: whole top-level folders, counted in images; filled unseen, then val, rest train",
        "counts": {"concepts": Counter(concepts.values()), "categories": Counter(by_category.values()),
                   "category_images": Counter(by_category[i["category"]] for i in entries)},
        "concepts": concepts, "categories": by_category,
    }


@lru_cache(maxsize=1)
def load_splits() -> dict:
    if not SPLITS_FILE.is_file():
        raise manifests.DatasetMissingError(f"{SPLITS_FILE} is missing: "
                                            "`python -m corpora.openclipart --write-splits`")
    expected = manifests.load(NAME)["splits"]["sha256"]
    actual = hashlib.sha256(SPLITS_FILE.read_bytes()).hexdigest()
    if actual != expected:
        raise manifests.DatasetMissingError(f"{SPLITS_FILE} has sha256 {actual[:12]}…, the manifest {expected[:12]}…")
    return json.loads(SPLITS_FILE.read_text(encoding="utf-8"))


def split_items(split: str, level: str = "concepts") -> list[dict]:
    """Index items whose class (``level="concepts"``) or folder (``"categories"``) is in ``split``."""
    table = load_splits()[level]
    key = "name" if level == "concepts" else "category"
    return [i for i in items() if table[i[key]] == split]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-splits", action="store_true", help=f"write {SPLITS_FILE}")
    args = parser.parse_args()
    index = load_index()
    entries = index["items"]
    print(f"{len(entries)} images, {len({i['name'] for i in entries})} classes, "
          f"{len({i['family'] for i in entries})} families; dropped "
          f"{ {k: len(v) for k, v in index['dropped'].items()} }; skipped {[s['id'] for s in index['skipped']]}")
    if args.write_splits:
        write_json(SPLITS_FILE, make_splits(entries))
        print(f"wrote {SPLITS_FILE}: sha256 {hashlib.sha256(SPLITS_FILE.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()

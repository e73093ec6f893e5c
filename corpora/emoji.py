"""The emoji corpus: real drawings with real (CLDR) text, and concept splits that cannot leak.

Why emoji: the small config needs an image-text corpus that installs offline and still asks the
question the papers ask — does a head trained on *seen* concepts transfer to *unseen* ones? Each
emoji is a concept with two independent drawings (Google Noto, Twitter Twemoji) and human-written
CLDR text: a label ("man rowing boat"), keywords, group and subgroup, in 28 locales.

Why families: "man rowing boat" and "woman rowing boat" are one concept drawn twice. If one were
seen and the other unseen, the unseen score would measure memory, not transfer. Concepts are
therefore grouped into families and whole families go to one split.
See ``notebooks/sharelock.py``, section "The data".

``python -m corpora.emoji --write-splits`` regenerates ``data_manifests/splits/emoji.json``;
``python -m corpora.emoji --re-extract`` unpacks the corpus again from its checksummed tarballs. The
unpacked folder carries ``contents.json`` (every file's size and sha256, written last); it is checked
when the corpus is first opened in a process, so a damaged or partly deleted folder is found at once
and named, with that command.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import Image

from lib.core.atomic import building_dir, write_json
from lib.core.checksums import file_sha256
from lib.core.paths import REPO_ROOT, assets_dir
from corpora import manifests
from lib.data.images import open_image

REEXTRACT = "python -m corpora.emoji --re-extract"

STYLES = ("google", "twitter")
LOCALES = ("en", "de", "fr", "es", "it", "ja", "zh", "ru", "pt", "nl", "pl", "ko")
SPLITS_FILE = REPO_ROOT / "data_manifests" / "splits" / "emoji.json"
SPLIT_FRACTIONS = {"train": 0.7, "val": 0.1, "unseen": 0.2}
SPLIT_SEED = 0
_PEOPLE_WORDS = {
    "man", "woman", "person", "men", "women", "people", "boy", "girl", "adult", "child", "and",
    "older", "old", "baby",
}
_SEQUENCE_PREFIXES = ("family", "kiss", "couple with heart", "keycap", "regional indicator")


@dataclass(frozen=True)
class Concept:
    """One emoji: the unit that a split assigns (never split across train and test)."""

    key: str  # code points without variation selectors, e.g. "1F6A3-200D-2642"
    label: str
    tags: tuple[str, ...]
    group: str
    subgroup: str
    family: str
    images: dict = field(hash=False, compare=False)  # style -> Path
    names: dict = field(hash=False, compare=False, default_factory=dict)  # locale -> label

    def image(self, style: str) -> Image.Image:
        return open_image(self.images[style], mode="RGBA",
                          fix=f"the unpacked emoji corpus is damaged; run `{REEXTRACT}`")


def _strip_fe0f(hexcode: str) -> str:
    return "-".join(part for part in hexcode.upper().split("-") if part != "FE0F")


def family_key(label: str) -> str:
    """Collapse person/gender variants and code-point sequences to one family name.

    "man rowing boat", "woman rowing boat", "person rowing boat" -> "rowing boat";
    "keycap: 7" -> "keycap"; "family: man, woman, boy" -> "family"; "old man" -> "person".
    """
    text = label.lower()
    for prefix in _SEQUENCE_PREFIXES:
        if text.startswith(prefix):
            return prefix
    words = [w for w in re.split(r"[^a-z0-9']+", text) if w and w not in _PEOPLE_WORDS]
    return " ".join(words) or "person"


def _extract(target: Path) -> None:
    """Unpack the images and text the corpus needs from the npm tarballs (checksummed)."""
    with building_dir(target) as tmp:
        data = tarfile.open(manifests.dataset_file("emoji", "emojibase-data-17.0.0.tgz"))
        with data:
            for locale in LOCALES:
                for name in ("data.json", "messages.json"):
                    member = data.extractfile(f"package/{locale}/{name}")
                    (tmp / "text" / locale).mkdir(parents=True, exist_ok=True)
                    (tmp / "text" / locale / name).write_bytes(member.read())
        for style in STYLES:
            tarball = manifests.dataset_file("emoji", f"emoji-datasource-{style}-16.0.0.tgz")
            out = tmp / style
            out.mkdir()
            prefix = f"package/img/{style}/64/"
            with tarfile.open(tarball) as archive:
                for member in archive:
                    if member.name == "package/emoji.json":
                        (tmp / f"emoji-datasource-{style}.json").write_bytes(archive.extractfile(member).read())
                    elif member.name.startswith(prefix) and member.isfile():
                        (out / member.name[len(prefix):]).write_bytes(archive.extractfile(member).read())
        contents = {str(f.relative_to(tmp)): {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
                    for f in sorted(tmp.rglob("*")) if f.is_file()}
        write_json(tmp / "contents.json", contents)  # last: its presence means the folder is complete


def corpus_dir() -> Path:
    """The unpacked corpus (built once, atomically, from the checksummed tarballs), checked against its
    ``contents.json`` (every file present with its recorded size) the first time a process opens it."""
    target = assets_dir() / f"emoji-{manifests.manifest_hash('emoji')[:12]}"
    return manifests.unpacked_once(target, _extract, f"the unpacked emoji corpus is damaged; run `{REEXTRACT}`")


def re_extract() -> Path:
    """Delete the unpacked corpus and unpack it again from the tarballs (checked against their sha256)."""
    target = assets_dir() / f"emoji-{manifests.manifest_hash('emoji')[:12]}"
    if target.exists():
        shutil.rmtree(target)
    manifests.forget(target)
    load_concepts.cache_clear()
    return corpus_dir()


@lru_cache(maxsize=1)
def load_concepts() -> tuple[Concept, ...]:
    """Every base emoji drawn in both styles and labelled by CLDR, in emojibase order."""
    root = corpus_dir()
    drawings = json.loads((root / "emoji-datasource-google.json").read_text(encoding="utf-8"))
    image_names = {
        _strip_fe0f(entry["unified"]): entry["image"]
        for entry in drawings
        if entry.get("has_img_google") and entry.get("has_img_twitter")
    }
    text = json.loads((root / "text" / "en" / "data.json").read_text(encoding="utf-8"))
    messages = json.loads((root / "text" / "en" / "messages.json").read_text(encoding="utf-8"))
    groups = {g["order"]: g["message"] for g in messages["groups"]}
    subgroups = {g["order"]: g["message"] for g in messages["subgroups"]}
    names_by_locale = {}
    for locale in LOCALES:
        entries = json.loads((root / "text" / locale / "data.json").read_text(encoding="utf-8"))
        names_by_locale[locale] = {_strip_fe0f(e["hexcode"]): e["label"] for e in entries}
    concepts = []
    for entry in sorted(text, key=lambda e: e.get("order", 1 << 30)):
        key = _strip_fe0f(entry["hexcode"])
        group = groups.get(entry.get("group"))
        if key not in image_names or group is None or group == "components":
            continue  # no drawing in both styles, or a skin-tone/hair swatch rather than a concept
        image = image_names[key]
        names = {loc: table[key] for loc, table in names_by_locale.items() if key in table}
        concepts.append(
            Concept(
                key=key,
                label=entry["label"],
                tags=tuple(entry.get("tags", ())),
                group=group,
                subgroup=subgroups.get(entry.get("subgroup"), ""),
                family=family_key(entry["label"]),
                images={style: root / style / image for style in STYLES},
                names=names,
            )
        )
    return tuple(concepts)


def caption(concept: Concept, kind: str = "label") -> str:
    """The text paired with a drawing. ``label``: the CLDR name; ``label_tags``: name and keywords;
    ``long``: name, keywords, group and subgroup (FLAME's long multi-facet captions)."""
    if kind == "label":
        return concept.label
    extra = [t for t in concept.tags if t.lower() != concept.label.lower()]
    if kind == "label_tags":
        return f"{concept.label}: {', '.join(extra)}" if extra else concept.label
    if kind == "long":
        keywords = ", ".join(extra) or concept.label
        return f"{concept.label}. Keywords: {keywords}. Group: {concept.group}, {concept.subgroup}."
    raise ValueError(f"caption kind {kind!r} is not one of ('label', 'label_tags', 'long')")


def make_splits(concepts: tuple[Concept, ...], seed: int = SPLIT_SEED) -> dict:
    """Assign whole families to train / val / unseen by a seeded shuffle."""
    families = sorted({c.family for c in concepts})
    random.Random(seed).shuffle(families)
    sizes = Counter(c.family for c in concepts)
    total = len(concepts)
    assignment, filled = {}, {name: 0 for name in SPLIT_FRACTIONS}
    order = ["unseen", "val", "train"]  # fill the small splits first, the rest is train
    for family in families:
        for split in order:
            if split == "train" or filled[split] + sizes[family] <= SPLIT_FRACTIONS[split] * total:
                assignment[family] = split
                filled[split] += sizes[family]
                break
    return {
        "seed": seed,
        "fractions": SPLIT_FRACTIONS,
        "rule": "whole families (corpora.emoji.family_key) per split; filled unseen, then val, rest train",
        "counts": {split: filled[split] for split in SPLIT_FRACTIONS},
        "concepts": {c.key: assignment[c.family] for c in concepts},
    }


@lru_cache(maxsize=1)
def load_splits() -> dict:
    if not SPLITS_FILE.is_file():
        raise manifests.DatasetMissingError(
            f"{SPLITS_FILE} is missing: regenerate it with `python -m corpora.emoji --write-splits`"
        )
    return json.loads(SPLITS_FILE.read_text(encoding="utf-8"))


def split_concepts(split: str) -> list[Concept]:
    """The concepts of one split (``train``, ``val`` or ``unseen``), in corpus order."""
    table = load_splits()["concepts"]
    unknown = [c.key for c in load_concepts() if c.key not in table]
    if unknown:
        raise manifests.DatasetMissingError(
            f"{len(unknown)} concepts (e.g. {unknown[0]}) have no split in {SPLITS_FILE}: the corpus changed; "
            "regenerate with `python -m corpora.emoji --write-splits`"
        )
    if split not in SPLIT_FRACTIONS:
        raise ValueError(f"split {split!r} is not one of {tuple(SPLIT_FRACTIONS)}")
    return [c for c in load_concepts() if table[c.key] == split]


def locale_labels(split: str, locale: str, limit: int | None = None) -> list[str]:
    """The CLDR labels of one split's concepts in ``locale`` (emojibase-data), in the split's concept order;
    the first ``limit`` concepts. A concept without a label in that locale is an error rather than a silent
    gap (every base emoji has one in the 12 locales of :data:`LOCALES`). See notebooks/flame.py, section
    "Multilingual zero-shot"."""
    if locale not in LOCALES:
        raise ValueError(f"locale {locale!r} is not unpacked; the corpus has {LOCALES}")
    concepts = split_concepts(split)[:limit]
    missing = [c.label for c in concepts if locale not in c.names]
    if missing:
        raise ValueError(f"{len(missing)} {split} concepts have no {locale!r} label (e.g. {missing[0]!r})")
    return [c.names[locale] for c in concepts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-splits", action="store_true", help=f"write {SPLITS_FILE}")
    parser.add_argument("--re-extract", action="store_true", help="unpack the corpus again from its tarballs")
    args = parser.parse_args()
    if args.re_extract:
        print(f"unpacked the emoji corpus again into {re_extract()}")
    concepts = load_concepts()
    splits = make_splits(concepts)
    print(f"{len(concepts)} concepts, {len({c.family for c in concepts})} families: {splits['counts']}")
    if args.write_splits:
        write_json(SPLITS_FILE, splits)
        print(f"wrote {SPLITS_FILE}")


if __name__ == "__main__":
    main()

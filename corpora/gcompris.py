"""GCompris's photographs (Debian ``gcompris-qt-data``): real photos, each titled and described, in ~35 languages.

Why: every other medium source is a drawing (Tux Paint's stamps are cut-outs); GCompris's "explore" activities
show full-frame photographs from Wikimedia Commons (farm and wild animals, monuments of the world), each with a
title (the class name: "Giraffe", "Taj Mahal"), one or two sentences about it, and human translations of both in
the ``.qm`` files: a photo test set for zero-shot (:func:`labelled`), retrieval (:func:`pairs`) and both per
locale (:func:`translations`). Its "categorization" activity adds photos of fishes, monuments, renewable
energy and tools labelled only by their category (:func:`categories`): a coarse test with many images per class.

Where the bytes are: packed in Qt resource files (``rcc/<activity>.rcc``, read by ``corpora.rcc``); titles and
descriptions are ``qsTr("...")`` strings in the activities' ``board*.qml`` files, translated in
``translations/gcompris_<locale>.qm`` (read by ``corpora.qm``, context = the QML file's name); each image folder's
README gives copyright, licence and source per file, and a photo without a free licence is dropped.

*Photo* is checked, not assumed: :func:`corpora.tuxpaint.flatness` is recorded for every image. Measured here it
does not separate this package's photos from its drawings at Tux Paint's 0.4: full-frame photos with sky or a
white backdrop reach 0.94, while the package's own SVG drawings of the same farm animals (rendered at 512 px) lie
at 0.885-0.95. So the photos are chosen by provenance (raster files whose README names a photographic source,
checked on a contact sheet) and :data:`PHOTO_FLATNESS` (0.95) is a guard against flat graphics only; both counts
are in data_manifests/gcompris.yaml. See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from lib.core.atomic import building_dir, write_bytes, write_json
from lib.core.paths import assets_dir
from lib.data.images import open_image
from corpora import manifests, qm, rcc
from corpora.datasets import Labelled, Pairs
from corpora.templates import NAME_ONLY, PHOTO_TEMPLATES
from corpora.tuxpaint import flatness

NAME = "gcompris"
SETUP = "apt-get install --no-install-recommends gcompris-qt-data"
INDEX_VERSION = 1
PHOTO_FLATNESS = 0.95  # a guard against flat graphics; see the module's docstring for why not 0.4
LOCALE_COVERAGE = 0.9  # a locale is offered when at least this share of the items has title and description
PREFIX = "gcompris/src/activities/"
# Activities whose items are photographs with a title and a description (board*.qml, "image2" = the photo).
EXPLORE = ("explore_farm_animals", "explore_world_animals", "explore_monuments")
# Categorization folders that are one category each (others: mixed objects; alphabets, numbers: drawings).
CATEGORIES = ("fishes", "monuments", "renewable", "tools")
FREE = ("Public Domain", "CC0-1.0", "CC-BY-2.0", "CC-BY-3.0", "CC-BY-4.0", "CC-BY-SA-2.0", "CC-BY-SA-3.0",
        "CC-BY-SA-4.0", "GPL-2+", "GPL-3+")
# Names misspelt in GCompris 3.1's READMEs (README name -> file name): read as the file they mean.
README_TYPOS = {"germany/audaPalatina.webp": "germany/aulaPalatina.webp", "screDriver.webp": "screwDriver.webp"}
_BLOCK = re.compile(r"\{([^{}]*)\}")
_FIELD = re.compile(r'"(\w+)"\s*:\s*(qsTr\(\s*)?"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t"}


def root() -> Path:
    """The installed package's data folder (``/usr/share/gcompris-qt``; ``GCOMPRIS_DIR`` overrides it)."""
    return manifests.location(NAME)


def used_files(base: Path) -> list[Path]:
    """The installed files the index is built from: the activities' ``.rcc`` and every ``.qm``."""
    wanted = [base / "rcc" / f"{name}.rcc" for name in (*EXPLORE, "categorization")]
    return wanted + sorted((base / "translations").glob("gcompris_*.qm"))


def tree_digest(base: Path) -> str:
    """sha256 over the sorted ``<relative path>  <sha256>`` lines of :func:`used_files`."""
    from lib.core.checksums import file_sha256

    lines = sorted(f"{p.relative_to(base).as_posix()}  {file_sha256(p)}" for p in used_files(base) if p.is_file())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def board_entries(qml: str) -> list[dict]:
    """The ``{...}`` objects of a board file that have a title, as ``{field: (text, translatable)}``."""
    out = []
    for block in _BLOCK.finditer(qml):
        fields = {m.group(1): (_unescape(m.group(3)), bool(m.group(2))) for m in _FIELD.finditer(block.group(1))}
        if "title" in fields:
            out.append(fields)
    return out


def parse_readme(text: str) -> list[dict]:
    """Debian-copyright-like blocks (``Copyright:``, ``License:``, ``Source:``, ``Comment:``, ``Files:`` + one name
    a line), separated by blank lines, as dicts; the file names under ``files``."""
    blocks, current, key = [], {}, None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if current:
                blocks.append(current)
            current, key = {}, None
            continue
        match = re.match(r"^(Copyright|License|Licence|Source|Comment|Files)\s*:\s*(.*)$", line.strip(), re.I)
        if match:
            key = match.group(1).lower().replace("licence", "license")
            current[key] = match.group(2).strip()
        elif key == "files" or key is None:
            current["files_list"] = current.get("files_list", []) + [line.strip()]
            key = "files"
        elif key:
            current[key] = " ".join(filter(None, (current[key], line.strip())))
    for block in blocks:
        names = block.pop("files_list", [])
        if block.get("files"):
            names = [block["files"], *names]
        block["files"] = [README_TYPOS.get(n, n) for n in names if n]
    return blocks


def normalise_licence(text: str) -> str:
    """"CC-BY-SA 4.0" -> "CC-BY-SA-4.0", "Public domain" -> "Public Domain", "GPLv2+" -> "GPL-2+"."""
    squashed = re.sub(r"[\s_]+", "-", text.strip())
    if squashed.lower() in ("public-domain", "publicdomain", "pd"):
        return "Public Domain"
    if squashed.upper() in ("CC0", "CC0-1.0"):
        return "CC0-1.0"
    gpl = re.match(r"^GPL-?v?(\d)(\+|-or-later)?$", squashed, re.I)
    if gpl:
        return f"GPL-{gpl.group(1)}{'+' if gpl.group(2) else ''}"
    match = re.match(r"^cc-(by(?:-sa)?)-?(\d\.\d)$", squashed, re.I)
    return f"CC-{match.group(1).upper()}-{match.group(2)}" if match else text.strip()


def _readme_entry(files: dict[str, bytes], path: str) -> dict | None:
    """The README block naming ``path`` (by its path relative to the README's folder, or its name), nearest first."""
    folder = path.rsplit("/", 1)[0]
    while folder.startswith(PREFIX):
        readme = files.get(f"{folder}/README")
        if readme is not None:
            relative = path[len(folder) + 1:]
            for block in parse_readme(readme.decode("utf-8", errors="replace")):
                if relative in block["files"] or (path.rsplit("/", 1)[1] in block["files"] and "/" not in relative):
                    return block
        folder = folder.rsplit("/", 1)[0]
    return None


def _catalogues(base: Path) -> dict[str, qm.Catalogue]:
    out = {}
    for path in sorted((base / "translations").glob("gcompris_*.qm")):
        locale = path.stem[len("gcompris_"):]
        if locale != "en":  # gcompris_en.qm holds plural forms only: English is the source text
            out[locale] = qm.read_qm(path)
    return out


def _translate(catalogues: dict[str, qm.Catalogue], context: str, **texts: str) -> dict[str, dict[str, str]]:
    """``{locale: {key: translation}}`` for the locales that translate every one of ``texts``."""
    out = {}
    for locale, catalogue in catalogues.items():
        done = {key: catalogue.translate(text, context) for key, text in texts.items()}
        if all(done.values()):
            out[locale] = done
    return out


def _photo(files: dict[str, bytes], path: str, tmp: Path, dropped: dict) -> dict | None:
    """Extract one image into ``tmp/images``; its licence, size and flatness; None (and a reason) if dropped."""
    rel = path[len(PREFIX):]
    if path not in files:
        dropped.setdefault("image missing from its .rcc", []).append(rel)
        return None
    entry = _readme_entry(files, path)
    if entry is None or not entry.get("license"):
        dropped.setdefault("no README entry (licence unknown)", []).append(rel)
        return None
    licence = normalise_licence(entry["license"])
    if licence not in FREE:
        dropped.setdefault(f"licence {licence!r} is not free", []).append(rel)
        return None
    target = tmp / "images" / rel
    write_bytes(target, files[path])
    picture = open_image(target, mode="RGBA")
    flat = flatness(picture)
    if flat >= PHOTO_FLATNESS:
        dropped.setdefault(f"flatness >= {PHOTO_FLATNESS}", []).append(rel)
        target.unlink()
        return None
    source = entry.get("source") or " ".join(re.findall(r"https?://\S+", entry.get("comment", ""))) or None
    return {"image": f"images/{rel}", "sha256": hashlib.sha256(files[path]).hexdigest(), "bytes": len(files[path]),
            "width": picture.width, "height": picture.height, "flatness": round(flat, 4), "licence": licence,
            "copyright": entry.get("copyright", ""), "source": source}


def _build_index(target: Path) -> None:
    base = root()
    if not (base / "rcc").is_dir():
        raise manifests.DatasetMissingError(f"{base}/rcc is missing: run `{SETUP}` (Debian gcompris-qt-data 3.1-2), "
                                            "or set GCOMPRIS_DIR to a copy of /usr/share/gcompris-qt")
    digest, expected = tree_digest(base), manifests.load(NAME)["tree_sha256"]
    if digest != expected:
        raise manifests.DatasetMissingError(f"{base}: tree sha256 {digest[:12]}…, manifest {expected[:12]}…: another "
                                            f"version of Debian gcompris-qt-data; install 3.1-2 ({SETUP})")
    catalogues = _catalogues(base)
    files: dict[str, bytes] = {}
    for name in (*EXPLORE, "categorization"):
        files.update(rcc.read_rcc(base / "rcc" / f"{name}.rcc"))
    items, photos, dropped, titles, seen = [], [], {}, {}, set()
    with building_dir(target) as tmp:
        for activity in EXPLORE:
            boards = sorted((p for p in files if p.startswith(f"{PREFIX}{activity}/resource/board/")),
                            key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)])
            for board_path in boards:
                context = board_path.rsplit("/", 1)[1].removesuffix(".qml")
                for entry in board_entries(files[board_path].decode("utf-8")):
                    title, description = entry["title"][0], entry.get("text", ("", False))[0]
                    image_path = entry.get("image2", ("", False))[0].removeprefix("qrc:/")
                    where = f"{activity}/{context}: {title}"
                    if not image_path or not description:
                        dropped.setdefault("no photo or no description", []).append(where)
                        continue
                    if title in titles:
                        dropped.setdefault("duplicate title (first kept)", []).append(f"{where} (kept {titles[title]})")
                        continue
                    if image_path in seen:
                        dropped.setdefault("duplicate image (first kept)", []).append(where)
                        continue
                    photo = _photo(files, image_path, tmp, dropped)
                    if photo is None:
                        continue
                    seen.add(image_path)
                    item_id = image_path[len(PREFIX):].rsplit(".", 1)[0].replace("/resource/", "/")
                    titles[title] = item_id
                    hint = entry.get("text2", ("", False))[0]
                    items.append({"id": item_id, "activity": activity, "board": context, "title": title,
                                  "description": description, **({"hint": hint} if hint and hint != title else {}),
                                  "translations": _translate(catalogues, context, title=title,
                                                             description=description), **photo})
        for category in CATEGORIES:
            board = f"{PREFIX}categorization/resource/board/category_{category}.qml"
            name = re.search(r'"name"\s*:\s*qsTr\("((?:[^"\\]|\\.)*)"\)', files[board].decode("utf-8"))
            label = _unescape(name.group(1))
            folder = f"{PREFIX}categorization/resource/images/{category}/"
            for path in sorted(p for p in files if p.startswith(folder) and p.endswith(".webp")):
                photo = _photo(files, path, tmp, dropped)
                if photo is not None:
                    photos.append({"id": path[len(PREFIX):].rsplit(".", 1)[0].replace("/resource/", "/"),
                                   "category": category, "label": label,
                                   "translations": {k: v["label"] for k, v in _translate(
                                       catalogues, f"category_{category}", label=label).items()}, **photo})
        by_source = {i["source"]: i["id"] for i in items if i["source"]}
        for photo in photos:  # the same Commons photo in both sets (at another size): marked, kept in both
            if photo["source"] in by_source:
                photo["same_source_as"] = by_source[photo["source"]]
        coverage = Counter(loc for item in items for loc in item["translations"])
        write_json(tmp / "index.json", {
            "items": items, "category_photos": photos, "dropped": dropped, "photo_flatness": PHOTO_FLATNESS,
            "below_tuxpaint_flatness": sum(i["flatness"] < 0.4 for i in items + photos),
            "locales": sorted(catalogues), "locale_counts": dict(sorted(coverage.items())), "tree_sha256": digest})


def _folder() -> Path:
    return assets_dir() / f"{NAME}-{manifests.manifest_hash(NAME)[:12]}-v{INDEX_VERSION}"


@lru_cache(maxsize=1)
def load_index() -> dict:
    """The titled photos and the category photos, their text, licence and flatness (built once from the installed
    package, checked against the manifest), with the images extracted beside the index."""
    target = _folder()
    index = manifests.index_once(target, _build_index)
    index["folder"] = str(target)
    missing = [i["image"] for i in index["items"] + index["category_photos"] if not (target / i["image"]).is_file()]
    if missing:
        raise manifests.DatasetMissingError(f"{len(missing)} extracted GCompris images are missing (e.g. "
                                            f"{missing[0]}) from {target}: delete that folder and rebuild "
                                            "(python -m corpora.gcompris --build)")
    return index


def items(activities=EXPLORE) -> list[dict]:
    """The titled photos of ``activities`` (default: every explore activity), in a fixed order."""
    unknown = set(activities) - set(EXPLORE)
    if unknown:
        raise ValueError(f"activities {sorted(unknown)} are not among {EXPLORE}")
    return [i for i in load_index()["items"] if i["activity"] in activities]


def locales(min_coverage: float = LOCALE_COVERAGE) -> tuple[str, ...]:
    """Locales whose ``.qm`` translates title and description of at least ``min_coverage`` of the items (``en``
    first)."""
    index = load_index()
    counts, total = index["locale_counts"], len(index["items"])
    return ("en", *sorted(loc for loc, n in counts.items() if n >= min_coverage * total))


def translations(locale: str) -> dict[str, dict[str, str]]:
    """``{item id: {"title": ..., "description": ...}}`` in ``locale`` (``en``: the source text), for the items that
    locale translates."""
    if locale == "en":
        return {i["id"]: {"title": i["title"], "description": i["description"]} for i in load_index()["items"]}
    if locale not in load_index()["locales"]:
        raise ValueError(f"locale {locale!r}: GCompris 3.1 has {('en', *load_index()['locales'])}")
    return {i["id"]: i["translations"][locale] for i in load_index()["items"] if locale in i["translations"]}


def image(item: dict):
    """The photo of an item (or of a category photo), RGB."""
    return open_image(Path(load_index()["folder"]) / item["image"], mode="RGB",
                      fix="delete the GCompris index folder and rebuild it (python -m corpora.gcompris --build)")


def _source(**extra) -> dict:
    return {"dataset": NAME, "manifest": manifests.manifest_hash(NAME), **extra}


def _text(item: dict, key: str, locale: str) -> str | None:
    if locale == "en":
        return item[key]
    return item["translations"].get(locale, {}).get(key)


def labelled(locale: str = "en", activities=EXPLORE, prompts: str = "sentences") -> Labelled:
    """Zero-shot classification of the titled photos: one class per item, named by its title in ``locale`` (items
    that locale does not translate are left out), one image each."""
    rows = [i for i in items(activities) if _text(i, "title", locale)]
    return Labelled(name=f"gcompris-{locale}", ids=tuple(i["id"] for i in rows), labels=tuple(range(len(rows))),
                    classnames=tuple(_text(i, "title", locale) for i in rows),
                    templates=tuple(NAME_ONLY if prompts == "name" else PHOTO_TEMPLATES),
                    load_image=lambda k, rs=rows: image(rs[k]),
                    source=_source(locale=locale, activities=sorted(activities), kind="titles"))


def pairs(locale: str = "en", activities=EXPLORE) -> Pairs:
    """Retrieval: each titled photo with its description in ``locale`` (items without one are left out); the
    concept of a row is its English title."""
    rows = [i for i in items(activities) if _text(i, "description", locale)]
    return Pairs(name=f"gcompris-descriptions-{locale}", ids=tuple(i["id"] for i in rows),
                 captions=tuple(_text(i, "description", locale) for i in rows),
                 concepts=tuple(i["title"].lower() for i in rows), load_image=lambda k, rs=rows: image(rs[k]),
                 source=_source(locale=locale, activities=sorted(activities), kind="descriptions"))


def categories(locale: str = "en", prompts: str = "sentences") -> Labelled:
    """Zero-shot among the categorization activity's categories (Fishes, Monuments, Renewable, Tools; names in
    ``locale``), several photos per class."""
    rows = [p for p in load_index()["category_photos"] if locale == "en" or locale in p["translations"]]
    names = list(dict.fromkeys(p["label"] if locale == "en" else p["translations"][locale] for p in rows))
    index = {c: n for n, c in enumerate(dict.fromkeys(p["category"] for p in rows))}
    return Labelled(name=f"gcompris-categories-{locale}", ids=tuple(p["id"] for p in rows),
                    labels=tuple(index[p["category"]] for p in rows), classnames=tuple(names),
                    templates=tuple(NAME_ONLY if prompts == "name" else PHOTO_TEMPLATES),
                    load_image=lambda k, rs=rows: image(rs[k]), source=_source(locale=locale, kind="categories"))


def summary() -> dict:
    index = load_index()
    every = index["items"] + index["category_photos"]
    return {"items": len(index["items"]), "by_activity": Counter(i["activity"] for i in index["items"]),
            "category_photos": Counter(p["category"] for p in index["category_photos"]),
            "photos_kept": len(every), "dropped": {k: len(v) for k, v in index["dropped"].items()},
            "below_tuxpaint_flatness": index["below_tuxpaint_flatness"], "photo_flatness": index["photo_flatness"],
            "licences": Counter(i["licence"] for i in every), "locales": len(index["locales"]),
            "locales_90": len(locales()) - 1,
            "coverage": {k: round(v / len(index["items"]), 3) for k, v in index["locale_counts"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="build the index (extract the photos) if needed")
    parser.add_argument("--digest", action="store_true", help="print the tree sha256 of the installed files")
    args = parser.parse_args()
    if args.digest:
        print(tree_digest(root()))
        return
    print(json.dumps(summary(), indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

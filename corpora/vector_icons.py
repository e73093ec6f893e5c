"""Three vector icon sets from npm: OpenMoji, Fluent UI emoji and game-icons, rendered once with resvg.

Why: they widen the medium corpus with human-named concepts drawn in styles the small config's emoji
do not have: OpenMoji's outlined flat drawings (colour and black line art; 2,465 concepts, 542 of them
not Unicode emoji: "goldfish", "poppy", flags of regions), Microsoft's Fluent emoji in three styles (3D-like
"modern", "flat", "high-contrast") and 4,134 game-icons silhouettes named by hand ("3d-glasses",
"thrown-spear"). Each package is fetched with ``npm pack`` (never by URL), checked against the sha256 in its
manifest (data_manifests/openmoji.yaml, data_manifests/fluentui-emoji.yaml, data_manifests/game-icons.yaml),
unpacked once into a folder with ``contents.json`` (checked when first opened, as ``corpora.emoji`` does),
and its SVGs rendered once into a cached folder of PNGs (``corpora.svg``).

Text: OpenMoji carries CLDR annotations and tags (plus its own ``openmoji_tags``); Fluent files carry only
a name ("1st-place-medal"), joined to the CLDR label, tags and group of the emoji corpus
(``corpora.emoji.load_concepts``) by slug; names that do not join (e.g. "man-deaf", "pinata") are dropped
and counted. game-icons names are their only text. Skin-tone variants are left out everywhere (the base
emoji only, as in the emoji corpus). See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import json
import re
import tarfile
from functools import lru_cache
from pathlib import Path

from lib.core.atomic import building_dir, write_json
from lib.core.checksums import file_sha256
from lib.core.paths import assets_dir
from corpora import emoji, manifests, svg

SETUP = "make setup-medium"
SOURCES = {
    "openmoji": ("openmoji-17.0.0.tgz", ("color", "black")),
    "fluentui-emoji": ("fluentui-emoji-1.3.0.tgz", ("modern", "flat", "high-contrast")),
    "game-icons": ("iconify-json-game-icons-1.2.4.tgz", ("silhouette",)),
}
_TONES = ("-default", "-medium-light", "-medium-dark", "-light", "-medium", "-dark")


def slug(text: str) -> str:
    """"A button (blood type)" -> "a-button-blood-type"; "one o’clock" -> "one-oclock" (Fluent's file names)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower().replace("'", "").replace("\u2019", "")).strip("-")


def _unpacked(name: str) -> Path:
    return assets_dir() / f"{name}-{manifests.manifest_hash(name)[:12]}"


def _extract(name: str, target: Path) -> None:
    tarball, _ = SOURCES[name]
    wanted = {
        "openmoji": lambda m: (m == "package/data/openmoji.json"
                               or re.match(r"package/(color|black)/svg/[^/]+\.svg$", m)),
        "fluentui-emoji": lambda m: re.match(r"package/icons/(modern|flat|high-contrast)/[^/]+\.svg$", m),
        "game-icons": lambda m: m in ("package/icons.json", "package/info.json"),
    }[name]
    with building_dir(target) as tmp:
        with tarfile.open(manifests.dataset_file(name, tarball)) as archive:
            for member in archive:
                if member.isfile() and wanted(member.name):
                    out = tmp / member.name.removeprefix("package/")
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(archive.extractfile(member).read())
        contents = {str(f.relative_to(tmp)): {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
                    for f in sorted(tmp.rglob("*")) if f.is_file()}
        write_json(tmp / "contents.json", contents)  # last: its presence means the folder is complete


def unpacked(name: str) -> Path:
    """The unpacked package (built once from its checksummed tarball), checked against ``contents.json``."""
    target = _unpacked(name)
    return manifests.unpacked_once(target, lambda folder: _extract(name, folder),
                                   f"delete {target} and it is unpacked again from its checksummed tarball (or run "
                                   f"`{SETUP}`)")


def _openmoji() -> list[dict]:
    root = unpacked("openmoji")
    out = []
    for entry in json.loads((root / "data" / "openmoji.json").read_text(encoding="utf-8")):
        if entry.get("skintone") or entry["group"] == "component":
            continue
        tags = [t.strip() for t in f"{entry.get('tags', '')},{entry.get('openmoji_tags', '')}".split(",") if t.strip()]
        label = entry["annotation"]
        out.append({"key": entry["hexcode"], "label": label, "tags": list(dict.fromkeys(t for t in tags if t != label)),
                    "group": entry["group"], "subgroup": entry.get("subgroups", ""),
                    "unicode": not entry["group"].startswith("extras-openmoji"),
                    "svg": {style: f"{style}/svg/{entry['hexcode']}.svg" for style in ("color", "black")}})
    return out


def _fluentui() -> tuple[list[dict], list[str]]:
    root = unpacked("fluentui-emoji")
    concepts = {slug(c.label): c for c in emoji.load_concepts()}
    bases: dict[str, dict] = {}
    for path in sorted((root / "icons" / "modern").glob("*.svg")):
        stem = path.stem
        tone = next((t for t in _TONES if stem.endswith(t)), None)
        if tone and tone != "-default":
            continue
        base = stem[: -len(tone)] if tone else stem
        bases[base] = {style: f"icons/{style}/{stem}.svg" for style in SOURCES["fluentui-emoji"][1]}
    out, unjoined = [], []
    for base, files in sorted(bases.items()):
        concept = concepts.get(base)
        if concept is None:
            unjoined.append(base)
            continue
        out.append({"key": concept.key, "label": concept.label, "tags": [t for t in concept.tags if t != concept.label],
                    "group": concept.group, "subgroup": concept.subgroup, "unicode": True,
                    "svg": {s: f for s, f in files.items() if (root / f).is_file()}})
    return out, unjoined


def _game_icons() -> list[dict]:
    root = unpacked("game-icons")
    data = json.loads((root / "icons.json").read_text(encoding="utf-8"))
    return [{"key": name, "label": name.replace("-", " "), "tags": [], "group": "game-icons", "subgroup": "",
             "unicode": False, "svg": {"silhouette": name}} for name in sorted(data["icons"])]


def _game_icon_svg(name: str, size: int = 512) -> str:
    icons = _game_icon_table()
    width, height = icons.get("width", size), icons.get("height", size)
    body = icons["icons"][name]["body"].replace("currentColor", "#000")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{body}</svg>')


@lru_cache(maxsize=1)
def _game_icon_table() -> dict:
    return json.loads((unpacked("game-icons") / "icons.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def concepts(name: str) -> tuple[dict, ...]:
    """The concepts of one set (OpenMoji, Fluent joined to CLDR, game-icons), each with its SVG per style."""
    if name == "openmoji":
        return tuple(_openmoji())
    if name == "fluentui-emoji":
        return tuple(_fluentui()[0])
    if name == "game-icons":
        return tuple(_game_icons())
    raise ValueError(f"unknown icon set {name!r}; choose one of {tuple(SOURCES)}")


def unjoined_fluent_names() -> list[str]:
    """Fluent emoji names that match no CLDR label of the emoji corpus (dropped)."""
    return _fluentui()[1]


def rendered(name: str, style: str) -> Path:
    """The folder of PNGs of one set in one style, rendered once (``<key>.png``)."""
    if style not in SOURCES[name][1]:
        raise ValueError(f"{name} has the styles {SOURCES[name][1]}, not {style!r}")
    root = unpacked(name)
    if name == "game-icons":
        sources = {c["key"]: (lambda k=c["key"]: _game_icon_svg(k)) for c in concepts(name)}
    else:
        sources = {c["key"]: (lambda p=root / c["svg"][style]: p) for c in concepts(name) if style in c["svg"]}
    target = root.with_name(f"{root.name}-{style}-png")
    svg.cached(target, sources, fix=f" (or run `{SETUP}`)")
    return target


def render_report(name: str, style: str) -> dict:
    """The raster cache's record: renderer, size, files, failures, seconds, renders per second."""
    return json.loads((rendered(name, style) / "contents.json").read_text(encoding="utf-8"))


def image(name: str, style: str, key: str):
    return svg.open_cached(rendered(name, style), key)

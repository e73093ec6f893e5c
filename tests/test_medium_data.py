"""The medium corpus (corpora.openclipart, tuxpaint, vector_icons, svg, medium): splits, captions, caches.

CI does not install the medium data (Debian openclipart and Tux Paint packages, three npm tarballs); every
test that needs them skips with the command that installs them. With them installed (``make
setup-medium``): the splits are seeded data equal to a fresh regeneration and disjoint by family or
category; captions are non-empty and cleaned; the decompression-bomb PNGs are skipped and listed; SVGs are
read from their rendered cache, never rendered again.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from corpora import manifests

SETUP = "make setup-medium"


def _need_medium() -> None:
    missing = [p for p in ("/usr/share/openclipart/png", "/usr/share/openclipart/svg", "/usr/share/tuxpaint/stamps")
               if not Path(p).is_dir()]
    for name in ("openmoji", "fluentui-emoji", "game-icons"):
        for entry in manifests.load(name)["files"]:
            if not (manifests.location(name) / entry["file"]).is_file():
                missing.append(entry["file"])
    try:
        import resvg_py  # noqa: F401
    except ImportError:
        missing.append("resvg-py")
    if missing:
        pytest.skip(f"medium data not installed ({', '.join(missing[:3])} ...): run `{SETUP}`")


def _roundtrip(obj) -> dict:
    return json.loads(json.dumps(obj, sort_keys=True))


# ------------------------------------------------------------------------- cleaning rules (no data needed)

@pytest.mark.parametrize("title, file, shared, expected", [
    ("Clipart by Nicu Buculei - smiley111", "smiley109.png", 32, "smiley"),
    ("Clipart by Nicu Buculei - book_01", "crayon.png", 17, "crayon"),  # an author template: the file names it
    ("Clipart by Wilfried Huss - United Nations", "unitednations.png", 1, "united nations"),
    ("SVG Road Signs", "ahead_only.png", 52, "ahead only"),
    ("AIGA_Symbol_Signs", "aiga_baggage_check_in1.png", 122, "baggage check in"),
    ("tree - RPG map elements", "tree_-_rpg_map_elements_01.png", 15, "tree"),
    ("Apple (B and W)", "apple_bw.png", 1, "apple"),
    ("mailbox 2", "mailbox2.png", 1, "mailbox"),
    ("Magnifying Glass", "magnifying_glass_01.png", 1, "magnifying glass"),
    ("Various Cliparts", "mucca.png", 115, None),
    ("Cavallo", "cavallo_architetto_franc_01.png", 7, None),
])
def test_openclipart_titles_are_cleaned(title, file, shared, expected):
    if not Path("/usr/share/wordnet/data.noun").is_file():
        pytest.skip("WordNet (Debian wordnet-base) is not installed: run `make setup`")
    from corpora.openclipart import clean_title

    assert clean_title(title, file, shared)[0] == expected


def test_family_key_is_the_head_noun():
    if not Path("/usr/share/wordnet/data.noun").is_file():
        pytest.skip("WordNet (Debian wordnet-base) is not installed: run `make setup`")
    from corpora.medium import family
    from corpora.openclipart import family_key

    assert family_key("red apples") == family_key("apple") == "apple"
    assert family("woman cook") == family("man cook") == "cook"


# ---------------------------------------------------------------------------------------- Openclipart

@pytest.fixture(scope="module")
def clipart():
    _need_medium()
    from corpora import openclipart

    return openclipart


def test_openclipart_splits_are_seeded_data_equal_to_a_regeneration(clipart):
    stored = clipart.load_splits()  # checks the file's sha256 against data_manifests/openclipart.yaml
    assert stored == _roundtrip(clipart.make_splits(clipart.items()))
    assert stored["seed"] == clipart.SPLIT_SEED
    assert _roundtrip(clipart.make_splits(clipart.items(), seed=1))["concepts"] != stored["concepts"]


def test_openclipart_splits_are_disjoint_by_family_and_category(clipart):
    splits, entries = clipart.load_splits(), clipart.items()
    family_splits: dict[str, set] = {}
    for item in entries:
        family_splits.setdefault(item["family"], set()).add(splits["concepts"][item["name"]])
    assert all(len(s) == 1 for s in family_splits.values())
    unseen = sum(v == "unseen" for v in splits["concepts"].values()) / len(splits["concepts"])
    assert 0.17 <= unseen <= 0.21
    by_split = {s: {i["category"] for i in clipart.split_items(s, "categories")} for s in ("train", "val", "unseen")}
    assert not (by_split["train"] & by_split["unseen"]) and not (by_split["train"] & by_split["val"])
    assert not set(clipart.DROPPED_CATEGORIES) & {i["category"] for i in entries}


def test_openclipart_captions_are_non_empty_and_clean(clipart):
    for item in clipart.items():
        for kind in ("label", "label_tags", "long"):
            assert clipart.caption(item, kind).strip(), item["id"]
        name = item["name"]
        assert not re.search(r"clip ?art by|various cliparts|\d$|_", name), (item["id"], name)
        assert name == name.strip() and name.lower() == name
    assert len(clipart.items()) > 2500 and len({i["name"] for i in clipart.items()}) > 1500


def test_openclipart_decompression_bomb_is_skipped_and_listed(clipart):
    from lib.data.images import BadImageError, open_image

    index = clipart.load_index()
    skipped = {s["id"] for s in index["skipped"]}
    bomb = "transportation/roadsigns/stop_sign_right_font_mig_.png"
    assert bomb in skipped and bomb not in {i["id"] for i in index["items"]}
    assert skipped == {s["file"] for s in manifests.load("openclipart")["skipped"]}
    with pytest.raises(BadImageError, match="too large"):
        open_image(clipart.root() / "png" / bomb)
    large = [i for i in index["items"] if i["large"]]
    assert large and max(clipart.image(large[0]).size) <= clipart.LARGE_SIDE


# ------------------------------------------------------------------------------ SVG renderings, Tux Paint

def test_rendered_svgs_are_cached_and_never_rendered_again(monkeypatch):
    _need_medium()
    from corpora import svg, tuxpaint, vector_icons

    for name, (_, styles) in vector_icons.SOURCES.items():
        for style in styles:
            report = vector_icons.render_report(name, style)
            assert report["renderer"] == "resvg-py" and not report["failed"], (name, style)
            wanted = [c for c in vector_icons.concepts(name) if style in c["svg"]]
            assert len(report["files"]) == len(wanted) > 1000, (name, style)

    def refuse(*args, **kwargs):
        raise AssertionError("an SVG was rendered again instead of read from its cache")

    monkeypatch.setattr(svg, "rasterise", refuse)
    concept = vector_icons.concepts("fluentui-emoji")[0]
    assert vector_icons.image("fluentui-emoji", "modern", concept["key"]).size[0] == svg.RASTER_SIZE
    stamp = next(i for i in tuxpaint.items() if i["kind"] == "svg")
    assert max(tuxpaint.image(stamp).size) == svg.RASTER_SIZE


def test_tuxpaint_is_photo_like_and_multilingual():
    _need_medium()
    from corpora import tuxpaint

    photos = tuxpaint.items("photo")
    assert 250 <= len(photos) <= 450 and all(i["kind"] == "png" and i["flatness"] < tuxpaint.PHOTO_FLATNESS
                                             for i in photos)
    locales = tuxpaint.locales()
    assert len(locales) >= 50 and {"de", "fr", "es", "ja"} <= set(locales)
    for item in tuxpaint.items()[:50]:
        assert item["name"] and tuxpaint.caption(item).strip() and not item["name"].endswith(".")


# -------------------------------------------------------------------------------------- the pooled corpus

@pytest.fixture(scope="module")
def medium():
    _need_medium()
    from corpora import medium

    return medium


def test_medium_splits_are_seeded_data_equal_to_a_regeneration(medium):
    stored = medium.load_splits()
    assert stored == _roundtrip(medium.make_splits(medium.items()))
    expected = manifests.load("medium")["splits"]["sha256"]
    assert hashlib.sha256(medium.SPLITS_FILE.read_bytes()).hexdigest() == expected


def test_medium_splits_are_disjoint_by_family_and_category(medium):
    splits = medium.load_splits()
    family_splits: dict[str, set] = {}
    for row in medium.items():
        family_splits.setdefault(row["family"], set()).add(splits["concepts"][row["concept"]])
    assert all(len(s) == 1 for s in family_splits.values())
    train = medium.pairs("train")
    unseen = medium.pairs("unseen")
    assert not set(train.concepts) & set(unseen.concepts)
    assert not {medium.family(c) for c in train.concepts} & {medium.family(c) for c in unseen.concepts}
    assert not any(i.startswith("tuxpaint/") for i in train.ids)  # Tux Paint is a test set only
    cats = {s: {r["category"] for r in medium.split_rows(s, "categories")} for s in ("train", "unseen")}
    assert not cats["train"] & cats["unseen"]


def test_medium_corpus_shapes_and_stable_sources(medium):
    summary = medium.summary()
    assert 15_000 <= summary["images"] <= 22_000
    pairs = medium.pairs("val", captions="long")
    assert len(pairs) == len(pairs.captions) == len(pairs.concepts) and all(c.strip() for c in pairs.captions)
    assert pairs.source == medium.pairs("val", captions="long").source  # stable: features cache correctly
    assert pairs.source != medium.pairs("unseen").source
    image = pairs.load_image(0)
    assert image.mode == "RGBA" and min(image.size) > 0
    zero_shot = medium.labelled("unseen", styles=("color",))
    assert (len(set(zero_shot.classnames)) == len(zero_shot.classnames)
            and max(zero_shot.labels) < len(zero_shot.classnames))
    german = medium.tuxpaint_pairs("de", subset="photo", split=None)
    assert len(german) > 200 and german.source["locale"] == "de" and all(german.captions)
    photos = medium.tuxpaint_labelled("photo", "unseen")
    assert len(photos) > 20 and all(medium.load_splits()["concepts"][c] == "unseen" for c in photos.classnames)


def test_sharelock_medium_config_builds_a_disjoint_benchmark_and_one_plan(medium):
    """`-p config medium` of the ShareLock chapter: the validated config, the benchmark corpora.benchmarks builds
    for `corpus: medium`, and one feature plan without name clashes (nothing is computed here)."""
    from chapters import sharelock

    cfg = sharelock.load_config("medium")
    assert cfg.data.corpus == "medium" and len(cfg.text) == 6
    assert {t.pooling for t in cfg.text} == {"last_token", "mean"}  # decoders and encoders on one ladder
    bench = sharelock.benchmark(cfg)
    unseen, photos, seen = bench.zero_shot[:3]
    assert unseen.name == "medium-concepts-unseen" and len(unseen.classnames) > 1000  # a many-class headline test
    assert not set(bench.train.concepts) & set(unseen.classnames)
    assert (not set(bench.val.concepts) & set(unseen.classnames)
            and not set(bench.train.concepts) & set(bench.val.concepts))
    assert photos.name == "tuxpaint-photo-unseen" and photos.classnames  # stamps of unseen concepts only
    assert all(medium.load_splits()["concepts"][c] == "unseen" for c in photos.classnames)
    assert len(seen.classnames) == len(unseen.classnames) and set(seen.classnames) <= set(bench.train.concepts)
    assert bench.retrieval.ids == unseen.ids  # retrieval among the very images of the headline test
    names = [request.name for request in sharelock.feature_plan(cfg, bench)]
    assert len(names) == len(set(names)) and any("qwen2.5-coder-0.5b" in n for n in names)


def test_the_unseen_concepts_carry_synonym_groups_that_merge_only_true_synonyms():
    """The medium test sets merge names of one concept ("ant", "ants"): few, and never across word order."""
    _need_medium()
    from corpora import medium, synonyms

    unseen = medium.labelled("unseen")
    assert unseen.groups is not None and len(unseen.groups) == len(unseen.classnames)
    merged = synonyms.merged_pairs(unseen.classnames, unseen.groups)
    assert ("ant", "ants") in merged
    assert all(len(group) >= 2 for group in merged)
    assert 0 < synonyms.summary(unseen.classnames, unseen.groups)["share_merged"] < 0.05
    index = {name: i for i, name in enumerate(unseen.classnames)}
    if {"right arrow curving left", "left arrow curving right"} <= set(index):
        assert unseen.groups[index["right arrow curving left"]] != unseen.groups[index["left arrow curving right"]]


def test_the_medium_benchmark_adds_gcompris_photos_and_refuses_an_unknown_set():
    _need_medium()
    pytest.importorskip("corpora.gcompris")
    from pathlib import Path

    from corpora import medium
    from corpora.datasets import DataConfig

    if not Path("/usr/share/gcompris-qt/rcc").is_dir():
        pytest.skip("gcompris-qt-data is not installed: run `make setup-medium`")
    bench = medium.benchmark(DataConfig(corpus="medium", captions="label", prompts="name",
                                        zero_shot=("gcompris", "gcompris-categories")))
    photos, categories = bench.zero_shot[-2:]
    assert photos.name == "gcompris-en" and len(photos.classnames) == len(photos) == 73
    assert categories.name == "gcompris-categories-en" and len(categories.classnames) == 4
    with pytest.raises(ValueError, match="cannot be added to the medium corpus"):
        medium.benchmark(DataConfig(corpus="medium", zero_shot=("imagenet-1k",)))

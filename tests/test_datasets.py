"""Tests of corpora.datasets: the small config's emoji/Fashion-MNIST sets and the full config's
local-folder path (``<split>.jsonl`` pairs, one folder per class), exercised on temp folders."""
from __future__ import annotations

import json
import os
from pathlib import Path
import shutil
from collections import Counter

import pytest
from PIL import Image

from corpora import datasets, emoji, manifests
from corpora.datasets import BadImageError, folder_labelled, jsonl_pairs, open_image
from corpora.manifests import DatasetMissingError

OBTAIN = "Download toy.zip from https://example.org/toy and unzip it."


# ---------------------------------------------------------------- the small config (emoji, Fashion-MNIST)

@pytest.mark.parametrize("split", ["val", "unseen"])
def test_no_held_out_concept_or_family_is_among_training_pairs(split, emoji_concepts):
    train = datasets.emoji_pairs("train", "google", "label_tags")
    held = datasets.emoji_pairs(split, "google", "label_tags")
    assert len(train) and len(held)
    assert not set(train.concepts) & set(held.concepts)
    family = {c.key: c.family for c in emoji_concepts}
    assert not {family[k] for k in train.concepts} & {family[k] for k in held.concepts}
    assert not {c.lower() for c in train.captions} & {c.lower() for c in held.captions}


def test_emoji_pairs_rows_agree(emoji_concepts):
    pairs = datasets.emoji_pairs("unseen", "twitter", "long", limit=4)
    concepts = emoji.split_concepts("unseen")[:4]
    assert len(pairs) == 4
    assert pairs.ids == tuple(f"{c.key}/twitter" for c in concepts)
    assert pairs.concepts == tuple(c.key for c in concepts)
    assert pairs.captions == tuple(emoji.caption(c, "long") for c in concepts)
    for i, c in enumerate(concepts):
        assert pairs.load_image(i).tobytes() == c.image("twitter").tobytes()
    assert pairs.source["style"] == "twitter" and pairs.source["split"] == "unseen"
    assert pairs.source["manifest"] == manifests.manifest_hash("emoji")
    # the style is part of the identity: the same concepts in the other style are other rows
    google = datasets.emoji_pairs("unseen", "google", "long", limit=4)
    assert google.source != pairs.source and google.ids != pairs.ids and google.captions == pairs.captions


def test_emoji_labelled_classes_are_the_split_labels():
    labelled = datasets.emoji_labelled("unseen", "google")
    concepts = emoji.split_concepts("unseen")
    assert labelled.classnames == tuple(c.label for c in concepts)
    assert labelled.labels == tuple(range(len(concepts)))
    assert all("{c}" in t for t in labelled.templates)


def test_fashion_mnist_labelled_takes_the_first_photos_of_each_class():
    photos = datasets.fashion_mnist_labelled(per_class=3)
    assert len(photos) == 30 and Counter(photos.labels) == {c: 3 for c in range(10)}
    assert photos.classnames[0] == "T-shirt/top" and len(photos.classnames) == 10
    rows = [int(i.split("-")[1]) for i in photos.ids]
    assert rows == sorted(rows)
    image = photos.load_image(0)
    assert image.size == (28, 28) and image.mode == "RGB"


# ---------------------------------------------------------------- the full config's path, on local files

@pytest.fixture
def pair_folder(tmp_path, emoji_concepts):
    """A dataset folder as the full config expects it: images + train.jsonl (captions in file order)."""
    folder = tmp_path / "toy-pairs"
    (folder / "img").mkdir(parents=True)
    picks = [emoji_concepts[i] for i in (30, 3, 400, 12)]
    rows = []
    for n, c in enumerate(picks):
        name = f"img/{n:02d}-{c.key}.png"
        shutil.copy(c.images["google"], folder / name)
        rows.append({"image": name, "caption": f"{c.label} ({n})"})
    lines = [json.dumps(rows[0]), json.dumps(rows[1]), "", json.dumps(rows[2]), json.dumps(rows[3])]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    return folder, rows, picks


def _pairs_manifest(location):
    return {"name": "toy-pairs", "config": "full", "obtain": OBTAIN, "location": str(location)}


def test_jsonl_pairs_reads_rows_in_file_order(manifest_dir, pair_folder):
    folder, rows, picks = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(folder))
    pairs = jsonl_pairs("toy-pairs", "train")
    assert pairs.ids == tuple(r["image"] for r in rows)
    assert pairs.captions == tuple(r["caption"] for r in rows)
    assert len(pairs) == 4 and pairs.name == "toy-pairs-train"
    for i, c in enumerate(picks):
        assert pairs.load_image(i).tobytes() == Image.open(c.images["google"]).tobytes()
    assert pairs.source == {"dataset": "toy-pairs", "manifest": manifests.manifest_hash("toy-pairs"),
                            "split": "train"}
    assert jsonl_pairs("toy-pairs", "train", limit=2).captions == tuple(r["caption"] for r in rows[:2])


def test_jsonl_pairs_location_from_environment(manifest_dir, pair_folder, tmp_path, monkeypatch):
    folder, rows, _ = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(tmp_path / "not-here"))
    monkeypatch.setenv("TOY_PAIRS_DIR", str(folder))
    assert jsonl_pairs("toy-pairs", "train").captions == tuple(r["caption"] for r in rows)


def test_missing_dataset_says_where_to_get_it_and_where_to_put_it(manifest_dir, tmp_path):
    missing = tmp_path / "data" / "toy-pairs"
    manifest_dir("toy-pairs", _pairs_manifest(missing))
    with pytest.raises(DatasetMissingError) as info:
        jsonl_pairs("toy-pairs", "train")
    message = str(info.value)
    assert str(missing / "train.jsonl") in message
    assert OBTAIN in message  # where to get it
    assert f"Put it in {missing}" in message and "TOY_PAIRS_DIR" in message  # where to put it
    assert isinstance(info.value, FileNotFoundError)


def test_malformed_jsonl_line_names_its_number(manifest_dir, pair_folder):
    folder, rows, _ = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(folder))
    lines = (folder / "train.jsonl").read_text().splitlines()
    lines[3] = '{"image": "img/02.png", "caption": '  # line 4 (line 3 is blank)
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetMissingError, match=r"train\.jsonl line 4\b"):
        jsonl_pairs("toy-pairs", "train")
    lines[3] = json.dumps({"image": "img/02.png", "text": "no caption key"})
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetMissingError, match=r"train\.jsonl line 4\b"):
        jsonl_pairs("toy-pairs", "train")


def test_non_object_jsonl_line_names_its_number(manifest_dir, pair_folder):
    folder, rows, _ = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(folder))
    lines = (folder / "train.jsonl").read_text().splitlines()
    lines[1] = json.dumps(["img/01.png", "a caption"])
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetMissingError, match=r"train\.jsonl line 2\b"):
        jsonl_pairs("toy-pairs", "train")


def test_non_image_among_pairs_raises_bad_image_naming_the_file(manifest_dir, pair_folder):
    folder, rows, _ = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(folder))
    (folder / rows[2]["image"]).write_text("this is not a PNG")
    pairs = jsonl_pairs("toy-pairs", "train")
    pairs.load_image(1)  # the others still load
    with pytest.raises(BadImageError) as info:
        pairs.load_image(2)
    assert str(folder / rows[2]["image"]) in str(info.value)


@pytest.fixture
def class_folder(tmp_path, emoji_concepts):
    """One folder per class (manifest order differs from alphabetical order), plus a stray text file."""
    root = tmp_path / "toy-classes"
    layout = {"n02": [emoji_concepts[i] for i in (5, 6, 7)], "n01": [emoji_concepts[i] for i in (50, 51)]}
    for class_dir, concepts in layout.items():
        (root / class_dir).mkdir(parents=True)
        for c in concepts:
            shutil.copy(c.images["twitter"], root / class_dir / f"{c.key}.png")
    (root / "n02" / "README.txt").write_text("not an image, not an image suffix")
    return root, layout


def _classes_manifest(location):
    return {"name": "toy-classes", "obtain": OBTAIN, "location": str(location),
            "class_dirs": ["n02", "n01"], "classes": ["bee", "apple"]}


def test_folder_labelled_reads_classes_in_manifest_order(manifest_dir, class_folder):
    root, layout = class_folder
    manifest_dir("toy-classes", _classes_manifest(root))
    labelled = folder_labelled("toy-classes")
    expected = [(f"{d}/{c.key}.png", label, c) for label, d in enumerate(["n02", "n01"])
                for c in sorted(layout[d], key=lambda c: f"{c.key}.png")]
    assert labelled.ids == tuple(e[0] for e in expected)
    assert labelled.labels == tuple(e[1] for e in expected)
    assert labelled.classnames == ("bee", "apple")
    for i, (_, _, c) in enumerate(expected):
        assert labelled.load_image(i).tobytes() == Image.open(c.images["twitter"]).tobytes()
    capped = folder_labelled("toy-classes", per_class=1)
    assert capped.labels == (0, 1) and capped.ids == (expected[0][0], expected[3][0])
    # data.prompts reaches the folder sets too: the 80 templates by default, the bare name when asked.
    from corpora.templates import IMAGENET_TEMPLATES, NAME_ONLY

    assert labelled.templates == tuple(IMAGENET_TEMPLATES) and len(labelled.templates) == 80
    assert folder_labelled("toy-classes", prompts="name").templates == tuple(NAME_ONLY)


def test_folder_labelled_bad_image_names_the_file(manifest_dir, class_folder):
    root, _ = class_folder
    manifest_dir("toy-classes", _classes_manifest(root))
    bad = root / "n01" / "zz-broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff not really a jpeg")
    labelled = folder_labelled("toy-classes")
    index = labelled.ids.index("n01/zz-broken.jpg")
    with pytest.raises(BadImageError) as info:
        labelled.load_image(index)
    assert str(bad) in str(info.value)


def test_folder_labelled_missing_folder(manifest_dir, tmp_path):
    manifest_dir("toy-classes", _classes_manifest(tmp_path / "nowhere"))
    with pytest.raises(DatasetMissingError) as info:
        folder_labelled("toy-classes")
    assert OBTAIN in str(info.value) and str(tmp_path / "nowhere") in str(info.value)


def test_folder_labelled_empty_folder(manifest_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    manifest_dir("toy-classes", _classes_manifest(tmp_path / "empty"))
    with pytest.raises(DatasetMissingError, match="class folders are missing"):
        folder_labelled("toy-classes")


def test_open_image(tmp_path, emoji_concepts):
    source = emoji_concepts[0].images["google"]
    image = open_image(source)
    assert image.size == (64, 64) and image.tobytes() == Image.open(source).tobytes()
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(source.read_bytes()[:300])
    with pytest.raises(BadImageError, match="truncated.png"):
        open_image(truncated)
    assert issubclass(BadImageError, ValueError)


def test_folder_labelled_missing_class_folder_is_an_error(manifest_dir, class_folder):
    root, _ = class_folder
    manifest = _classes_manifest(root)
    manifest["class_dirs"].append("n03")
    manifest["classes"].append("cat")
    manifest_dir("toy-classes", manifest)
    with pytest.raises(DatasetMissingError, match="n03"):
        folder_labelled("toy-classes")


@pytest.mark.parametrize("field, value", [("caption", None), ("caption", 7), ("caption", "  "), ("image", ["a.png"])])
def test_a_jsonl_field_that_is_not_a_string_is_refused_not_stringified(manifest_dir, pair_folder, field, value):
    folder, rows, _ = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(folder))
    lines = (folder / "train.jsonl").read_text(encoding="utf-8").splitlines()
    lines[0] = json.dumps({**rows[0], field: value})
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetMissingError, match=rf"train\.jsonl line 1: {field} is .*, not a non-empty string"):
        jsonl_pairs("toy-pairs", "train")


def test_a_non_utf8_jsonl_line_is_named_with_its_number(manifest_dir, pair_folder):
    folder, rows, _ = pair_folder
    manifest_dir("toy-pairs", _pairs_manifest(folder))
    data = (folder / "train.jsonl").read_bytes().split(b"\n")
    data[1] = json.dumps({**rows[1], "caption": "caf\u00e9"}, ensure_ascii=False).encode("latin-1")  # \xe9
    (folder / "train.jsonl").write_bytes(b"\n".join(data))
    with pytest.raises(DatasetMissingError, match=r"train\.jsonl line 2: is not UTF-8"):
        jsonl_pairs("toy-pairs", "train")


def test_files_are_read_as_utf8_under_a_non_utf8_locale(manifest_dir, pair_folder, tmp_path):
    """``LC_ALL=C`` with UTF-8 mode and locale coercion off: Python's default encoding is ASCII, and every
    text file the book reads (manifests, JSONL captions, the emoji corpus's CLDR text) must still load."""
    import subprocess
    import sys

    folder, rows, _ = pair_folder
    manifest = manifest_dir("toy-pairs", {**_pairs_manifest(folder), "description": "d\u00e9j\u00e0 vu"})
    lines = [json.dumps({**r, "caption": r["caption"] + " \u00e9t\u00e9 \u2615"}, ensure_ascii=False) for r in rows]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    script = (
        "import locale; from corpora import manifests, emoji; from corpora.datasets import jsonl_pairs\n"
        "assert locale.getpreferredencoding(False).lower() in ('ansi_x3.4-1968', 'ascii', 'us-ascii'), "
        "locale.getpreferredencoding(False)\n"
        "assert any(c.names.get('ja') for c in emoji.load_concepts())\n"
        f"manifests.MANIFEST_DIR = __import__('pathlib').Path({str(manifest.parent)!r}); manifests.load.cache_clear()\n"
        "pairs = jsonl_pairs('toy-pairs', 'train'); assert '\\u2615' in pairs.captions[0]\n"
        "print('ok')\n"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_damaged_corpus_file_names_the_re_extract_command(monkeypatch, tmp_path):
    """The emoji corpus is unpacked into a temporary assets folder, then damaged in two ways."""
    from lib.core import paths
    from corpora import emoji

    monkeypatch.setattr(emoji, "assets_dir", lambda: tmp_path)
    emoji.load_concepts.cache_clear()
    manifests.forget()
    try:
        concept = emoji.load_concepts()[5]
        picture = concept.images["google"]
        assert str(picture).startswith(str(tmp_path))
        picture.write_bytes(picture.read_bytes()[: 40])  # truncated PNG
        manifests.forget()
        with pytest.raises(DatasetMissingError, match=r"has \d+ bytes, not \d+: the unpacked emoji corpus is "
                                                      r"damaged; run `python -m corpora.emoji --re-extract`"):
            emoji.corpus_dir()
        with pytest.raises(BadImageError,
                           match=r"is not a readable image .*run `python -m corpora.emoji --re-extract`"):
            concept.image("google")
        emoji.re_extract()
        assert concept.image("google").size == (64, 64)
        picture.unlink()
        manifests.forget()
        with pytest.raises(DatasetMissingError, match="is missing: the unpacked emoji corpus is damaged"):
            emoji.corpus_dir()
    finally:
        emoji.load_concepts.cache_clear()
        manifests.forget()
        assert paths.assets_dir() != tmp_path

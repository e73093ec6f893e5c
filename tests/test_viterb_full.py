"""ViTeRB full-config image loaders (corpora.full_sets for awa2 / cub / fgvc-aircraft / imagenet-plus), run on
tiny synthetic copies of each dataset in its released layout, and ImageNet+'s reference texts (WordNet glosses).

Why synthetic: the real datasets are tens of GB and not on these machines, so the loaders are exercised on
local files. The copies use the real manifests (class lists, splits, layout, image settings), so the splits
checked here are the ones a full run uses; only the pixels (8×8 images) and the FGVC-Aircraft family names (not
shipped: read from the dataset's families.txt) are made up. The copies are found through the manifests'
``<NAME>_DIR`` override (corpora.manifests.location).
"""
from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
import yaml
from PIL import Image

from corpora import class_splits, class_texts, full_sets, manifests, wordnet
from corpora.manifests import DatasetMissingError
from lib.core.paths import REPO_ROOT

CUB_SEEN = ["001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross"]  # + the 50 unseen
FAMILIES = ["Boeing 707", "Boeing 737", "Cessna 172", "DHC-8"] + [f"Family {i:02d}" for i in range(66)]


def _image(path, value: int, fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (value % 256, (7 * value) % 256, (13 * value) % 256)).save(path, fmt)


def _same_bytes(paths, data: bytes) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _decoded(bench, i):
    return np.asarray(bench.image_sources[0].load_image(bench.image_rows[i][1]))


def _check_shape(bench, dataset, seen, unseen):
    """What every full-config benchmark must satisfy, whatever the dataset."""
    keys = bench.class_keys
    assert [keys[i] for i in bench.classes("seen")] == list(seen)
    assert sorted(keys[i] for i in bench.classes("unseen")) == sorted(unseen)
    assert not set(seen) & set(unseen) and len(keys) == len(set(keys))
    bench.check_no_leak()
    unseen_labels = set(bench.classes("unseen"))
    assert bench.images("train") and bench.images("val") and bench.images("test")
    assert all(bench.image_labels[i] not in unseen_labels for i in bench.images("train") + bench.images("val"))
    assert all(bench.image_labels[i] in unseen_labels for i in bench.images("test"))
    # Rows: one source, in class order then sorted path, so store keys do not depend on listing order.
    (source,) = bench.image_sources
    assert bench.image_rows == tuple((0, i) for i in range(len(source.ids)))
    order = sorted(range(len(source.ids)), key=lambda i: (bench.image_labels[i], source.ids[i]))
    assert order == list(range(len(source.ids)))
    assert source.source["dataset"] == dataset and source.source["manifest"] == manifests.manifest_hash(dataset)
    # Every seen class with >= 2 images gives at least one validation image, and keeps one for training.
    for label in bench.classes("seen"):
        roles = [bench.image_role[i] for i in range(len(source.ids)) if bench.image_labels[i] == label]
        assert "train" in roles and ("val" in roles or len(roles) < 2)


# ------------------------------------------------------------------------------ synthetic copies
@pytest.fixture
def awa2(tmp_path, monkeypatch):
    root = tmp_path / "Animals_with_Attributes2" / "JPEGImages"
    for n, c in enumerate(manifests.load("awa2")["classes"]):
        for k in range(3):  # written in reverse name order: the loader must sort
            _image(root / c / f"{c}_{10003 - k}.jpg", 3 * n + k)
    monkeypatch.setenv("AWA2_DIR", str(root))
    return root


@pytest.fixture
def cub(tmp_path, monkeypatch):
    root = tmp_path / "CUB_200_2011"
    classes = sorted(CUB_SEEN + list(manifests.load("cub")["splits"]["unseen"]))
    root.mkdir()
    (root / "classes.txt").write_text("".join(f"{i} {c}\n" for i, c in enumerate(classes, 1)))
    lines, k = [], 0
    for c in classes:
        for j in range(3):
            k += 1
            rel = f"{c}/{c.split('.')[1]}_{j:04d}_{k}.jpg"
            _image(root / "images" / rel, k)
            lines.append(f"{k} {rel}\n")
    (root / "images.txt").write_text("".join(lines))
    monkeypatch.setenv("CUB_DIR", str(root))
    return root


@pytest.fixture
def aircraft(tmp_path, monkeypatch):
    root = tmp_path / "fgvc-aircraft-2013b" / "data"
    root.mkdir(parents=True)
    (root / "families.txt").write_text("".join(f"{f}\n" for f in FAMILIES))
    lists = {"train": [], "val": [], "test": []}
    for n, family in enumerate(FAMILIES):
        for j, part in enumerate(("train", "val", "test")):  # one image per official partition
            image_id = f"{1000000 + 3 * n + j:07d}"
            _image(root / "images" / f"{image_id}.jpg", 3 * n + j)
            lists[part].append(f"{image_id} {family}\n")
    for part, lines in lists.items():
        (root / f"images_family_{part}.txt").write_text("".join(lines))
    monkeypatch.setenv("FGVC_AIRCRAFT_DIR", str(root))
    return root


def _unseen_candidates(count: int) -> list[str]:
    """Real WordNet 3.0 noun synset ids (as IN-21k folders are named) that are not IN-1k classes."""
    in1k = set(manifests.load("imagenet-1k")["class_dirs"])
    offsets = sorted({o for senses in wordnet._index().values() for o in senses})
    return [w for w in (f"n{o:08d}" for o in offsets[::97]) if w not in in1k][:count]


@pytest.fixture
def imagenet_plus(tmp_path, monkeypatch):
    root = tmp_path / "imagenet-plus"
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(buffer, "JPEG")
    data = buffer.getvalue()
    seen = manifests.load("imagenet-1k")["class_dirs"]
    _same_bytes([root / "seen" / w / f"{w}_{k}.JPEG" for w in seen for k in range(2)], data)
    _image(root / "seen" / seen[0] / f"{seen[0]}_0.JPEG", 200)  # a distinct one, for load_image
    candidates = _unseen_candidates(503)
    popular, rare = candidates[:501], candidates[501:]
    _same_bytes([root / "unseen" / w / f"{w}_{k}.JPEG" for w in popular for k in range(3)], data)
    (root / "unseen" / popular[-1] / f"{popular[-1]}_2.JPEG").unlink()  # 2 images: loses to the other 500
    _same_bytes([root / "unseen" / w / f"{w}_0.JPEG" for w in rare], data)
    # An IN-1k synset under unseen/ (the most populated folder of all) must never become an unseen class.
    _same_bytes([root / "unseen" / seen[5] / f"x_{k}.JPEG" for k in range(9)], data)
    monkeypatch.setenv("IMAGENET_PLUS_DIR", str(root))
    return root, popular[:500], popular[500:] + rare


# ------------------------------------------------------------------------------------ the loaders
def test_awa2_loader(awa2):
    manifest = manifests.load("awa2")
    bench = full_sets.load_full("awa2")
    unseen = manifest["splits"]["unseen"]
    _check_shape(bench, "awa2", [c for c in manifest["classes"] if c not in unseen], unseen)
    assert len(bench.classes("seen")) == 40 and len(bench.classes("unseen")) == 10
    assert bench.class_keys == tuple(manifest["classes"])  # AwA2's classes.txt order
    assert bench.class_names[1] == "grizzly bear"
    ids = bench.image_sources[0].ids
    assert ids[:3] == ("antelope/antelope_10001.jpg", "antelope/antelope_10002.jpg", "antelope/antelope_10003.jpg")
    assert all(i.split("/")[0] == bench.class_keys[label] for i, label in zip(ids, bench.image_labels))
    assert len(bench.images("test")) == 30 and len(bench.images("val")) == 40  # 1 of 3 per seen class
    # load_image decodes the file it names, lazily.
    for i in (0, bench.images("test")[-1]):
        expected = np.asarray(Image.open(awa2 / ids[i]))
        assert isinstance(bench.image_sources[0].load_image(i), Image.Image)
        assert np.array_equal(_decoded(bench, i), expected)
    again = full_sets.load_full("awa2")  # deterministic: same rows, labels, roles
    assert again.image_sources[0].ids == ids and again.image_role == bench.image_role
    assert again.image_labels == bench.image_labels


def test_cub_loader(cub):
    unseen = manifests.load("cub")["splits"]["unseen"]
    bench = full_sets.load_full("cub")
    _check_shape(bench, "cub", CUB_SEEN, unseen)
    assert bench.class_keys == tuple(sorted(CUB_SEEN + unseen))  # classes.txt order
    assert bench.class_names[0] == "Black footed Albatross"
    listed = {line.split()[1] for line in (cub / "images.txt").read_text().splitlines()}
    ids = bench.image_sources[0].ids
    assert {i.removeprefix("images/") for i in ids} == listed
    assert all(i.split("/")[1] == bench.class_keys[label] for i, label in zip(ids, bench.image_labels))
    i = bench.images("test")[0]
    assert np.array_equal(_decoded(bench, i), np.asarray(Image.open(cub / ids[i])))
    assert full_sets.load_full("cub").image_role == bench.image_role


def test_aircraft_loader(aircraft):
    bench = full_sets.load_full("fgvc-aircraft")
    split = class_splits.seeded_class_split(FAMILIES, 20, 0)  # the manifest's rule: seed 0, 20 unseen families
    _check_shape(bench, "fgvc-aircraft", split["seen"], split["unseen"])
    assert (len(bench.classes("seen")), len(bench.classes("unseen"))) == (50, 20)
    assert bench.class_keys == tuple(FAMILIES) and bench.class_names[1] == "Boeing 737"  # spaces kept
    # All three official lists are used, each image with the family its list gives.
    family = {}
    for part in ("train", "val", "test"):
        for line in (aircraft / f"images_family_{part}.txt").read_text().splitlines():
            image_id, name = line.split(" ", 1)
            family[f"images/{image_id}.jpg"] = name
    ids = bench.image_sources[0].ids
    assert set(ids) == set(family)
    assert all(family[i] == bench.class_keys[label] for i, label in zip(ids, bench.image_labels))
    i = bench.images("val")[0]
    assert np.array_equal(_decoded(bench, i), np.asarray(Image.open(aircraft / ids[i])))


def test_imagenet_plus_loader(imagenet_plus):
    root, expected_unseen, _ = imagenet_plus
    in1k = manifests.load("imagenet-1k")
    bench = full_sets.load_full("imagenet-plus")
    _check_shape(bench, "imagenet-plus", in1k["class_dirs"], expected_unseen)
    assert len(bench.classes("unseen")) == manifests.load("imagenet-plus")["splits"]["n_unseen"] == 500
    assert bench.class_names[:2] == tuple(in1k["classes"][:2])
    wnid = bench.class_keys[bench.classes("unseen")[0]]
    assert bench.class_names[bench.classes("unseen")[0]] == wordnet.synset_at(int(wnid[1:])).words[0]
    ids = bench.image_sources[0].ids
    assert all(ids[i].startswith("unseen/") for i in bench.images("test"))
    assert all(ids[i].startswith("seen/") for i in bench.images("train") + bench.images("val"))
    assert np.array_equal(_decoded(bench, 0), np.asarray(Image.open(root / ids[0])))
    assert ids[0] == f"seen/{in1k['class_dirs'][0]}/{in1k['class_dirs'][0]}_0.JPEG"


def test_imagenet_plus_reference_texts_are_wordnet_glosses(imagenet_plus):
    """The manifest promises WordNet glosses for ImageNet+ (its classes are WordNet 3.0 noun synsets): every
    seen and unseen class gets "<name>: <gloss of its wnid>", one text per class, keyed as WordNet."""
    bench = full_sets.load_full("imagenet-plus")
    found = class_texts.class_texts(bench, "reference")
    assert found.per_class() == [1] * len(bench.class_keys) == [1] * 1500
    assert found.source["wordnet"].startswith("3.0") and found.source["by"] == "wnid"
    for index in (0, bench.classes("unseen")[0], len(bench.class_keys) - 1):
        wnid, name = bench.class_keys[index], bench.class_names[index]
        assert found.texts[index] == f"{name}: {wordnet.synset_at(int(wnid[1:])).gloss}"
    tench = found.texts[bench.class_keys.index("n01440764")]
    assert tench.startswith(f"{bench.class_names[0]}: ") and "freshwater" in tench  # IN-1k class 0, the tench
    assert "corpora.class_texts" in manifests.load("imagenet-plus")["reference_text"]


def test_caps_and_val_fraction_come_from_the_manifest(awa2, manifest_dir):
    content = yaml.safe_load((REPO_ROOT / "data_manifests" / "awa2.yaml").read_text())  # the real one, edited
    content["images"] = {"val_fraction": 0.5, "seed": 0, "seen_per_class": 2, "unseen_per_class": 1}
    manifest_dir("awa2", content)
    bench = full_sets.load_full("awa2")
    assert len(bench.images("test")) == 10 and len(bench.images("train")) == len(bench.images("val")) == 40
    content["images"]["seed"] = 1  # the caps' samples are seeded: another seed, other images (same counts)
    manifest_dir("awa2", content)
    other = full_sets.load_full("awa2")
    assert other.image_sources[0].ids != bench.image_sources[0].ids
    assert len(other.images("test")) == 10


# ---------------------------------------------------------------------------------- the errors
@pytest.mark.parametrize("dataset", ["awa2", "cub", "fgvc-aircraft", "imagenet-plus"])
def test_missing_dataset_says_where_to_get_and_put_it(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv(f"{dataset.upper().replace('-', '_')}_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetMissingError) as info:
        full_sets.load_full(dataset)
    message = str(info.value)
    assert "is missing. Get it:" in message and f"Put it in {tmp_path / 'nowhere'}" in message
    assert " ".join(manifests.load(dataset)["obtain"].split()) in message


def test_absent_and_empty_class_folders_are_named(awa2):
    shutil.rmtree(awa2 / "sheep")
    with pytest.raises(DatasetMissingError, match=r"class 'sheep' \(unseen.*has no folder .*sheep"):
        full_sets.load_full("awa2")
    (awa2 / "sheep").mkdir()
    with pytest.raises(DatasetMissingError, match=r"class folder .*sheep \(class 'sheep', unseen\) holds no images"):
        full_sets.load_full("awa2")


def test_cub_class_absent_from_classes_txt(cub):
    gone = manifests.load("cub")["splits"]["unseen"][0]
    lines = [line for line in (cub / "classes.txt").read_text().splitlines() if gone not in line]
    (cub / "classes.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetMissingError, match=rf"class '{gone}' \(unseen.*classes.txt.*images/{gone}"):
        full_sets.load_full("cub")


def test_cub_missing_listed_image_and_empty_folder(cub):
    victim = CUB_SEEN[0]
    for path in (cub / "images" / victim).iterdir():
        path.unlink()
    with pytest.raises(DatasetMissingError, match=rf"class folder .*{victim} .*holds no images"):
        full_sets.load_full("cub")
    _image(cub / "images" / victim / "other.jpg", 1)  # a stray file does not replace the listed ones
    with pytest.raises(DatasetMissingError, match=r"3 of the \d+ images listed in .*images.txt are missing"):
        full_sets.load_full("cub")


def test_aircraft_family_without_images(aircraft):
    for part in ("train", "val", "test"):
        path = aircraft / f"images_family_{part}.txt"
        path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                                if not line.endswith("Cessna 172")))
    with pytest.raises(DatasetMissingError, match=r"family 'Cessna 172' \((un)?seen\) .*has no image"):
        full_sets.load_full("fgvc-aircraft")


def test_imagenet_plus_missing_seen_synset_and_too_few_unseen(imagenet_plus):
    root, unseen, spare = imagenet_plus
    for wnid in [unseen[0], *spare]:
        shutil.rmtree(root / "unseen" / wnid)
    with pytest.raises(DatasetMissingError, match="only 499 non-empty synset folders .* 500 needed"):
        full_sets.load_full("imagenet-plus")
    wnid = manifests.load("imagenet-1k")["class_dirs"][3]
    shutil.move(root / "seen" / wnid, root / "unseen" / unseen[0])  # back to 500 candidates; one IN-1k folder gone
    with pytest.raises(DatasetMissingError, match=rf"class '{wnid}' \(seen.*has no folder .*seen/{wnid}"):
        full_sets.load_full("imagenet-plus")

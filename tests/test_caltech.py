"""Caltech-101 (issue 60): the manifest and its per-image hash list, ``python -m provision.prepare caltech-101`` on a
synthetic copy in every released form (tools/standins.py: the official zip with its tar.gz inside, a tar.gz, a tar, an
extracted folder), what it refuses (another image's bytes, a member climbing out with ``..``, an oversized member, a
missing image), and ``corpora.caltech``: names, WordNet choices, class texts, seeded splits and capped samples.
The real photographs are a user's download: tests/test_caltech_smoke.py runs on them when ``LIB_DOWNLOADS`` holds
them."""
from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from corpora import caltech, datasets, manifests
from provision import prepare
from provision.archives import ArchiveError
from provision.prepare import PrepareError
from tools import standins

REAL_MANIFEST = manifests.manifest_path("caltech-101")


# ------------------------------------------------------------------------------------------ the committed data
def test_manifest_names_every_category_once_and_the_hash_list_agrees():
    manifest = caltech.manifest()
    dirs, names = manifest["class_dirs"], manifest["classes"]
    assert len(dirs) == len(names) == len(set(names)) == 101 and caltech.CLUTTER not in dirs
    assert dirs == sorted(dirs)  # torchvision's order
    assert manifest["doi"] == "10.22002/D1.20086" and manifest["licence"].startswith("CC BY 4.0")
    hashes = caltech.image_hashes()
    assert len(hashes) == manifest["image_sha256"]["images"] == 8677 == sum(manifest["images_per_category"].values())
    assert Counter(k.split("/")[0] for k in hashes) == manifest["images_per_category"]
    assert len(set(hashes.values())) == len(hashes)  # no two photos share their bytes
    assert (caltech.N_UNSEEN, caltech.VAL_FRACTION) == (manifest["splits"]["n_unseen"],
                                                        manifest["images"]["val_fraction"])
    named = caltech.display_names()
    assert (named["Faces_easy"], named["car_side"], named["Motorbikes"], named["water_lilly"]) == (
        "face", "car side", "motorbike", "water lily")
    with pytest.raises(KeyError, match="clutter folder is never one"):
        caltech.display_name(caltech.CLUTTER)


def test_the_hash_list_is_checked_against_the_manifest(tmp_path, monkeypatch):
    for name in ("caltech-101.yaml", "caltech-101.sha256"):
        (tmp_path / name).write_bytes((manifests.MANIFEST_DIR / name).read_bytes())
    listing = tmp_path / "caltech-101.sha256"
    listing.write_text(listing.read_text().replace("c159b0d5", "c159b0d6", 1))
    monkeypatch.setattr(manifests, "MANIFEST_DIR", tmp_path)
    manifests.load.cache_clear()
    try:
        with pytest.raises(manifests.DatasetMissingError, match="does not match its sha256"):
            caltech.image_hashes()
    finally:
        manifests.load.cache_clear()


def test_every_category_has_a_chosen_synset_and_the_texts_are_the_committed_ones():
    assert set(caltech.WORDNET) == set(caltech.categories()) and caltech.SUPERORDINATE <= set(caltech.WORDNET)
    reference = json.loads((manifests.MANIFEST_DIR / "class_texts" / "caltech-101-reference.json").read_text())
    assert {c: (s["lemma"], s["sense"]) for c, s in reference["synsets"].items()} == caltech.WORDNET
    assert reference["synsets"]["hedgehog"]["wnid"] == "n01893825"  # sense 2: not the porcupine of sense 1
    texts = {kind: caltech.class_texts(kind) for kind in caltech.KINDS}
    names = caltech.display_names()
    for category, name in names.items():
        assert texts["name"][category] == [f"a photo of a {name}."]
        assert texts["reference"][category][0].startswith(f"{name}: ")
        assert texts["wikipedia"][category]  # the article's sentences, or the name in the template
    wiki = json.loads((manifests.MANIFEST_DIR / "class_texts" / "caltech-101-wikipedia.json").read_text())
    assert wiki["matched"]["sea_horse"]["title"] == "Seahorse"  # the chosen synset, never WordNet's walrus
    assert {c for c, m in wiki["matched"].items() if "by hand" in m["rule"]} == set(caltech.WIKIPEDIA_TITLES)
    assert texts["wikipedia"]["garfield"] == ["a photo of a Garfield."]  # no article: the template


def test_the_synsets_resolve_in_wordnet():
    from corpora import wordnet

    try:
        wordnet.wordnet_dir()
    except manifests.DatasetMissingError as error:
        pytest.skip(str(error))
    reference = json.loads((manifests.MANIFEST_DIR / "class_texts" / "caltech-101-reference.json").read_text())
    for category, (lemma, sense) in caltech.WORDNET.items():
        found = wordnet.synsets(lemma)[sense - 1]
        assert found.wnid == reference["synsets"][category]["wnid"], category


def test_splits_are_drawn_per_seed():
    first, again, other = caltech.split(0), caltech.split(0), caltech.split(1)
    assert first == again and (len(first["seen"]), len(first["unseen"])) == (51, 50)
    assert not set(first["seen"]) & set(first["unseen"]) and set(first["unseen"]) != set(other["unseen"])


def test_capped_photos_are_a_seeded_sample():
    capped = caltech.photos(per_class=4)
    assert all(len(keys) == 4 for keys in capped.values()) and capped == caltech.photos(per_class=4)
    assert capped != caltech.photos(per_class=4, sample_seed=1)
    assert caltech.photos(per_class=5)["inline_skate"] != caltech.photos(per_class=4)["inline_skate"]
    assert len(caltech.photos()["airplanes"]) == 800


def test_each_seed_is_scored_on_its_own_photos_and_every_category_equally(tmp_path, monkeypatch):
    """The zero-shot test set of chapters that train elsewhere (FLAME, FDT): every photo in one labelled set (one
    store entry), and per seed a seeded sample of N a category, so a paired interval over seeds spans the photos."""
    import torch

    monkeypatch.setattr(caltech, "require", lambda: tmp_path)  # no photo is opened: only the list is read
    photos = caltech.labelled()
    assert len(photos) == 8677 and len(photos.classnames) == 101 and photos.templates == (caltech.TEMPLATE,)
    assert caltech.CLUTTER not in {i.split("/")[0] for i in photos.ids}
    assert caltech.prompts() == [caltech.TEMPLATE.replace("{c}", c) for c in photos.classnames]
    samples = {seed: caltech.sample(photos, 20, seed) for seed in (0, 1)}
    for seed, (rows, chosen) in samples.items():
        assert len(chosen) == 101 * 20 and torch.bincount(torch.tensor(chosen.labels)).tolist() == [20] * 101
        assert chosen.ids == tuple(photos.ids[i] for i in rows.tolist())
        assert all(photos.classnames[label] == caltech.display_name(key.split("/")[0])
                   for key, label in zip(chosen.ids, chosen.labels))
        assert chosen.ids == caltech.sample(photos, 20, seed)[1].ids  # seeded: the same on a rerun
    assert len(set(samples[0][1].ids) & set(samples[1][1].ids)) < 0.5 * len(samples[0][1].ids)


def test_without_a_preparation_one_line_says_what_to_download(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CALTECH_101_DIR", str(tmp_path / "nothing"))
    monkeypatch.delenv(caltech.DOWNLOADS_ENV, raising=False)
    with pytest.raises(manifests.DatasetMissingError) as info:
        caltech.require()
    message = str(info.value)
    assert "\n" not in message and "10.22002/D1.20086" in message and "caltech-101.zip" in message
    assert "$LIB_DOWNLOADS/caltech-101" in message
    assert caltech.main(["--where"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "caltech-101.zip" in out
    monkeypatch.setenv(caltech.DOWNLOADS_ENV, str(tmp_path))
    assert caltech.downloads() == tmp_path / "caltech-101" and str(tmp_path / "caltech-101") in caltech.how_to_get()


# ------------------------------------------------------------------------------------------ the prepare
@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return standins.caltech_101(tmp_path_factory.mktemp("caltech-downloads"))


@pytest.fixture
def standin_manifest(standin, tmp_path, monkeypatch):
    folder = tmp_path / "manifests"
    folder.mkdir()
    standins.caltech_101_manifest(folder, standin["hashes"], REAL_MANIFEST)
    monkeypatch.setattr(manifests, "MANIFEST_DIR", folder)
    manifests.load.cache_clear()
    yield folder
    manifests.load.cache_clear()


def _prepare(source, target) -> str:
    lines = []
    prepare.prepare("caltech-101", source, target, say=lines.append)
    return "\n".join(lines)


@pytest.mark.parametrize("form", ["zip", "tar.gz", "tar", "folder"])
def test_every_form_of_the_download_verifies(form, standin, standin_manifest, tmp_path, monkeypatch):
    target = tmp_path / "caltech-101"
    said = _prepare(standin[form], target)
    record = json.loads((target / prepare.RECORD).read_text())
    assert record["counts"]["images"] == len(standin["hashes"]) == 15
    assert record["dropped"]["the BACKGROUND_Google clutter folder (not a category)"]["count"] == 2
    assert sorted(p.name for p in target.iterdir() if p.is_dir()) == standins.CALTECH_CATEGORIES
    assert not (target / caltech.CLUTTER).exists() and not (target / ".nested").exists()
    assert "dropped 2 (the BACKGROUND_Google clutter folder" in said
    assert prepare.check("caltech-101", target) == []
    monkeypatch.setenv("CALTECH_101_DIR", str(target))
    labelled = datasets.folder_labelled("caltech-101", prompts="name")  # the generic reader takes the layout too
    assert len(labelled) == 15 and labelled.classnames[0] == "face"
    bench = caltech.benchmark(seed=0, n_unseen=2)
    bench.check_no_leak()
    assert len(bench.classes("unseen")) == 2 and len(bench.images("test")) == 6 and len(bench.images("val")) == 3
    assert bench.image_sources[0].load_image(0).size == (12, 12)


def test_the_download_folder_and_its_parent_are_found(standin, standin_manifest, tmp_path):
    from provision.prepare_caltech import locate

    assert locate(standin["zip"].parent) == standin["zip"]
    assert locate(standin["folder"].parent) == standin["folder"]  # one level below
    assert locate(standin["folder"]) == standin["folder"]  # the extraction itself
    with pytest.raises(PrepareError, match="Caltech-101 download .* not found"):
        locate(tmp_path)


def _tar_with(members: dict[str, bytes], path: Path, mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _members(standin) -> dict[str, bytes]:
    with tarfile.open(standin["tar"]) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}


def _refused(source, target, capsys) -> str:
    """``python -m provision.prepare caltech-101`` on ``source``: exit 1, one line on stderr, nothing at ``target``."""
    assert prepare.main(["caltech-101", "--from", str(source), "--to", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("provision.prepare caltech-101: ")
    assert not target.exists()
    return err


def test_another_images_bytes_are_refused_naming_the_image(standin, standin_manifest, tmp_path, capsys):
    members = _members(standin)
    members["101_ObjectCategories/accordion/image_0002.jpg"] = members["101_ObjectCategories/accordion/image_0001.jpg"]
    err = _refused(_tar_with(members, tmp_path / "bad" / "101_ObjectCategories.tar"), tmp_path / "out", capsys)
    assert "image accordion/image_0002.jpg has sha256" in err and "caltech-101.zip again" in err


def test_a_missing_image_is_refused(standin, standin_manifest, tmp_path, capsys):
    members = _members(standin)
    del members["101_ObjectCategories/yin_yang/image_0003.jpg"]
    err = _refused(_tar_with(members, tmp_path / "short" / "101_ObjectCategories.tar"), tmp_path / "out", capsys)
    assert "1 of the 15 images are missing (e.g. yin_yang/image_0003.jpg)" in err


def test_a_member_climbing_out_is_refused(standin, standin_manifest, tmp_path, capsys):
    members = {"101_ObjectCategories/../../escape.jpg": b"x", **_members(standin)}
    err = _refused(_tar_with(members, tmp_path / "hostile" / "101_ObjectCategories.tar"), tmp_path / "out", capsys)
    assert "would be written outside the target" in err
    assert not list(tmp_path.rglob("escape.jpg"))


def test_a_member_climbing_out_of_the_nested_archive_is_refused(standin, standin_manifest, tmp_path, capsys):
    inner = _tar_with({**_members(standin), "../../escape.jpg": b"x"}, tmp_path / "inner.tar.gz", "w:gz")
    zipped = tmp_path / "hostile" / "caltech-101.zip"
    zipped.parent.mkdir()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("caltech-101/101_ObjectCategories.tar.gz", inner.read_bytes())
    err = _refused(zipped, tmp_path / "out", capsys)
    assert "'../../escape.jpg' would be written outside the target" in err
    assert not list(tmp_path.rglob("escape.jpg"))


@pytest.mark.parametrize("form", ["tar", "zip"])
def test_an_oversized_member_is_refused(form, standin, standin_manifest, tmp_path, capsys, monkeypatch):
    """A photo over the per-member cap (``LIB_PREPARE_MAX_ENTRY_BYTES``); in the zip, the nested tar.gz itself."""
    members = _members(standin)
    largest = max(len(d) for d in members.values())
    with zipfile.ZipFile(standin["zip"]) as archive:
        inner = archive.getinfo("caltech-101/101_ObjectCategories.tar.gz").file_size
    assert inner > largest + 1
    cap = largest + 1 if form == "tar" else inner - 1  # the zip: every photo fits, the nested archive does not
    members["101_ObjectCategories/car_side/image_0001.jpg"] = b"\xff" * (cap + 1)
    source = _tar_with(members, tmp_path / "big" / "101_ObjectCategories.tar") if form == "tar" else standin["zip"]
    monkeypatch.setenv("LIB_PREPARE_MAX_ENTRY_BYTES", str(cap))
    err = _refused(source, tmp_path / "out", capsys)
    assert "a decompression bomb" in err
    assert ("car_side/image_0001.jpg" if form == "tar" else "101_ObjectCategories.tar.gz") in err


def test_a_hostile_member_raises_before_anything_is_kept(standin, standin_manifest, tmp_path):
    members = {**_members(standin), "/tmp/absolute-escape.jpg": b"x"}
    with pytest.raises(ArchiveError, match="absolute path"):
        _prepare(_tar_with(members, tmp_path / "abs" / "101_ObjectCategories.tar"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_capped_sample_checks_every_photo_and_writes_the_sample(standin, standin_manifest, tmp_path, monkeypatch,
                                                                   capsys):
    target = tmp_path / "sample"
    prepare.prepare("caltech-101", standin["zip"], target, options={"per_class": 2}, say=lambda _: None)
    record = json.loads((target / prepare.RECORD).read_text())
    assert record["counts"]["images"] == 10 and record["counts"]["photos_checked"] == 15
    assert record["settings"]["selection"] == {"per_class": 2, "sample_seed": 0}
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*.jpg")) == sorted(
        k for keys in caltech.photos(2).values() for k in keys)
    monkeypatch.setenv("CALTECH_101_DIR", str(target))
    with pytest.raises(manifests.DatasetMissingError, match="holds a sample of the photos"):
        caltech.require()
    assert caltech.benchmark(seed=0, per_class=2, n_unseen=2, root=target).counts()["test images"] == 4
    members = _members(standin)  # a photo outside the sample with another's bytes is still refused
    outside = next(k for k in standin["hashes"] if k not in {k for v in caltech.photos(2).values() for k in v})
    donor = next(k for k in standin["hashes"] if k != outside)
    members[f"101_ObjectCategories/{outside}"] = members[f"101_ObjectCategories/{donor}"]
    with pytest.raises(PrepareError, match=f"image {outside} has sha256"):
        prepare.prepare("caltech-101", _tar_with(members, tmp_path / "bad" / "101_ObjectCategories.tar"),
                        tmp_path / "bad-sample", options={"per_class": 2}, say=lambda _: None)

"""``python -m provision.prepare``: each full dataset from its released files to the layout its loader reads.

The real downloads are not on these machines; ``tools/standins.py`` writes tiny synthetic copies in each release's
layout (LLaVA's chat.json + images.zip, ILSVRC-2012's val tar + devkit with a meta.mat, AwA2-data.zip + xlsa17.zip,
CUB_200_2011.tgz, fgvc-aircraft-2013b.tar.gz, tars of per-synset tars for ImageNet+, FLAME's caption files + CC3M
webdataset shards). Each test prepares from them and reads the result with the chapter's own loader. Also: the
held-out split is seeded and recorded, a stopped preparation leaves nothing under the final name and resumes, a
wrong checksum and another version of a split are refused, ImageNet+'s capped extraction gives the loader exactly the
benchmark a full extraction gives, and :func:`provision.prepare.check` (what the pre-flight runs) notices a changed
index file, changed manifest settings and a dataset that is not there.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from corpora import datasets, full_sets, manifests
from provision import prepare, prepare_sets
from provision.prepare import PrepareError
from tools import standins

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return standins.build_downloads(tmp_path_factory.mktemp("downloads"))


def _prepare(name, downloads, target, **kwargs):
    lines = []
    prepare.prepare(name, downloads[name], target, skip_checksums=kwargs.pop("skip_checksums", True),
                    say=lines.append, **kwargs)
    return "\n".join(lines)


def _record(folder: Path) -> dict:
    return json.loads((folder / prepare.RECORD).read_text())


def test_cc3m_llava_pairs_split_and_drops(downloads, tmp_path, monkeypatch):
    target = tmp_path / "cc3m-llava"
    said = _prepare("cc3m-llava", downloads, target)
    record = _record(target)
    assert record["counts"]["pairs"] == 60 and record["dropped"]["no image in the download"]["count"] == 2
    assert "dropped 2 (no image in the download)" in said and "checksums NOT checked" in said
    monkeypatch.setenv("CC3M_LLAVA_DIR", str(target))
    train, val = datasets.jsonl_pairs("cc3m-llava", "train"), datasets.jsonl_pairs("cc3m-llava", "val")
    assert len(train) + len(val) == 60 and len(val) == 6  # min(10,000, 10 % of 60)
    assert not set(train.ids) & set(val.ids) and record["counts"]["shards"] == {
        "shards/00000.tar": (target / "shards" / "00000.tar").stat().st_size}
    chat = {r["image"]: r["conversations"][1]["value"]
            for r in json.loads((downloads["cc3m-llava"] / "chat.json").read_text())}
    assert all(chat[i] == c for i, c in zip(train.ids, train.captions))
    assert train.load_image(0).size == (8, 8)
    # Seeded: a second preparation elsewhere holds out the same pairs, in the same order.
    again = tmp_path / "again"
    _prepare("cc3m-llava", downloads, again)
    assert (again / "val.jsonl").read_bytes() == (target / "val.jsonl").read_bytes()
    assert record["settings"]["split"] == manifests.load("cc3m-llava")["prepare"]
    assert prepare.check("cc3m-llava", target) == []


def test_imagenet_val_sorted_by_the_devkit(downloads, tmp_path, monkeypatch):
    target = tmp_path / "val"
    _prepare("imagenet-1k", downloads, target)
    monkeypatch.setenv("IMAGENET_1K_DIR", str(target))
    labelled = datasets.folder_labelled("imagenet-1k")
    assert len(labelled) == 1000 and len(set(labelled.labels)) == 1000
    # Image i of the val tar went to the wnid whose ILSVRC2012_ID the ground truth gives for it.
    import io
    import tarfile

    from scipy.io import loadmat

    with tarfile.open(downloads["imagenet-1k"] / "ILSVRC2012_devkit_t12.tar.gz") as devkit:
        truth = devkit.extractfile("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt").read().split()
        synsets = loadmat(io.BytesIO(devkit.extractfile("ILSVRC2012_devkit_t12/data/meta.mat").read()), squeeze_me=True)
    wnid = {int(s[0]): str(s[1]) for s in synsets["synsets"]}
    assert (target / wnid[int(truth[41])] / "ILSVRC2012_val_00000042.JPEG").is_file()


def test_imagenet_checksums_are_checked(downloads, tmp_path):
    with pytest.raises(PrepareError, match=r"ILSVRC2012_img_val.tar: md5 [0-9a-f]{32} does not match "
                                           r"29b22e2961454d5413ddabcf34fc5622"):
        _prepare("imagenet-1k", downloads, tmp_path / "val", skip_checksums=False)
    assert not (tmp_path / "val").exists()


@pytest.mark.parametrize("name", ["awa2", "cub", "fgvc-aircraft"])
def test_class_datasets_as_the_loaders_read_them(name, downloads, tmp_path, monkeypatch):
    target = tmp_path / name
    said = _prepare(name, downloads, target)
    monkeypatch.setenv(standins.location_env(name), str(target))
    bench = full_sets.load_full(name)
    bench.check_no_leak()
    expected = {"awa2": (40, 10), "cub": (3, 50), "fgvc-aircraft": (50, 20)}[name]
    assert (len(bench.classes("seen")), len(bench.classes("unseen"))) == expected
    if name != "fgvc-aircraft":
        assert "split matches the manifest" in said
    assert prepare.check(name, target) == []


def test_a_split_file_of_another_version_is_refused(downloads, tmp_path):
    source = tmp_path / "awa2-downloads"
    shutil.copytree(downloads["awa2"], source)
    with warnings.catch_warnings(), zipfile.ZipFile(source / "xlsa17.zip", "a") as archive:
        warnings.simplefilter("ignore")  # "Duplicate name": the later entry of the same name is the one read
        archive.writestr("xlsa17/data/AWA2/testclasses.txt", "sheep\ndolphin\nzebra\n")
    with pytest.raises(PrepareError, match=r"testclasses.txt differs from splits.unseen of data_manifests/awa2.yaml"):
        prepare.prepare("awa2", source, tmp_path / "awa2", skip_checksums=True, say=lambda _: None)


def test_flame_recap_joins_captions_and_shards(downloads, tmp_path, monkeypatch):
    target = tmp_path / "flame"
    _prepare("flame-recap-cc3m", downloads, target)
    monkeypatch.setenv("FLAME_RECAP_CC3M_DIR", str(target))
    train = datasets.jsonl_pairs("flame-recap-cc3m", "train")
    long = {r["__key__"]: r["minicpm"]
            for r in json.loads(next(downloads["flame-recap-cc3m"].glob("flame-long-*")).read_text())}
    assert all(long[i] == c for i, c in zip(train.ids, train.captions))
    assert len(train) + len(datasets.jsonl_pairs("flame-recap-cc3m", "val")) == len(long)


@pytest.fixture
def small_caps(edited_manifests):
    """The real manifests with ImageNet+'s caps lowered to 1 seen and 2 unseen images per class."""
    edited_manifests("imagenet-plus", lambda m: m["images"].update(seen_per_class=1, unseen_per_class=2))


def test_imagenet_plus_capped_extraction_is_what_the_loader_reads(downloads, tmp_path, monkeypatch, small_caps):
    capped, every = tmp_path / "capped", tmp_path / "every"
    _prepare("imagenet-plus", downloads, capped)
    _prepare("imagenet-plus", downloads, every, options={"all_images": True})
    assert _record(capped)["counts"]["images"] == 1000 * 1 + 500 * 2
    assert _record(every)["counts"]["images"] == 1000 * 2 + 500 * 3
    benches = {}
    for name, folder in (("capped", capped), ("every", every)):
        monkeypatch.setenv("IMAGENET_PLUS_DIR", str(folder))
        benches[name] = full_sets.load_full("imagenet-plus")
    a, b = benches["capped"], benches["every"]
    assert a.class_keys == b.class_keys and a.image_sources[0].ids == b.image_sources[0].ids
    assert a.image_role == b.image_role and a.image_labels == b.image_labels
    assert sorted(a.class_keys[i] for i in a.classes("unseen")) == standins.unseen_synsets(500)


def test_a_stopped_preparation_leaves_nothing_half_done_and_resumes(downloads, tmp_path, monkeypatch):
    target = tmp_path / "awa2"
    calls = {"n": 0}
    original = prepare_sets.stage

    def stop_after_40(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 40:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(prepare_sets, "stage", stop_after_40)
    with pytest.raises(KeyboardInterrupt):
        _prepare("awa2", downloads, target)
    assert not target.exists() and (tmp_path / ".awa2.preparing").is_dir()
    problems = prepare.check("awa2", target)
    assert len(problems) == 1 and "an interrupted preparation is in" in problems[0]
    monkeypatch.setattr(prepare_sets, "stage", original)
    said = _prepare("awa2", downloads, target)
    assert "40 kept from an earlier run" in said and "110 files written" in said
    assert not (tmp_path / ".awa2.preparing").exists() and prepare.check("awa2", target) == []
    assert "already prepared" in _prepare("awa2", downloads, target)


def test_check_names_what_changed_and_the_command_that_fixes_it(downloads, tmp_path, monkeypatch):
    target = tmp_path / "cub"
    _prepare("cub", downloads, target)
    (target / "images.txt").write_text((target / "images.txt").read_text() + "\n")
    (problem,) = prepare.check("cub", target)
    assert "images.txt changed since it was prepared" in problem and "python -m provision.prepare cub" in problem
    missing = prepare.check("cub", tmp_path / "nowhere")
    assert missing[0].startswith(f"dataset cub: {tmp_path / 'nowhere'} does not exist: python -m provision.prepare cub")
    plus = tmp_path / "imagenet-plus"
    _prepare("imagenet-plus", downloads, plus)
    shutil.rmtree(next((plus / "unseen").iterdir()))
    (problem, *_) = prepare.check("imagenet-plus", plus)
    assert "holds 0 images, 3 were prepared" in problem


def test_changed_manifest_settings_ask_for_a_new_preparation(downloads, tmp_path, edited_manifests):
    target = tmp_path / "cc3m"
    _prepare("cc3m-llava", downloads, target)
    edited_manifests("cc3m-llava", lambda m: m["prepare"].update(seed=1))
    (problem,) = prepare.check("cc3m-llava", target)
    assert "prepared with other settings" in problem and "--force" in problem


def test_command_line(downloads, tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "provision.prepare", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)

    listed = cli("--list")
    assert (listed.returncode == 0
            and set(prepare.PREPARERS) == {line.split(":")[0] for line in listed.stdout.splitlines()})
    done = cli("fgvc-aircraft", "--from", str(downloads["fgvc-aircraft"]), "--to", str(tmp_path / "fgvc"),
               "--skip-checksums")
    assert done.returncode == 0 and "fgvc-aircraft: prepared at" in done.stdout, done.stderr
    assert cli("fgvc-aircraft", "--check", "--to", str(tmp_path / "fgvc")).returncode == 0
    wrong = cli("cub", "--from", str(downloads["fgvc-aircraft"]), "--to", str(tmp_path / "cub"))
    assert wrong.returncode == 1 and "CUB_200_2011.tgz not found in" in wrong.stderr
    assert "\n" not in wrong.stderr.strip()

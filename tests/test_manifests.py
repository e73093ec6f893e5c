"""Tests of corpora.manifests: checksums, missing-file messages, locations."""
from __future__ import annotations

import hashlib
import shutil

import pytest
import yaml

from corpora import manifests
from corpora.manifests import DatasetMissingError, dataset_file, location, manifest_hash

EMOJI_FILE = "emojibase-data-17.0.0.tgz"  # the smallest emoji tarball (~7 MB)


def test_every_manifest_names_where_to_get_and_put_its_data():
    names = sorted(p.stem for p in manifests.MANIFEST_DIR.glob("*.yaml"))
    assert {"emoji", "fashion-mnist"} <= set(names)
    for name in names:
        manifest = manifests.load(name)
        assert manifest["name"] == name
        assert str(manifest.get("obtain", "")).strip(), name
        assert manifest.get("location"), name
        for entry in manifest.get("files", []):
            assert entry["file"] and (entry.get("sha256") is None or len(entry["sha256"]) == 64)


def test_imagenet_manifest_classes_align():
    manifest = manifests.load("imagenet-1k")
    assert len(manifest["class_dirs"]) == len(manifest["classes"]) == 1000
    assert len(set(manifest["class_dirs"])) == 1000
    assert manifest["class_dirs"][0] == "n01440764" and manifest["classes"][0] == "tench"


def test_manifest_hash_is_its_content_not_its_prose(tmp_path, monkeypatch):
    """Comments and instructions (how to obtain or rebuild) keep the stored features; a checksum or a split moves
    them."""
    text = manifests.manifest_path("emoji").read_text(encoding="utf-8")
    monkeypatch.setattr(manifests, "MANIFEST_DIR", tmp_path)

    def hash_of(body: str) -> str:
        (tmp_path / "emoji.yaml").write_text(body, encoding="utf-8")
        manifests.load.cache_clear()
        return manifest_hash("emoji")

    try:
        base = hash_of(text)
        assert len(base) == 64 and base == hash_of("# a new comment\n" + text)
        assert base == hash_of(text.replace("made_by: python -m corpora.emoji", "made_by: python -m elsewhere"))
        assert base != hash_of(text.replace("fb5fd131", "fb5fd132"))  # a file's sha256 is identity
    finally:
        manifests.load.cache_clear()


def test_real_file_verifies():
    path = dataset_file("emoji", EMOJI_FILE)
    assert path == location("emoji") / EMOJI_FILE
    expected = {e["file"]: e["sha256"] for e in manifests.load("emoji")["files"]}[EMOJI_FILE]
    assert manifests.file_sha256(path) == expected


def test_one_flipped_byte_fails_the_checksum(tmp_path, monkeypatch):
    copy = tmp_path / EMOJI_FILE
    shutil.copy(dataset_file("emoji", EMOJI_FILE), copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    monkeypatch.setenv("EMOJI_DIR", str(tmp_path))
    with pytest.raises(DatasetMissingError) as info:
        dataset_file("emoji", EMOJI_FILE)
    message = str(info.value)
    assert "sha256" in message and str(copy) in message
    assert "npm pack" in message  # how to get it again
    assert "\n" not in message


def test_checksum_of_a_small_manifest(manifest_dir, tmp_path, monkeypatch):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    payload = bytes(range(256)) * 10
    (good / "blob.bin").write_bytes(payload)
    (bad / "blob.bin").write_bytes(payload[:-1] + b"\x00")  # same size, last byte changed
    manifest_dir("toy-files", {"name": "toy-files", "obtain": "Run get-toy.", "location": str(good),
                               "files": [{"file": "blob.bin", "sha256": hashlib.sha256(payload).hexdigest()},
                                         {"file": "free.bin", "sha256": None}]})
    assert dataset_file("toy-files", "blob.bin") == good / "blob.bin"
    (good / "free.bin").write_bytes(b"anything")  # no checksum in the manifest: not verified
    assert dataset_file("toy-files", "free.bin") == good / "free.bin"
    monkeypatch.setenv("TOY_FILES_DIR", str(bad))
    with pytest.raises(DatasetMissingError, match="sha256"):
        dataset_file("toy-files", "blob.bin")


def test_missing_file_says_where_to_get_and_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EMOJI_DIR", str(tmp_path))
    with pytest.raises(DatasetMissingError) as info:
        dataset_file("emoji", EMOJI_FILE)
    message = str(info.value)
    assert str(tmp_path / EMOJI_FILE) in message and "is missing" in message
    assert "npm pack" in message  # the manifest's `obtain`
    assert f"Put it in {tmp_path}" in message


def test_unknown_file_and_unknown_dataset():
    with pytest.raises(DatasetMissingError, match="not a file of dataset 'emoji'"):
        dataset_file("emoji", "emoji.tar")
    with pytest.raises(DatasetMissingError) as info:
        manifests.load("coco-2017")
    assert "coco-2017" in str(info.value) and "emoji" in str(info.value) and "fashion-mnist" in str(info.value)


def test_location_rules(manifest_dir, tmp_path, monkeypatch):
    from lib.core.paths import REPO_ROOT

    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path / "cache"))
    manifest_dir("toy-abs", {"name": "toy-abs", "obtain": "x", "location": str(tmp_path / "abs")})
    manifest_dir("toy-rel", {"name": "toy-rel", "obtain": "x", "location": "data/toy"})
    manifest_dir("toy-cache", {"name": "toy-cache", "obtain": "x", "location": ".cache/assets/npm"})
    assert location("toy-abs") == tmp_path / "abs"
    assert location("toy-rel") == REPO_ROOT / "data" / "toy"
    assert location("toy-cache") == tmp_path / "cache" / "assets" / "npm"  # follows the cache root
    monkeypatch.setenv("TOY_REL_DIR", str(tmp_path / "elsewhere"))  # env override: NAME_DIR, dashes -> _
    assert location("toy-rel") == tmp_path / "elsewhere"
    monkeypatch.setenv("TOY_REL_DIR", "")  # empty means unset
    assert location("toy-rel") == REPO_ROOT / "data" / "toy"


def test_env_override_of_a_real_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path))
    assert location("fashion-mnist") == tmp_path
    monkeypatch.delenv("FASHION_MNIST_DIR")
    assert location("fashion-mnist") == type(tmp_path)(yaml.safe_load(
        manifests.manifest_path("fashion-mnist").read_text())["location"])

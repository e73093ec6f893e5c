"""Tests of lib.core.models: resolving offline names, local folders and hub ids to a loader path and an identity."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lib.core import models
from lib.core.models import OFFLINE_MODELS, ModelNotFoundError, resolve


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
    from lib.core.config import ShareLockConfig, load

    small = load("sharelock", "small", ShareLockConfig)
    for m in small.vision:
        assert OFFLINE_MODELS[m.name].library == m.library and OFFLINE_MODELS[m.name].modality == "vision"
    for m in small.text:
        assert OFFLINE_MODELS[m.name].library == "transformers" and OFFLINE_MODELS[m.name].modality == "text"


@pytest.mark.parametrize("name", sorted(OFFLINE_MODELS))
def test_offline_models_resolve_to_a_loadable_path_with_a_stable_identity(name):
    model = OFFLINE_MODELS[name]
    resolved = resolve(name, model.library)
    again = resolve(name, model.library)
    assert resolved == again  # built once; the identity (part of every store key) is stable
    assert resolved.identity["name"] == name and len(resolved.identity["sha256"]) == 64
    assert set(resolved.identity["packages"]) == set(model.packages)
    path = Path(resolved.load_path)
    folder, facts = models.ensure_offline_model(name)
    assert facts["source_sha256"] == resolved.identity["sha256"]
    assert json.loads((folder / "source.json").read_text()) == facts
    if model.library == "timm":
        from lib.core.offline_vision import EFFICIENTNET_LITE0_ARCH

        assert path.is_file() and path.suffix == ".safetensors"
        assert resolved.timm_architecture == EFFICIENTNET_LITE0_ARCH
    else:
        assert (path / "config.json").is_file() and resolved.timm_architecture is None


def test_local_folder_gets_a_sha256_identity(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "model-00002.safetensors").write_bytes(b"second shard")
    (folder / "model-00001.safetensors").write_bytes(b"first shard")
    (folder / "config.json").write_text("{}")
    resolved = resolve(str(folder), "transformers")
    assert resolved.load_path == str(folder) and resolved.library == "transformers"
    assert resolved.identity["name"] == str(folder.resolve())
    assert resolved.identity["sha256"] == {name: _sha(folder / name) for name in
                                           ("config.json", "model-00001.safetensors", "model-00002.safetensors")}
    (folder / "model-00001.safetensors").write_bytes(b"retrained first shard")
    assert resolve(str(folder), "transformers").identity != resolved.identity  # new weights, new key


def test_local_file_gets_a_sha256_identity(tmp_path):
    weights = tmp_path / "vit.safetensors"
    weights.write_bytes(b"weights")
    resolved = resolve(str(weights), "timm")
    assert resolved.identity == {"name": str(weights.resolve()), "sha256": {weights.name: _sha(weights)}}
    assert resolved.load_path == str(weights)


def test_local_folder_without_safetensors_still_keys_on_its_weights(tmp_path):
    folder = tmp_path / "old-format"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"weights v1")
    before = resolve(str(folder), "transformers").identity
    (folder / "pytorch_model.bin").write_bytes(b"weights v2")
    assert resolve(str(folder), "transformers").identity != before


def test_hub_id_passes_through_with_its_revision():
    resolved = resolve("facebook/dinov2-large", "transformers", "a1b2c3")
    assert resolved.load_path == "facebook/dinov2-large" and resolved.library == "transformers"
    assert resolved.identity == {"name": "facebook/dinov2-large", "revision": "a1b2c3"}
    assert resolved.timm_architecture is None
    unpinned = resolve("meta-llama/Meta-Llama-3-8B", "transformers")
    assert unpinned.identity == {"name": "meta-llama/Meta-Llama-3-8B", "revision": "main"}
    assert resolve("facebook/dinov2-large", "transformers", "zzz").identity != resolved.identity

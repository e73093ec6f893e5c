"""Tests of lib.core.features: train-or-load. A store hit computes nothing and loads no text model (DESIGN.md §2)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import TEXT_MODELS, VISION_MODELS
from lib.core import features
from lib.core.config import TextModelConfig, VisionModelConfig
from lib.core.store import FeatureStore, spec_key

pytestmark = pytest.mark.usefixtures("single_thread")

TEXTS = ["grinning face", "man rowing boat: boat, canoe", "keycap: 7", "red apple", "dog face: dog, pet"]
SOURCE = {"dataset": "emoji", "split": "train", "manifest": "abc"}
TEXT_CFG = TextModelConfig(**TEXT_MODELS["minilm"])
VISION_CFG = VisionModelConfig(**VISION_MODELS["efficientnet"])


@pytest.fixture
def store(tmp_path):
    return FeatureStore(tmp_path / "store", dtype="float16", shard_rows=2)


@pytest.fixture
def text_cache(monkeypatch, minilm):
    """lib.core.features' text-encoder cache, seeded with the session's MiniLM (built with TEXT_CFG's fields)."""
    assert (minilm.name, minilm.pooling, minilm.layer, minilm.max_length, minilm.batch_size) == (
        TEXT_CFG.name, TEXT_CFG.pooling, TEXT_CFG.layer, TEXT_CFG.max_length, TEXT_CFG.batch_size)
    cache = {TEXT_CFG: minilm}
    monkeypatch.setattr(features, "_TEXT_ENCODERS", cache)
    return cache


def test_text_features_are_computed_once(store, text_cache, minilm, monkeypatch):
    first = features.text_features(store, TEXT_CFG, TEXTS, source=SOURCE)
    assert first.shards_computed == 3 and len(first) == 5 and first.dim == 384
    expected = minilm.encode(TEXTS, progress=False).numpy()
    np.testing.assert_allclose(first.numpy(), expected, atol=2e-3, rtol=2e-3)  # fp16 storage
    assert first.ids == [str(i) for i in range(5)]

    # A hit: nothing computed, and no text encoder is even constructed.
    empty: dict = {}
    monkeypatch.setattr(features, "_TEXT_ENCODERS", empty)

    def no_model(*args, **kwargs):
        raise AssertionError("a store hit must not build a text encoder")

    monkeypatch.setattr(features, "TextEncoder", no_model)
    second = features.text_features(store, TEXT_CFG, TEXTS, source=SOURCE)
    assert second.shards_computed == 0 and second.shards_reused == 3
    assert empty == {}
    assert second.key == first.key
    np.testing.assert_array_equal(second.numpy(), first.numpy())


def test_text_key_changes_with_texts_layer_and_source():
    base = spec_key(features.text_spec(TEXT_CFG, TEXTS, SOURCE))
    assert spec_key(features.text_spec(TEXT_CFG, list(TEXTS), dict(SOURCE))) == base  # stable
    changed = {
        "texts": features.text_spec(TEXT_CFG, TEXTS[:-1] + ["cat face"], SOURCE),
        "order": features.text_spec(TEXT_CFG, TEXTS[::-1], SOURCE),
        "layer": features.text_spec(TextModelConfig(**{**TEXT_MODELS["minilm"], "layer": 3}), TEXTS, SOURCE),
        "pooling": features.text_spec(TextModelConfig(**{**TEXT_MODELS["minilm"], "pooling": "cls"}), TEXTS, SOURCE),
        "max_length": features.text_spec(TextModelConfig(**{**TEXT_MODELS["minilm"], "max_length": 16}), TEXTS, SOURCE),
        "model": features.text_spec(TextModelConfig(**TEXT_MODELS["smollm2"]), TEXTS, SOURCE),
        "source": features.text_spec(TEXT_CFG, TEXTS, {**SOURCE, "split": "val"}),
    }
    keys = {name: spec_key(spec) for name, spec in changed.items()}
    assert base not in keys.values() and len(set(keys.values())) == len(keys)


def test_changed_texts_are_computed_again(store, text_cache, minilm):
    first = features.text_features(store, TEXT_CFG, TEXTS, source=SOURCE)
    other = TEXTS[:-1] + ["cat face"]
    second = features.text_features(store, TEXT_CFG, other, source=SOURCE)
    assert second.key != first.key and second.shards_computed == 3
    np.testing.assert_allclose(second.numpy()[-1], minilm.encode(["cat face"], progress=False)[0].numpy(),
                               atol=2e-3, rtol=2e-3)
    np.testing.assert_array_equal(second.numpy()[:-1], first.numpy()[:-1])


def test_text_layer_is_honoured(store, monkeypatch, minilm):
    """A layer-2 config computes hidden_states[2] features, under its own key."""
    cfg = TextModelConfig(**{**TEXT_MODELS["minilm"], "layer": 2})
    monkeypatch.setattr(features, "_TEXT_ENCODERS", {})
    got = features.text_features(store, cfg, TEXTS[:2], source=SOURCE)
    batch = minilm.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = minilm.model(**batch, output_hidden_states=True).hidden_states[2]
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(got.numpy(), expected, atol=2e-3, rtol=2e-3)
    assert got.spec["layer"] == 2


def test_image_features_are_computed_once(store, monkeypatch, efficientnet, emoji_images):
    monkeypatch.setattr(features, "_VISION_ENCODERS", {(VISION_CFG, "eager"): efficientnet})
    loads = []

    def load_image(i):
        loads.append(i)
        return emoji_images[i]

    ids = [f"img-{i}" for i in range(len(emoji_images))]
    first = features.image_features(store, VISION_CFG, load_image, ids, source=SOURCE)
    assert first.shards_computed == 3 and sorted(loads) == list(range(5))
    np.testing.assert_allclose(first.numpy(), efficientnet.encode(emoji_images, progress=False).numpy(),
                               atol=2e-3, rtol=2e-3)
    assert first.ids == ids
    loads.clear()
    second = features.image_features(store, VISION_CFG, load_image, ids, source=SOURCE)
    assert second.shards_computed == 0 and loads == []  # no image is even read
    assert second.key == first.key
    np.testing.assert_array_equal(second.numpy(), first.numpy())
    # other ids (another dataset version) or another source: another entry
    third = features.image_features(store, VISION_CFG, load_image, [f"x-{i}" for i in range(5)], source=SOURCE)
    assert third.key != first.key and third.shards_computed == 3
    fourth = features.image_features(store, VISION_CFG, load_image, ids, source={**SOURCE, "split": "val"})
    assert fourth.key != first.key


def test_image_key_includes_preprocessing(store, monkeypatch, efficientnet, emoji_images):
    monkeypatch.setattr(features, "_VISION_ENCODERS", {(VISION_CFG, "eager"): efficientnet})
    ids = ["a", "b"]
    base = features.image_features(store, VISION_CFG, emoji_images.__getitem__, ids, source=SOURCE)
    smaller = VisionModelConfig(**{**VISION_MODELS["efficientnet"], "image_size": 96})
    other = features.image_features(store, smaller, emoji_images.__getitem__, ids, source=SOURCE)
    assert other.key != base.key
    assert other.spec["preprocessing"]["input_size"] == [3, 96, 96]
    assert not np.allclose(other.numpy(), base.numpy(), atol=1e-2)


def test_release_encoders_empties_the_caches(monkeypatch):
    text, vision = {"t": 1}, {"v": 2}
    monkeypatch.setattr(features, "_TEXT_ENCODERS", text)
    monkeypatch.setattr(features, "_VISION_ENCODERS", vision)
    features.release_encoders()
    assert text == {} and vision == {}


def test_digest_depends_on_content_and_order():
    assert features.digest(["a", "b"]) == features.digest(("a", "b"))
    assert len({features.digest(x) for x in (["a", "b"], ["b", "a"], ["ab"], ["a", "b", ""])}) == 4

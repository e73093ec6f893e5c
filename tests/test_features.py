"""Tests of lib.core.features: one feature layer. A plan is materialised from the store; a hit computes
nothing and builds no text encoder; every field that changes the bytes changes the key."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import TEXT_MODELS, VISION_MODELS
from lib.core import features
from lib.core.config import TextModelConfig, VisionModelConfig
from lib.core.encoders import EncoderInputError
from lib.core.store import FeatureStore, spec_key

pytestmark = pytest.mark.usefixtures("single_thread")

TEXTS = ["grinning face", "man rowing boat: boat, canoe", "keycap: 7", "red apple", "dog face: dog, pet"]
SOURCE = {"dataset": "emoji", "split": "train", "manifest": "abc"}
TEXT_CFG = TextModelConfig(**TEXT_MODELS["minilm"])
VISION_CFG = VisionModelConfig(**VISION_MODELS["efficientnet"])


class Images:
    """The image-set interface a request reads: ``ids`` and ``load_image(i)`` (loads are counted)."""

    def __init__(self, images, ids, name="set"):
        self.images, self.ids, self.name, self.source, self.loads = images, list(ids), name, dict(SOURCE), []

    def load_image(self, i):
        self.loads.append(i)
        return self.images[i]


class NoEncoders(features.EncoderPool):
    def get(self, cfg, device="cpu", backend="eager"):
        raise AssertionError(f"a store hit must not build an encoder ({cfg.name})")


@pytest.fixture
def store(tmp_path):
    return FeatureStore(tmp_path / "store")


@pytest.fixture
def pool(minilm, efficientnet):
    """An encoder pool seeded with the session's models (built with TEXT_CFG's / VISION_CFG's fields)."""
    seeded = features.EncoderPool()
    seeded._encoders[(TEXT_CFG, "cpu", "eager")] = minilm
    seeded._encoders[(VISION_CFG, "cpu", "eager")] = efficientnet
    return seeded


def text_request(texts=TEXTS, cfg=TEXT_CFG, source=SOURCE, **kw):
    return features.text(cfg, texts, source=source, name="captions", shard_rows=2, **kw)


def test_text_features_are_computed_once_then_read(store, pool, minilm):
    first = features.materialise(store, [text_request()], pool=pool, release=False)
    assert first.report[0]["computed"] == 3 and first.report[0]["reused"] == 0
    np.testing.assert_allclose(first.tensor("captions").numpy(), minilm.encode(TEXTS, progress=False).numpy(),
                               atol=2e-3, rtol=2e-3)  # fp16 storage
    assert first["captions"].ids == [str(i) for i in range(5)]
    second = features.materialise(store, [text_request()], pool=NoEncoders())
    assert second.report[0]["computed"] == 0 and second.report[0]["reused"] == 3
    assert second["captions"].key == first["captions"].key
    assert torch.equal(second.tensor("captions"), first.tensor("captions"))
    assert second.counts() == (0, 3) and "0 computed now" in second.summary()


def test_every_field_that_changes_the_bytes_changes_the_key():
    base = spec_key(features.spec_of(text_request()))
    assert spec_key(features.spec_of(text_request(list(TEXTS), source=dict(SOURCE)))) == base  # stable
    minilm = TEXT_MODELS["minilm"]
    changed = {
        "texts": text_request(TEXTS[:-1] + ["cat face"]),
        "order": text_request(TEXTS[::-1]),
        "layer": text_request(cfg=TextModelConfig(**{**minilm, "layer": 3})),
        "pooling": text_request(cfg=TextModelConfig(**{**minilm, "pooling": "cls"})),
        "max_length": text_request(cfg=TextModelConfig(**{**minilm, "max_length": 16})),
        "batch_size": text_request(cfg=TextModelConfig(**{**minilm, "batch_size": 5})),
        "model dtype": text_request(cfg=TextModelConfig(**{**minilm, "dtype": "bfloat16"})),
        "model": text_request(cfg=TextModelConfig(**TEXT_MODELS["smollm2"])),
        "source": text_request(source={**SOURCE, "split": "val"}),
        "store dtype": text_request(dtype="float32"),
        "kind": features.text_tokens(TEXT_CFG, TEXTS, source=SOURCE, name="captions"),
    }
    keys = {name: spec_key(features.spec_of(r)) for name, r in changed.items()}
    assert base not in keys.values() and len(set(keys.values())) == len(keys), keys


def test_batch_size_changes_stored_values_so_it_is_in_the_key(minilm):
    """Why batch_size is part of the key: padding to the batch's longest text changes fp16 features."""
    texts = TEXTS * 3
    alone = np.concatenate([minilm.encode([t], progress=False).numpy() for t in texts]).astype(np.float16)
    batched = minilm.encode(texts, progress=False).numpy().astype(np.float16)
    assert alone.shape == batched.shape  # the values may or may not differ on this machine; the key differs anyway
    small = spec_key(features.spec_of(text_request(cfg=TextModelConfig(**{**TEXT_MODELS["minilm"], "batch_size": 1}))))
    assert small != spec_key(features.spec_of(text_request()))


def test_changed_texts_are_computed_again(store, pool, minilm):
    first = features.materialise(store, [text_request()], pool=pool, release=False)
    other = TEXTS[:-1] + ["cat face"]
    second = features.materialise(store, [text_request(other)], pool=pool, release=False)
    assert second["captions"].key != first["captions"].key and second.report[0]["computed"] == 3
    np.testing.assert_allclose(second.tensor("captions")[-1].numpy(),
                               minilm.encode(["cat face"], progress=False)[0].numpy(), atol=2e-3, rtol=2e-3)


def test_text_layer_is_honoured(store, minilm):
    cfg = TextModelConfig(**{**TEXT_MODELS["minilm"], "layer": 2})
    got = features.materialise(store, [text_request(TEXTS[:2], cfg=cfg)]).tensor("captions")
    batch = minilm.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = minilm.model(**batch, output_hidden_states=True).hidden_states[2]
    mask = batch["attention_mask"].unsqueeze(-1).float()
    np.testing.assert_allclose(got.numpy(), ((hidden * mask).sum(1) / mask.sum(1)).numpy(), atol=2e-3, rtol=2e-3)


def test_an_empty_text_is_reported_by_its_dataset_row(store, pool):
    texts = ["a cat", "a dog", "a bird", "   ", "a fish"]
    with pytest.raises(EncoderInputError, match=r"text row 3 is empty"):
        features.materialise(store, [text_request(texts)], pool=pool, release=False)


def test_image_features_are_computed_once(store, pool, efficientnet, emoji_images):
    images = Images(emoji_images, [f"img-{i}" for i in range(5)])
    request = features.image(VISION_CFG, images, shard_rows=2)
    first = features.materialise(store, [request], pool=pool, release=False)
    assert first.report[0]["computed"] == 3 and sorted(images.loads) == list(range(5))
    np.testing.assert_allclose(first.tensor(request.name).numpy(),
                               efficientnet.encode(emoji_images, progress=False).numpy(), atol=2e-3, rtol=2e-3)
    images.loads.clear()
    second = features.materialise(store, [features.image(VISION_CFG, images, shard_rows=2)], pool=pool, release=False)
    assert second.report[0]["computed"] == 0 and images.loads == []  # no image is even read
    other_ids = Images(emoji_images, [f"x-{i}" for i in range(5)])
    third = features.materialise(store, [features.image(VISION_CFG, other_ids, shard_rows=2)], pool=pool, release=False)
    assert third[request.name].key != first[request.name].key


def test_image_key_includes_preprocessing_and_backend(pool, emoji_images):
    images = Images(emoji_images, ["a", "b"])
    base = features.spec_of(features.image(VISION_CFG, images), pool)
    smaller = VisionModelConfig(**{**VISION_MODELS["efficientnet"], "image_size": 96})
    other = features.spec_of(features.image(smaller, images), pool)
    assert spec_key(other) != spec_key(base) and other["preprocessing"]["input_size"] == [3, 96, 96]


def test_plan_names_are_unique_and_duplicates_must_agree():
    plan = features.Plan([text_request()])
    assert plan.add(text_request()) is plan["captions"] and len(plan) == 1  # the same entry twice: kept once
    with pytest.raises(ValueError, match="both named 'captions'"):
        plan.add(text_request(TEXTS[:2]))
    plan.add(features.text(TEXT_CFG, TEXTS[:2], source=SOURCE, name="prompts"))
    assert plan.names() == ["captions", "prompts"]
    assert plan.select(["prom*"]).names() == ["prompts"] and plan.select(None) is plan


def test_a_request_is_checked_when_made():
    with pytest.raises(TypeError, match="needs a VisionModelConfig"):
        features.FeatureRequest("x", "image", TEXT_CFG, SOURCE, images=Images([], []))
    with pytest.raises(ValueError, match="needs a list of texts"):
        features.FeatureRequest("x", "text", TEXT_CFG, SOURCE, texts="one string")
    with pytest.raises(ValueError, match="2 ids for 3 inputs"):
        features.text(TEXT_CFG, ["a", "b", "c"], source=SOURCE, name="x", ids=["1", "2"])


def test_facet_features_come_back_as_n_by_k(store):
    from lib.core.facets import FacetConfig

    cfg = FacetConfig(name="offline/smollm2-135m-instruct", facets=("this image description", "the main object"))

    class Fake:
        dim = 4

        def encode(self, captions):  # [N, K, D], facet k of caption i = i * 10 + k
            n = len(captions)
            return torch.arange(n * 2, dtype=torch.float32).view(n, 2, 1).expand(n, 2, 4) * 1.0

    pool = features.EncoderPool()
    pool._encoders[(cfg, "cpu", "eager")] = Fake()
    request = features.facets(cfg, ["a", "b", "c"], source=SOURCE, name="facets", shard_rows=4)
    spec = {"fake": True}
    found = features._compute(store, request, spec, pool, "cpu", 0, 1, False)
    out = found.tensor().view(3, 2, -1)
    assert out.shape == (3, 2, 4) and found.ids[:3] == ["0#0", "0#1", "1#0"]


def test_release_empties_the_pool():
    pool = features.EncoderPool()
    pool._encoders[("t",)] = 1
    pool.release()
    assert pool.loaded() == []


def test_digest_depends_on_content_and_order():
    assert features.digest(["a", "b"]) == features.digest(("a", "b"))
    assert len({features.digest(x) for x in (["a", "b"], ["b", "a"], ["ab"], ["a", "b", ""])}) == 4

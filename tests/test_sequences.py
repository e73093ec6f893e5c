"""Tests of lib.core.sequences: ragged per-token features in the store, never padded on disk (one row per token plus
each item's length), requested as ``lib.core.features.text_tokens`` / ``image_tokens`` and materialised."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import TEXT_MODELS, VISION_MODELS
from lib.core import features
from lib.core.config import TextModelConfig, VisionModelConfig
from lib.core.sequences import SequenceFeatures, pad_batch, sequence_features, trim_padding
from lib.core.store import FeatureStore, StoreError

DIM = 6
LENGTHS = [3, 1, 9, 4, 7, 2, 5, 8]
IDS = [f"item{i}" for i in range(len(LENGTHS))]
SPEC = {"kind": "test_sequence", "version": 1}


def _seqs(lengths=LENGTHS, dim=DIM):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, dim)).astype(np.float32) for n in lengths]


class Calls:
    """lengths/compute callbacks that record which item rows they were asked for."""

    def __init__(self, seqs):
        self.seqs, self.length_rows, self.compute_rows = seqs, [], []

    def lengths(self, rows):
        self.length_rows.append(rows.tolist())
        return [len(self.seqs[i]) for i in rows]

    def compute(self, rows):
        self.compute_rows.append(rows.tolist())
        return [torch.from_numpy(self.seqs[i]) for i in rows]


def _build(store, seqs=None, **kw) -> tuple[SequenceFeatures, Calls]:
    calls = Calls(seqs or _seqs())
    return sequence_features(store, SPEC, IDS, calls.lengths, calls.compute, progress=False, **kw), calls


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_trip_with_ragged_lengths_across_shards(tmp_path, dtype):
    seqs = _seqs()
    feats, calls = _build(FeatureStore(tmp_path, dtype=dtype), seqs, shard_tokens=7)  # items straddle shards
    assert len(feats) == 8 and feats.dim == DIM and feats.num_tokens == sum(LENGTHS)
    assert feats.lengths.tolist() == LENGTHS and feats.ids == IDS
    assert feats.shards_computed == -(-sum(LENGTHS) // 7)
    tol = dict(atol=0, rtol=0) if dtype == "float32" else dict(atol=2e-3, rtol=2e-3)
    for i, s in enumerate(seqs):
        np.testing.assert_allclose(feats.sequence(i).astype(np.float32), s, **tol)
    x, mask = feats.batch([2, 1, 5])
    assert x.shape == (3, 9, DIM) and mask.sum(1).tolist() == [9, 1, 2]
    np.testing.assert_allclose(x[1, :1].numpy(), seqs[1], **tol)
    assert (x[1, 1:] == 0).all() and not mask[1, 1:].any()
    padded, pmask = feats.padded()
    assert padded.dtype == torch.float16 and padded.shape == (8, 9, DIM) and pmask.sum().item() == sum(LENGTHS)
    means = np.stack([s.mean(0) for s in seqs])
    np.testing.assert_allclose(feats.pooled("mean").numpy(), means, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(feats.pooled("first").numpy(), np.stack([s[0] for s in seqs]), atol=2e-3, rtol=2e-3)
    rows = [r for r, _, _ in feats.batches(3)]
    assert [r.tolist() for r in rows] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_no_padding_on_disk(tmp_path):
    lengths = [1, 2, 60, 3, 1, 4, 2, 5]  # one long item: padding would store 8 x 60 rows
    seqs = _seqs(lengths, dim=32)
    store = FeatureStore(tmp_path, dtype="float16")
    feats, _ = _build(store, seqs, shard_tokens=16)
    token_files = list(feats.tokens.path.glob("shard-*.npy"))
    data_bytes = sum(p.stat().st_size for p in token_files)
    header = 128  # the .npy header of each shard
    assert data_bytes == sum(lengths) * 32 * 2 + header * len(token_files)
    everything = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert everything < 0.5 * len(lengths) * max(lengths) * 32 * 2  # well under the padded size


def test_reopen_is_a_cache_hit(tmp_path):
    store = FeatureStore(tmp_path)
    first, _ = _build(store)

    def boom(rows):
        raise AssertionError("a cache hit must compute nothing")

    again = sequence_features(store, SPEC, IDS, boom, boom, progress=False)
    assert again.shards_computed == 0 and again.key == first.key
    np.testing.assert_array_equal(again.padded()[0].numpy(), first.padded()[0].numpy())
    other = sequence_features(store, {**SPEC, "version": 2}, IDS, Calls(_seqs()).lengths,
                              Calls(_seqs()).compute, progress=False)
    assert other.key != first.key  # the spec keys the entry


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_token_shard_is_a_clear_error_then_repaired(tmp_path):
    store = FeatureStore(tmp_path, verify="always")
    good, _ = _build(store, shard_tokens=10)
    expected = good.padded()[0].numpy()
    _flip_last_byte(good.tokens.path / "shard-00002.npy")
    reopened, _ = _build(store, shard_tokens=10)  # the manifest is intact: a hit, checked when read
    with pytest.raises(StoreError, match=r"shard 2 of entry .*fails its checksum.*repair\(\)"):
        reopened.padded()
    assert reopened.repair() == {"lengths": [], "tokens": [2]}
    fixed, calls = _build(store, shard_tokens=10)
    assert fixed.shards_computed == 1 and calls.length_rows == []
    np.testing.assert_array_equal(fixed.padded()[0].numpy(), expected)


def test_lengths_and_encoder_must_agree(tmp_path):
    seqs = _seqs()
    with pytest.raises(StoreError, match="item 0 .*has 3 token rows but its stored length is 4"):
        sequence_features(FeatureStore(tmp_path), SPEC, IDS, lambda rows: [len(seqs[i]) + (i == 0) for i in rows],
                          lambda rows: [seqs[i] for i in rows], progress=False)
    with pytest.raises(StoreError, match="positive integer"):
        sequence_features(FeatureStore(tmp_path), {"x": 1}, IDS, lambda rows: [0] * len(rows),
                          lambda rows: [seqs[i] for i in rows], progress=False)
    with pytest.raises(StoreError, match="'part'"):
        sequence_features(FeatureStore(tmp_path), {"part": 1}, IDS, len, len, progress=False)


def test_two_ranks_together_equal_one_process(tmp_path):
    seqs = _seqs()
    one, _ = _build(FeatureStore(tmp_path / "a"), seqs, shard_tokens=5)
    store = FeatureStore(tmp_path / "b")
    c0, c1 = Calls(seqs), Calls(seqs)
    assert sequence_features(store, SPEC, IDS, c0.lengths, c0.compute, shard_tokens=5, rank=0, world_size=2,
                             progress=False) is None
    both = sequence_features(store, SPEC, IDS, c1.lengths, c1.compute, shard_tokens=5, rank=1, world_size=2,
                             progress=False)
    np.testing.assert_array_equal(both.padded()[0].numpy(), one.padded()[0].numpy())


def test_pad_batch_and_trim_padding():
    x, mask = pad_batch([np.ones((2, 3)), torch.zeros(4, 3)], max_len=6)
    assert x.shape == (2, 6, 3) and mask.tolist() == [[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    tx, tm = trim_padding(x, mask)
    assert tx.shape == (2, 4, 3) and torch.equal(tm, mask[:, :4])
    with pytest.raises(ValueError, match="shorter"):
        pad_batch([np.ones((5, 3))], max_len=2)
    with pytest.raises(ValueError, match="one width"):
        pad_batch([np.ones((5, 3)), np.ones((5, 4))])


# --- real models -----------------------------------------------------------------------------------------

TEXTS = ["grinning face", "man rowing boat: boat, canoe, rowing, water sports", "red apple"]
SOURCE = {"dataset": "emoji", "split": "test"}


def _pool(cfg, encoder, backend=None):
    """An encoder pool that already holds the session's encoder (no second model load)."""
    pool = features.EncoderPool()
    pool._encoders[(cfg, "cpu", "eager") if backend is None else (cfg, "cpu", backend)] = encoder
    return pool


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_minilm_tokens_mean_pool_to_lib_text_feature(tmp_path, minilm):
    cfg = TextModelConfig(**TEXT_MODELS["minilm"])
    store, pool = FeatureStore(tmp_path), _pool(cfg, minilm)
    request = features.text_tokens(cfg, TEXTS, source=SOURCE, name="text-tokens:minilm:test")
    seqs = features.materialise(store, [request], pool=pool, release=False)["text-tokens:minilm:test"]
    assert isinstance(seqs, SequenceFeatures) and seqs.dtype == "float16"
    assert seqs.lengths.tolist() == [len(t) for t in minilm.tokenize(TEXTS)] and seqs.dim == 384
    pooled = minilm.encode(TEXTS, progress=False)  # lib's pooled feature: mean over real tokens
    torch.testing.assert_close(seqs.pooled("mean"), pooled, atol=3e-3, rtol=3e-3)
    again = features.materialise(store, [request], pool=pool, release=False)
    assert again.counts() == (0, again.counts()[1]) and again["text-tokens:minilm:test"].shards_computed == 0


@pytest.mark.slow
@pytest.mark.usefixtures("single_thread")
def test_dinov2_patches_first_token_is_lib_image_feature(tmp_path, dinov2, emoji_images):
    cfg = VisionModelConfig(**VISION_MODELS["dinov2"])
    images = SimpleNamespace(name="two", ids=["a", "b"], load_image=lambda i: emoji_images[:2][i], source=SOURCE)
    store, pool = FeatureStore(tmp_path), _pool(cfg, dinov2)
    plan = features.Plan([features.image_tokens(cfg, images, tokens="all", name="all"),
                          features.image_tokens(cfg, images, tokens="patches", name="patches")])
    found = features.materialise(store, plan, pool=pool, release=False)
    seqs, patches = found["all"], found["patches"]
    assert seqs.lengths.tolist() == [1 + (112 // 14) ** 2] * 2  # CLS + 8 x 8 patches
    pooled = dinov2.encode(emoji_images[:2], progress=False)  # DINOv2's pooled feature is the (normed) CLS token
    torch.testing.assert_close(seqs.pooled("first"), pooled, atol=5e-3, rtol=5e-3)
    assert patches.lengths.tolist() == [64, 64] and patches.key != seqs.key  # the official code's x[:, 1:, :]
    np.testing.assert_array_equal(patches.sequence(1), seqs.sequence(1)[1:])
    assert features.image_tokens(cfg, images).tokens == "patches"  # the default

"""Tests of lib.core.store, the cached-feature store."""
import hashlib
import json
import os

import numpy as np
import pytest
import torch
import xxhash

from lib.core.store import CachedFeatures, FeatureStore, StoreError, spec_key

N, DIM, SR = 10, 6, 4  # three shards: rows 0-3, 4-7, 8-9
IDS = [f"img-{i:03d}" for i in range(N)]
SPEC = {"model": "facebook/dinov2-small", "revision": "abc123", "layer": -1, "pooling": "cls",
        "dtype": "float16", "preprocess": {"size": 224, "crop": "center"}, "manifest_sha256": "f00d"}


def features(rows: np.ndarray) -> np.ndarray:
    """Deterministic features; column 0 is the row index, so row order is checkable."""
    rows = np.asarray(rows)
    x = np.sin(rows[:, None] * 0.37 + np.arange(DIM)[None, :] * 1.3).astype(np.float32) * 3.1
    x[:, 0] = rows
    return x


class Recorder:
    """compute() that records which shards (by first row) it was called for, optionally failing."""

    def __init__(self, fn=features, fail_at=None):
        self.fn, self.fail_at, self.starts = fn, fail_at, []

    def __call__(self, rows):
        assert rows.dtype == np.int64
        if self.fail_at is not None and rows[0] == self.fail_at:
            raise RuntimeError("simulated crash")
        self.starts.append(int(rows[0]))
        return self.fn(rows)


def never(rows):
    raise AssertionError("compute must not be called on a cache hit")


def manifest(store, spec=SPEC):
    return json.loads((store.entry_dir(spec) / "manifest.json").read_text())


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_round_trip_is_bit_exact_and_in_ids_order(tmp_path, dtype, as_tensor):
    store = FeatureStore(tmp_path, dtype=dtype, shard_rows=SR)
    fn = (lambda r: torch.from_numpy(features(r)).double()) if as_tensor else features
    res = store.get_or_compute(SPEC, IDS, Recorder(fn), progress=False)
    expected = features(np.arange(N)).astype(dtype)
    got = res.numpy(dtype=np.dtype(dtype))
    assert got.dtype == np.dtype(dtype) and got.tobytes() == expected.tobytes()
    assert np.array_equal(res.numpy(), expected.astype(np.float32))
    assert np.array_equal(res.numpy()[:, 0], np.arange(N))  # row i is ids[i]
    assert torch.equal(res.tensor(), torch.from_numpy(expected.astype(np.float32)))
    assert res.tensor(torch.float16).dtype == torch.float16
    assert (len(res), res.dim, res.ids, res.dtype) == (N, DIM, IDS, dtype)
    assert (res.shards_computed, res.shards_reused) == (3, 0)
    assert res.key == spec_key(SPEC) and res.spec == SPEC
    m = manifest(store)
    assert (m["n_rows"], m["dim"], m["dtype"], m["shard_rows"]) == (N, DIM, dtype, SR)
    assert [sc["rows"] for sc in m["shards"]] == [[0, 4], [4, 8], [8, 10]]
    for sc in m["shards"]:  # the sidecar checksum is the file's, named by its algorithm
        npy = store.entry_dir(SPEC) / f"shard-{sc['index']:05d}.npy"
        assert xxhash.xxh3_128_hexdigest(npy.read_bytes()) == sc["xxh3_128"] and "sha256" not in sc
    assert store.entry_dir(SPEC).parent.name == res.key[:2]


def test_bfloat16_tensor_output_is_accepted(tmp_path):
    store = FeatureStore(tmp_path, dtype="float32", shard_rows=SR)
    res = store.get_or_compute(SPEC, IDS, lambda r: torch.from_numpy(features(r)).bfloat16(), progress=False)
    expected = torch.from_numpy(features(np.arange(N))).bfloat16().float()
    assert torch.equal(res.tensor(), expected)


def test_second_call_is_a_pure_hit(tmp_path):
    first = FeatureStore(tmp_path, shard_rows=SR).get_or_compute(SPEC, IDS, features, progress=False)
    store = FeatureStore(tmp_path, shard_rows=SR)  # a fresh object: state lives on disk only
    assert store.has(SPEC) and not store.has({**SPEC, "layer": -2})
    hit = store.get_or_compute(SPEC, IDS, never, progress=False)
    assert (hit.shards_computed, hit.shards_reused) == (0, 3)
    assert hit.numpy().tobytes() == first.numpy().tobytes()
    assert store.open(SPEC).numpy().tobytes() == first.numpy().tobytes()


@pytest.mark.parametrize("k", [1, 2])
def test_resume_computes_only_unfinished_shards_and_matches_uninterrupted(tmp_path, k):
    store = FeatureStore(tmp_path / "a", shard_rows=SR)
    crashing = Recorder(fail_at=k * SR)
    with pytest.raises(RuntimeError, match="simulated crash"):
        store.get_or_compute(SPEC, IDS, crashing, progress=False)
    assert crashing.starts == [s * SR for s in range(k)]
    assert not store.has(SPEC)
    with pytest.raises(StoreError, match="get_or_compute"):
        store.open(SPEC)
    again = Recorder()
    res = store.get_or_compute(SPEC, IDS, again, progress=False)
    assert again.starts == [s * SR for s in range(k, 3)]
    assert (res.shards_computed, res.shards_reused) == (3 - k, k)
    ref = FeatureStore(tmp_path / "b", shard_rows=SR).get_or_compute(SPEC, IDS, features, progress=False)
    assert res.numpy(np.float16).tobytes() == ref.numpy(np.float16).tobytes()
    assert [sc["xxh3_128"] for sc in res.shards] == [sc["xxh3_128"] for sc in ref.shards]


def test_spec_key_order_independent_and_sensitive_to_every_field():
    reordered = dict(reversed(list(SPEC.items())))
    reordered["preprocess"] = {"crop": "center", "size": 224}
    assert spec_key(reordered) == spec_key(SPEC)
    canonical = json.dumps(SPEC, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert spec_key(SPEC) == hashlib.sha256(canonical.encode()).hexdigest()
    keys = {spec_key(SPEC)}
    for field in SPEC:
        keys.add(spec_key({**SPEC, field: "changed"}))
    keys.add(spec_key({**SPEC, "preprocess": {"size": 256, "crop": "center"}}))
    keys.add(spec_key({k: v for k, v in SPEC.items() if k != "dtype"}))
    assert len(keys) == len(SPEC) + 3


@pytest.mark.parametrize("bad, field", [
    ({"layer": np.int64(3)}, "layer"),
    ({"preprocess": {"mean": [0.5, np.float32(0.4)]}}, "mean"),
    ({"path": __import__("pathlib").Path("/x")}, "path"),
    ({"temperature": float("nan")}, "temperature"),
])
def test_spec_key_rejects_non_json_values_naming_the_field(bad, field):
    with pytest.raises(StoreError, match=field):
        spec_key({**SPEC, **bad})


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_shard_is_reported_then_repaired(tmp_path):
    store = FeatureStore(tmp_path, shard_rows=SR, verify="always")
    good = store.get_or_compute(SPEC, IDS, features, progress=False).numpy()
    _flip_last_byte(store.entry_dir(SPEC) / "shard-00001.npy")
    with pytest.raises(StoreError, match=r"shard 1 of entry .*checksum \(xxh3_128\).*lib\.core\.store repair"):
        store.open(SPEC).numpy()
    # "once" re-checks a file that changed since it was verified; "never" trusts it
    with pytest.raises(StoreError, match="shard 1"):
        FeatureStore(tmp_path, shard_rows=SR, verify="once").open(SPEC).shard_arrays()
    assert not np.array_equal(FeatureStore(tmp_path, shard_rows=SR, verify="never").open(SPEC).numpy(), good)
    assert store.repair(SPEC) == [1]
    assert not store.has(SPEC)
    again = Recorder()
    res = store.get_or_compute(SPEC, IDS, again, progress=False)
    assert again.starts == [SR] and res.shards_computed == 1
    assert res.numpy().tobytes() == good.tobytes()
    assert store.repair(SPEC) == []


def test_truncated_shard_fails_read_even_without_hashing_and_resume_recomputes_it(tmp_path):
    store = FeatureStore(tmp_path, shard_rows=SR, verify="never")
    good = store.get_or_compute(SPEC, IDS, features, progress=False).numpy()
    npy = store.entry_dir(SPEC) / "shard-00002.npy"
    npy.write_bytes(npy.read_bytes()[:-3])
    with pytest.raises(StoreError, match="shard 2 .*truncated"):
        store.open(SPEC).numpy()
    (store.entry_dir(SPEC) / "manifest.json").unlink()  # an interrupted, incomplete entry
    again = Recorder()
    with pytest.warns(UserWarning, match="shard 2"):
        res = store.get_or_compute(SPEC, IDS, again, progress=False)
    assert again.starts == [2 * SR]
    assert res.numpy().tobytes() == good.tobytes()


def test_leftover_temp_files_are_ignored_and_cleaned(tmp_path):
    store = FeatureStore(tmp_path, shard_rows=SR)
    entry = store.entry_dir(SPEC)
    entry.mkdir(parents=True)
    junk = entry / ".shard-00000.npy.999.deadbeef.tmp"
    junk.write_bytes(b"half a file")
    rec = Recorder()
    res = store.get_or_compute(SPEC, IDS, rec, progress=False)
    assert rec.starts == [0, 4, 8] and not junk.exists()
    assert not list(entry.glob("*.tmp")) and not list(entry.glob(".*"))
    assert np.array_equal(res.numpy(), features(np.arange(N)).astype(np.float16).astype(np.float32))


def test_different_ids_for_the_same_spec_is_an_error(tmp_path):
    store = FeatureStore(tmp_path, shard_rows=SR)
    store.get_or_compute(SPEC, IDS, features, progress=False)
    for other in (IDS[::-1], IDS[:-1], IDS + ["img-999"]):
        with pytest.raises(StoreError, match="ids.*manifest hash"):
            store.get_or_compute(SPEC, other, never, progress=False)
    partial = FeatureStore(tmp_path / "p", shard_rows=SR)
    with pytest.raises(RuntimeError):
        partial.get_or_compute(SPEC, IDS, Recorder(fail_at=SR), progress=False)
    with pytest.raises(StoreError, match="different ids"):
        partial.get_or_compute(SPEC, IDS[::-1], never, progress=False)


def test_float16_overflow_is_an_error_and_writes_nothing_for_the_shard(tmp_path):
    def big_in_shard_1(rows):
        x = features(rows)
        if rows[0] == SR:
            x[0, 1] = 1e6
        return x
    store = FeatureStore(tmp_path, dtype="float16", shard_rows=SR)
    with pytest.raises(StoreError, match="overflow float16 in entry .*float32"):
        store.get_or_compute(SPEC, IDS, big_in_shard_1, progress=False)
    entry = store.entry_dir(SPEC)
    assert (entry / "shard-00000.json").exists()
    assert not (entry / "shard-00001.npy").exists() and not (entry / "shard-00001.json").exists()
    assert not list(entry.glob(".*")) and not store.has(SPEC)
    wide = FeatureStore(tmp_path, dtype="float32", shard_rows=SR)
    res = wide.get_or_compute({**SPEC, "dtype": "float32"}, IDS, big_in_shard_1, progress=False)
    assert res.numpy()[SR, 1] == 1e6


def test_compute_must_return_finite_rows_by_dim(tmp_path):
    store = FeatureStore(tmp_path, shard_rows=SR)
    with pytest.raises(StoreError, match=r"shape \(3, 6\).*\(4, dim\)"):
        store.get_or_compute(SPEC, IDS, lambda r: features(r)[:3], progress=False)
    with pytest.raises(StoreError, match="nan/inf"):
        store.get_or_compute(SPEC, IDS, lambda r: features(r) * np.nan, progress=False)
    with pytest.raises(StoreError, match="float features"):
        store.get_or_compute(SPEC, IDS, lambda r: np.ones((len(r), 2), dtype=np.int64), progress=False)


def test_store_dtype_mismatch_with_existing_entry_is_an_error(tmp_path):
    FeatureStore(tmp_path, dtype="float16", shard_rows=SR).get_or_compute(SPEC, IDS, features, progress=False)
    with pytest.raises(StoreError, match="stored as float16.*dtype"):
        FeatureStore(tmp_path, dtype="float32", shard_rows=SR).get_or_compute(SPEC, IDS, never, progress=False)


def test_two_ranks_together_equal_one_process(tmp_path):
    store = FeatureStore(tmp_path / "ddp", shard_rows=SR)
    r0, r1 = Recorder(), Recorder()
    assert store.get_or_compute(SPEC, IDS, r0, rank=0, world_size=2, progress=False) is None
    assert r0.starts == [0, 8] and not store.has(SPEC)
    res = store.get_or_compute(SPEC, IDS, r1, rank=1, world_size=2, progress=False)
    assert r1.starts == [4]
    assert isinstance(res, CachedFeatures) and (res.shards_computed, res.shards_reused) == (1, 2)
    ref = FeatureStore(tmp_path / "one", shard_rows=SR).get_or_compute(SPEC, IDS, features, progress=False)
    assert res.numpy(np.float16).tobytes() == ref.numpy(np.float16).tobytes()
    assert res.shards == ref.shards
    assert store.get_or_compute(SPEC, IDS, never, rank=0, world_size=2, progress=False).shards_computed == 0
    with pytest.raises(StoreError, match="rank"):
        store.get_or_compute(SPEC, IDS, never, rank=2, world_size=2)


def test_shard_arrays_are_read_only_memmaps(tmp_path):
    res = FeatureStore(tmp_path, shard_rows=SR).get_or_compute(SPEC, IDS, features, progress=False)
    arrays = res.shard_arrays()
    assert len(arrays) == 3 and all(isinstance(a, np.memmap) for a in arrays)
    assert [a.shape for a in arrays] == [(4, DIM), (4, DIM), (2, DIM)]
    assert not arrays[0].flags.writeable


def test_progress_defaults_off_under_ci(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CI", "true")
    FeatureStore(tmp_path, shard_rows=SR).get_or_compute(SPEC, IDS, features, desc="dinov2")
    assert "dinov2" not in capsys.readouterr().err
    FeatureStore(tmp_path, shard_rows=SR).get_or_compute({**SPEC, "layer": 3}, IDS, features,
                                                         desc="dinov2", progress=True)
    assert "dinov2" in capsys.readouterr().err


def test_bad_settings_are_errors(tmp_path):
    for kwargs in ({"dtype": "int8"}, {"verify": "sometimes"}, {"shard_rows": 0}):
        with pytest.raises(StoreError):
            FeatureStore(tmp_path, **kwargs)
    with pytest.raises(StoreError, match="nothing to repair"):
        FeatureStore(tmp_path).repair(SPEC)
    assert os.listdir(tmp_path) == []


def test_entries_with_sha256_sidecars_are_still_read_verified_and_repaired(tmp_path, monkeypatch):
    """Stores written before XXH3-128: each sidecar names its algorithm, and reads use the one it names."""
    from lib.core import store_files

    monkeypatch.setattr(store_files, "STORE_ALGORITHM", "sha256")
    old = FeatureStore(tmp_path, shard_rows=SR).get_or_compute(SPEC, IDS, features, progress=False)
    monkeypatch.undo()
    entry = old.path
    for sc in manifest(FeatureStore(tmp_path)).get("shards"):
        assert set(sc) == {"index", "rows", "shape", "dtype", "sha256", "nbytes"}  # the format of before
        npy = entry / f"shard-{sc['index']:05d}.npy"
        assert hashlib.sha256(npy.read_bytes()).hexdigest() == sc["sha256"]
    good = old.numpy()
    for verify in ("always", "once", "never"):
        store_files.verified_files.clear()
        assert FeatureStore(tmp_path, verify=verify).open(SPEC).numpy().tobytes() == good.tobytes()
    _flip_last_byte(entry / "shard-00000.npy")
    with pytest.raises(StoreError, match=r"shard 0 .*fails its checksum \(sha256\)"):
        FeatureStore(tmp_path, verify="always").open(SPEC).numpy()
    store = FeatureStore(tmp_path, shard_rows=SR, verify="always")
    assert store.repair(SPEC) == [0]
    res = store.get_or_compute(SPEC, IDS, Recorder(), progress=False)
    assert res.shards_computed == 1 and res.numpy().tobytes() == good.tobytes()
    assert [next(a for a in ("xxh3_128", "sha256") if a in sc) for sc in res.shards] == ["xxh3_128", "sha256", "sha256"]


@pytest.mark.parametrize("keys", [{}, {"sha256": "0" * 64, "xxh3_128": "0" * 32}, {"md5": "0" * 32}])
def test_a_sidecar_names_exactly_one_known_checksum(keys):
    from lib.core.store_files import check_sidecar

    sidecar = {"index": 0, "rows": [0, 4], "shape": [4, DIM], "dtype": "float16", "nbytes": 176, **keys}
    with pytest.raises(ValueError):
        check_sidecar(sidecar, 0)

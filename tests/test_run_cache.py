"""The run cache (lib.core.run_cache): a hit returns exactly what training would, any input change misses, a damaged
entry is retrained with a warning naming it, and nothing is cached unless LIB_RUN_CACHE=1."""
import lib  # noqa: F401

import warnings

import pytest
import torch

from lib.core import run_cache
from lib.core.config import HeadConfig, LossConfig, TrainSettings
from lib.core.train import fit, seed_everything
from lib.methods.sharelock import ShareLock

SETTINGS = TrainSettings(steps=12, batch_size=16, lr=1e-2, eval_every=4, warmup_steps=2, patience=None)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LIB_RUN_CACHE", "1")
    return tmp_path / "runs"


def _data(seed=0, n=64):
    g = torch.Generator().manual_seed(seed)
    return ({"image": torch.randn(n, 8, generator=g), "text": torch.randn(n, 12, generator=g)},
            {"image": torch.randn(32, 8, generator=g), "text": torch.randn(32, 12, generator=g)})


def _run(seed=0, settings=SETTINGS, data=None, init_seed=0, kind="mlp"):
    train, val = data or _data()
    seed_everything(init_seed)
    method = ShareLock(12, 8, HeadConfig(hidden_dim=16, num_layers=2, dropout=0.1), LossConfig(), kind=kind)
    result = fit(method, train, val, settings, seed=seed, progress=False)
    return result, {k: v.clone() for k, v in method.state_dict().items()}


def _same(a, b):
    (ra, sa), (rb, sb) = a, b
    assert ra.history == rb.history and ra.best_step == rb.best_step and ra.steps_run == rb.steps_run
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_hit_returns_exactly_what_training_returns(cache, monkeypatch):
    first = _run()
    assert not first[0].cached and len(list(cache.rglob("run.json"))) == 1
    second = _run()
    assert second[0].cached and second[0].seconds == first[0].seconds
    _same(first, second)
    monkeypatch.setenv("LIB_RUN_CACHE", "0")
    retrained = _run()
    assert not retrained[0].cached
    _same(first, retrained)


@pytest.mark.parametrize("change", ["seed", "settings", "data", "initial weights", "head"])
def test_any_input_that_changes_the_run_misses(cache, change):
    _run()
    train, val = _data()
    train["text"][5, 3] += 1e-3
    kwargs = {"seed": {"seed": 1}, "settings": {"settings": TrainSettings(**{**SETTINGS.__dict__, "lr": 2e-2})},
              "data": {"data": (train, val)}, "initial weights": {"init_seed": 1}, "head": {"kind": "linear"}}[change]
    assert not _run(**kwargs)[0].cached
    assert len(list(cache.rglob("run.json"))) == 2


def test_a_damaged_entry_is_named_retrained_and_replaced(cache):
    first = _run()
    (weights,) = cache.rglob("weights.pt")
    weights.write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning,
                      match=r"run cache entry .*: weights.pt does not match its checksum; retraining the run"):
        again = _run()
    assert not again[0].cached
    _same(first, again)
    assert _run()[0].cached


def test_one_flipped_byte_in_the_weights_is_detected_and_retrained(cache):
    """A flipped byte inside the tensor data still unpickles into valid weights: only the checksum can see it."""
    first = _run()
    (weights,) = cache.rglob("weights.pt")
    data = bytearray(weights.read_bytes())
    data[-200] ^= 0x01  # inside the last tensor's storage, far from the zip's central directory
    weights.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"weights.pt does not match its checksum"):
        again = _run()
    assert not again[0].cached
    _same(first, again)


def test_an_edited_result_is_not_believed(cache):
    import json

    first = _run()
    (record,) = cache.rglob("run.json")
    fields = json.loads(record.read_text())
    fields["best_val_loss"] = -1.0
    record.write_text(json.dumps(fields))
    with pytest.warns(UserWarning, match=r"run.json does not match its checksum"):
        again = _run()
    assert not again[0].cached and again[0].best_val_loss == first[0].best_val_loss


def test_an_entry_without_checksums_is_retrained(cache):
    _run()
    (sums,) = cache.rglob("checksums.json")
    sums.unlink()
    with pytest.warns(UserWarning, match=r"checksums.json cannot be read"):
        assert not _run()[0].cached
    assert _run()[0].cached


def test_a_killed_writers_temporary_folder_is_swept_on_the_next_write(cache):
    import os
    import time

    _run()
    (entry,) = {p.parent for p in cache.rglob("run.json")}
    stale = entry.parent / f".{entry.name}.abc123.tmp"
    stale.mkdir()
    (stale / "weights.pt").write_bytes(b"half")
    fresh = entry.parent / f".{entry.name}.def456.tmp"  # a writer that is still running: left alone
    fresh.mkdir()
    old = time.time() - 2 * run_cache.STALE_SECONDS
    os.utime(stale, (old, old))
    _run(seed=1)  # another entry; same two-hex folder only by chance, so sweep the folder explicitly too
    run_cache.sweep_stale(entry.parent)
    assert not stale.exists() and fresh.exists()


def test_nothing_is_cached_unless_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LIB_RUN_CACHE", raising=False)
    assert not _run()[0].cached and not _run()[0].cached
    assert not (tmp_path / "runs").exists()


def test_a_method_holding_something_unnameable_is_trained_not_cached(cache):
    train, val = _data()
    seed_everything(0)
    method = ShareLock(12, 8, HeadConfig(hidden_dim=16, num_layers=2, dropout=0.1), LossConfig())
    method.callback = object()
    with pytest.warns(UserWarning, match=r"trained and not cached: method.callback is a object"):
        assert not fit(method, train, val, SETTINGS, progress=False).cached
    assert not cache.exists()


def test_the_key_reads_generators_and_tensor_attributes():
    seed_everything(0)
    a = ShareLock(12, 8, HeadConfig(hidden_dim=16, num_layers=2, dropout=0.1), LossConfig())
    a.generator, a.lookup = torch.Generator().manual_seed(0), torch.arange(4)
    before = run_cache.method_fingerprint(a)
    a.generator.manual_seed(1)
    assert run_cache.method_fingerprint(a) != before
    a.generator.manual_seed(0)
    a.lookup[0] = 7
    assert run_cache.method_fingerprint(a) != before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.lookup[0] = 0
        assert run_cache.method_fingerprint(a) == before

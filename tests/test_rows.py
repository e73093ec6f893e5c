"""lib.core.rows: the streamed data path draws fit's very batches and reads the store's rows exactly."""
import numpy as np
import pytest
import torch
from torch import nn

from lib.core.config import TrainSettings
from lib.core.rows import StepSampler, StoreRows, loader, step_indices, take
from lib.core.store import FeatureStore
from lib.core.train import fit


class _Recorder(nn.Module):
    """A method whose loss records the row ids of every micro-batch it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))
        self.seen: list[torch.Tensor] = []

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.training:
            self.seen.append(batch["id"].long().clone())
        return self.w * batch["x"].sum() * 0 + self.w ** 2


@pytest.mark.parametrize("n, batch, micro, steps", [(50, 16, 16, 9), (50, 16, 8, 7), (33, 10, 4, 12)])
def test_step_indices_are_the_batches_fit_draws(n, batch, micro, steps, monkeypatch):
    monkeypatch.delenv("LIB_RUN_CACHE", raising=False)
    method = _Recorder()
    settings = TrainSettings(steps=steps, batch_size=batch, micro_batch_size=micro, lr=1e-3, warmup_steps=0,
                             eval_every=10_000)
    fit(method, {"x": torch.randn(n, 3), "id": torch.arange(n).float()}, None, settings, seed=7, progress=False)
    expected = [chunk for chunks in step_indices(n, batch, micro, steps, seed=7) for chunk in chunks]
    assert len(method.seen) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(method.seen, expected))


def test_ranks_take_equal_contiguous_slices_that_make_up_the_global_batch():
    one = list(step_indices(40, 16, 8, 5, seed=1))
    two = [list(step_indices(40, 16, 8, 5, seed=1, rank=r, world=2)) for r in (0, 1)]
    for step, chunks in enumerate(one):
        for c, chunk in enumerate(chunks):
            assert torch.equal(torch.cat([two[0][step][c], two[1][step][c]]), chunk)


def _entry(tmp_path, rows: int, dim: int, shard_rows: int):
    data = np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)
    store = FeatureStore(tmp_path, dtype="float32", shard_rows=shard_rows)
    cached = store.get_or_compute({"what": "rows test"}, [f"r{i}" for i in range(rows)], lambda idx: data[idx],
                                  progress=False)
    return cached, torch.from_numpy(data)


def test_store_rows_read_across_shards_equal_the_resident_tensor(tmp_path):
    cached, data = _entry(tmp_path, 70, 5, shard_rows=16)  # 5 shards, the last one short
    rows = StoreRows(cached)
    index = torch.tensor([69, 0, 15, 16, 33, 15, 47])
    assert len(rows) == 70 and torch.equal(rows[index], data[index])
    facets = StoreRows(cached, per_row=7)  # 10 captions x 7 facets, stored caption-major
    assert len(facets) == 10 and torch.equal(facets[torch.tensor([3, 9])], data.view(10, 7, 5)[[3, 9]])
    with pytest.raises(ValueError, match="not a multiple of 3"):
        StoreRows(cached, per_row=3)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_yields_the_resident_batches_in_order(tmp_path, workers):
    cached, data = _entry(tmp_path, 64, 4, shard_rows=16)
    labels = torch.arange(64)
    sampler = StepSampler(64, 16, 8, steps=6, seed=3)
    streamed = list(loader({"x": StoreRows(cached), "y": labels}, sampler, workers=workers))
    resident = [take({"x": data, "y": labels}, i) for i in sampler]
    assert len(streamed) == len(resident) == 12 and sampler.chunks_per_step == 2
    for a, b in zip(streamed, resident):
        assert torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"])


def test_a_streamed_run_is_the_resident_run(tmp_path, monkeypatch):
    """Same seed, same batches, same dropout masks: the weights and every logged loss are equal, not close."""
    from lib.core.config import HeadConfig, LossConfig
    from lib.methods.sharelock import ShareLock

    monkeypatch.delenv("LIB_RUN_CACHE", raising=False)
    text, text_data = _entry(tmp_path / "text", 96, 12, shard_rows=32)
    image, image_data = _entry(tmp_path / "image", 96, 6, shard_rows=40)
    settings = TrainSettings(steps=14, batch_size=32, micro_batch_size=16, lr=1e-2, warmup_steps=2, eval_every=5)
    val = {"text": text_data[:24] * 0.5, "image": image_data[:24]}
    results = []
    for train in ({"text": text_data, "image": image_data}, {"text": StoreRows(text), "image": StoreRows(image)}):
        torch.manual_seed(0)
        method = ShareLock(12, 6, HeadConfig(hidden_dim=16, num_layers=3, dropout=0.2), LossConfig(0.07, False))
        result = fit(method, train, val, settings, seed=5, progress=False)
        results.append((result, method.state_dict()))
    (a, weights_a), (b, weights_b) = results
    assert [r["train_loss"] for r in a.history] == [r["train_loss"] for r in b.history]
    assert a.best_step == b.best_step and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def test_store_rows_keep_the_first_facets_and_rows_asked_for(tmp_path):
    cached, data = _entry(tmp_path, 70, 5, shard_rows=16)
    rows = StoreRows(cached, per_row=7, first=2, limit=6)
    assert len(rows) == 6 and torch.equal(rows[torch.tensor([5, 0])], data.view(10, 7, 5)[[5, 0], :2])
    with pytest.raises(IndexError):
        rows[torch.tensor([6])]

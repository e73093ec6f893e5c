"""Data-size curves (lib.core.curves): nested subsets that do not move with the seed, the sizes of a curve, and the
per-size comparison and its one-line trend (the diagnosis a "not reproduced" claim carries)."""
from __future__ import annotations

import pytest

from lib.core import curves
from lib.core.results import Runs


def test_subsets_are_nested_fixed_and_distinct():
    small, large = curves.nested_subset(100, 25), curves.nested_subset(100, 50)
    assert small.tolist() == large[:25].tolist()                 # each smaller set is part of every larger one
    assert curves.nested_subset(100, 25).tolist() == small.tolist()  # the same rows every time (no seed involved)
    assert len(set(large.tolist())) == 50 and max(large.tolist()) < 100
    assert curves.nested_subset(100, None) is None and curves.nested_subset(100, 100) is None
    with pytest.raises(ValueError, match="at least 2 rows"):
        curves.nested_subset(100, 1)


def test_sizes_are_rounded_unique_and_checked():
    assert curves.sizes(11416, (0.125, 0.25, 0.5, 1.0)) == [1427, 2854, 5708, 11416]
    assert curves.sizes(3, (0.1, 0.2, 1.0)) == [2, 3]
    for bad in ((), (0.0, 1.0), (1.5,)):
        with pytest.raises(ValueError, match=r"curve fractions must lie in \(0, 1\]"):
            curves.sizes(100, bad)


def _curve():
    runs = Runs()
    for size, a, b in ((100, [0.10, 0.11, 0.12], [0.20, 0.21, 0.22]), (400, [0.30, 0.31, 0.29], [0.30, 0.29, 0.31]),
                       (1600, [0.50, 0.51, 0.49], [0.40, 0.41, 0.39])):
        for seed in range(3):
            runs.add(method="a", seed=seed, train_pairs=size, score=a[seed])
            runs.add(method="b", seed=seed, train_pairs=size, score=b[seed])
    return runs


def test_table_and_trend_follow_the_rule_at_each_size():
    table = curves.table(_curve(), "score", {"method": "a"}, {"method": "b"}, ("A", "B"))
    assert table["training pairs"].tolist() == [100, 400, 1600]
    assert table["A − B (points)"].tolist() == [-10.0, 0.0, 10.0]
    assert table["outcome"].tolist() == ["B ahead", "no clear difference", "A ahead"]
    assert curves.trend(_curve(), "score", {"method": "a"}, {"method": "b"}, ("A", "B")) == (
        "A − B in points, by training pairs: 100: -10.0 (B ahead); 400: +0.0; 1,600: +10.0 (A ahead)")
    one = Runs([r for r in _curve() if r["train_pairs"] == 100])
    assert curves.trend(one, "score", {"method": "a"}, {"method": "b"}, ("A", "B")) == ""


def test_subset_settings_validate_once_an_epoch_with_the_same_patience_in_steps():
    from lib.core.config import TrainSettings

    whole = TrainSettings(steps=1200, batch_size=256, eval_every=50, patience=4)
    small = curves.subset_settings(whole, 1356)  # 5 batches an epoch
    assert (small.eval_every, small.patience, small.steps) == (5, 40, 1200)
    mid = curves.subset_settings(whole, 2711)    # 10 batches an epoch
    assert mid.eval_every == 10 and mid.patience * mid.eval_every == whole.patience * whole.eval_every
    assert curves.subset_settings(whole, 100_000).eval_every == 50  # never less often than the whole set's rule
    assert curves.subset_settings(whole, 300).eval_every == 5       # never more often than every 5 steps

"""tools.sweep_steadiness: the replayed recipe choice keeps the configured rate unless beaten by k standard errors."""
import math

import pytest

from tools import sweep_steadiness


def rows(scores: dict[float, float], chosen: float, **head) -> list[dict]:
    return [{**head, "lr": lr, "weight_decay": 1e-4, "score": s, "chosen": lr == chosen, "extended": False,
             "at_edge": False} for lr, s in scores.items()]


def test_replay_keeps_the_configured_rate_within_the_margin_and_leaves_it_beyond():
    se = math.sqrt(0.12 * 0.88 / 64)  # the best score's binomial standard error on 64 images
    close = rows({1e-3: 0.12 - 0.9 * se, 3e-3: 0.12}, chosen=3e-3)
    assert sweep_steadiness.replay(close, 1e-3, 64, None) == 3e-3  # the run's own choice: the best score
    assert sweep_steadiness.replay(close, 1e-3, 64, 1.0) == 1e-3  # inside one SE: the configured rate
    far = rows({1e-3: 0.12 - 2.5 * se, 3e-3: 0.12}, chosen=3e-3)
    assert sweep_steadiness.replay(far, 1e-3, 64, 2.0) == 3e-3
    assert sweep_steadiness.replay(far, 1e-3, 64, 3.0) == 1e-3


def test_steadiness_counts_heads_chosen_alike_in_both_runs():
    settings = {"train": {"lr": 1e-3}}
    shown = {"settings": settings, "extra": {"sweep": [
        *rows({1e-3: 0.100, 3e-3: 0.110}, chosen=3e-3, dataset="emoji", model="a"),
        *rows({1e-3: 0.100, 3e-3: 0.300}, chosen=3e-3, dataset="emoji", model="b")]}}
    kept = {"settings": settings, "extra": {"sweep": [
        *rows({1e-3: 0.105, 3e-3: 0.100}, chosen=1e-3, dataset="emoji", model="a"),
        *rows({1e-3: 0.100, 3e-3: 0.290}, chosen=3e-3, dataset="emoji", model="b")]}}
    today, margin = sweep_steadiness.steadiness(shown, kept, {"emoji": 64}, ks=(None, 1.0))
    assert (today["heads"], today["same"], today["default_shown"], today["default_kept"]) == (2, 1, 0, 1)
    # A 1-point lead on 64 images is noise, a 19-point lead is not: both runs now agree on both heads.
    assert (margin["same"], margin["default_shown"], margin["default_kept"]) == (2, 1, 1)


@pytest.mark.parametrize("key", sorted(sweep_steadiness.RECORD_KEYS))
def test_a_head_is_named_by_the_fields_that_are_not_about_the_candidate(key):
    grouped = sweep_steadiness.heads(rows({1e-3: 0.1, 3e-3: 0.2}, chosen=3e-3, dataset="emoji", model="a"))
    assert len(grouped) == 1 and key not in dict(next(iter(grouped)))

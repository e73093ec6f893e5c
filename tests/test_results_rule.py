"""The book's one comparison rule (lib.core.results.RULE), tested by simulation on experiments with a known truth.

Each synthetic experiment draws per-seed values for A and B the way the chapters' runs vary: a seed effect both
methods share (the same split, initialisation stream and batches), plus each method's own noise. Over thousands of
experiments the paired 95 % interval must cover the true difference 93-97 % of the time, a true difference of 0
must give a verdict (either way) at most 5 % of the time, the MDE must be the effect found with ~80 % power, and an
interval inside the smallest effect of interest must read "no effect at this scale".
"""
from __future__ import annotations

import numpy as np
import pytest

from lib.core.results import Claim, Runs, compare, versus

TRIALS = 4000


def _experiments(delta: float, seeds: int, rng, shared: float = 0.02, own: float = 0.004, base: float = 0.05):
    seed_effect = rng.normal(0, shared, size=(TRIALS, seeds))
    a = base + delta + seed_effect + rng.normal(0, own, size=(TRIALS, seeds))
    b = base + seed_effect + rng.normal(0, own, size=(TRIALS, seeds))
    return a, b


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_the_paired_interval_covers_the_true_difference_95_percent_of_the_time(seeds):
    rng = np.random.default_rng(seeds)
    delta = 0.003
    a, b = _experiments(delta, seeds, rng)
    covered = [compare(list(x), list(y)) for x, y in zip(a, b)]
    rate = np.mean([c.low <= delta <= c.high for c in covered])
    assert 0.93 <= rate <= 0.97, rate


@pytest.mark.parametrize("seeds", [3, 5])
def test_no_true_difference_gives_a_verdict_at_most_5_percent_of_the_time(seeds):
    rng = np.random.default_rng(100 + seeds)
    a, b = _experiments(0.0, seeds, rng)
    claims = [Claim("c", "s", "r", compare(list(x), list(y)), ("A", "B")) for x, y in zip(a, b)]
    false = np.mean([c.verdict in ("reproduced", "not reproduced") for c in claims])
    assert false <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / TRIALS), false  # 5 % and three Monte Carlo standard errors


def test_pairing_is_what_sees_a_small_consistent_gain_under_a_large_seed_spread():
    """The seed spread (sd 0.02) is five times the gain (0.004); unpaired, the gain is invisible, paired it is
    found nearly always: the reason every comparison in the book is paired."""
    rng = np.random.default_rng(7)
    a, b = _experiments(0.004, 5, rng, own=0.001)
    paired = np.mean([compare(list(x), list(y)).outcome == "a" for x, y in zip(a[:500], b[:500])])
    from lib.core.results import summarise
    unpaired = np.mean([compare(summarise(x), summarise(y)).outcome == "a" for x, y in zip(a[:500], b[:500])])
    assert paired > 0.95 and unpaired < 0.2, (paired, unpaired)


def test_the_mde_is_the_effect_found_with_80_percent_power():
    rng = np.random.default_rng(11)
    seeds, own = 5, 0.004
    sd_diff = own * np.sqrt(2)
    probe = compare([0.0] * 4 + [1e-9], [0.0] * 5)  # only its degrees of freedom matter here
    from lib.core.results import LEVEL, POWER, t_quantile
    mde = (t_quantile(0.5 + LEVEL / 2, seeds - 1) + t_quantile(POWER, seeds - 1)) * sd_diff / np.sqrt(seeds)
    a, b = _experiments(mde, seeds, rng, own=own)
    power = np.mean([compare(list(x), list(y)).outcome == "a" for x, y in zip(a, b)])
    assert 0.74 <= power <= 0.90, power  # the t-based MDE is slightly conservative for a known sd
    assert probe.pairs == 5


def test_an_interval_inside_the_papers_effect_is_no_effect_at_this_scale_and_outside_it_is_inconclusive():
    tight = compare([0.100, 0.101, 0.099, 0.100, 0.1005], [0.100, 0.100, 0.100, 0.1002, 0.100])
    claim = Claim("c", "s", "r", tight, ("A", "B"), paper_pair=(50.5, 41.7))  # the paper's +21 %: ±2.1 points here
    assert claim.verdict == "no effect at this scale" and "no effect of the paper's size" in claim.evidence
    loose = compare([0.10, 0.16, 0.05], [0.12, 0.09, 0.09])
    claim = Claim("c", "s", "r", loose, ("A", "B"), paper_pair=(50.5, 41.7))
    assert claim.verdict == "inconclusive" and "underpowered: MDE" in claim.evidence
    assert claim.seeds_needed is not None and claim.seeds_needed > 3
    assert Claim("c", "s", "r", loose, ("A", "B")).verdict == "inconclusive"  # no paper effect: no "no effect"


def test_runs_pair_on_the_seeds_both_sides_have():
    runs = Runs()
    for seed, (x, y) in enumerate([(0.2, 0.1), (0.3, 0.2), (0.25, 0.15)]):
        runs.add({"m": "a", "seed": seed, "acc": x})
        runs.add({"m": "b", "seed": seed, "acc": y})
    runs.add({"m": "a", "seed": 9, "acc": 0.0})  # a seed B does not have: left out of the pairs
    found = runs.compare("acc", {"m": "a"}, {"m": "b"})
    assert found.paired and found.pairs == 3 and found.difference == pytest.approx(0.1)
    assert found.outcome == "a" and found.low == pytest.approx(0.1) and found.high == pytest.approx(0.1)


def test_against_chance_is_the_one_sample_interval():
    above = versus([0.02, 0.03, 0.025], 0.001)
    assert above.outcome == "a" and above.low > 0
    noisy = versus([0.0, 0.004, -0.001], 0.001)
    assert noisy.outcome == "unclear"
    assert versus([0.5], 0.1).outcome == "unknown"


def test_welchs_interval_equals_scipys_for_two_independent_samples():
    """welch_interval (from sd and n alone) is scipy's Welch t-interval, and compare uses it when it cannot pair."""
    from scipy import stats

    from lib.core.results import summarise, welch_interval

    rng = np.random.default_rng(3)
    a, b = rng.normal(0.4, 1.0, 5), rng.normal(0.0, 2.5, 8)
    low, high = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    half = welch_interval(float(np.std(a, ddof=1)), 5, float(np.std(b, ddof=1)), 8)
    assert half == pytest.approx((high - low) / 2, rel=1e-9)
    assert compare(summarise(a), summarise(b)).margin == pytest.approx(half, rel=1e-12)

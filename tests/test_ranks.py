"""lib.core.ranks: Spearman's rho, exact permutation p-values, and the verdict a rank correlation gets."""
from __future__ import annotations

import pytest


def test_spearman_matches_pandas_with_ties():
    import pandas as pd

    from lib.core.ranks import spearman

    x, y = [1, 2, 2, 4, 5, 9], [3.0, 1.0, 4.0, 1.0, 5.0, 9.0]
    assert spearman(x, y) == pytest.approx(pd.Series(x).corr(pd.Series(y), method="spearman"))
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_permutation_p_is_exact_over_all_orderings():
    from lib.core.ranks import permutation_p

    assert permutation_p([1, 2, 3], [1, 2, 3]) == pytest.approx((1 / 6, 1.0))
    assert permutation_p([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx((1.0, 1 / 120))


def test_permutation_p_equals_a_brute_force_enumeration_with_ties():
    """The reference: every ordering of y enumerated by hand, counted against the observed rho (the library's
    earlier hand-written test), on random cases of 3 to 6 models with ties."""
    import itertools
    import random

    from lib.core.ranks import permutation_p, spearman

    rng = random.Random(1)
    for _ in range(20):
        n = rng.randint(3, 6)
        x = [rng.randint(0, 4) for _ in range(n)]
        y = [rng.randint(0, 4) for _ in range(n)]
        observed = spearman(x, y)
        if observed != observed:  # a constant side: no correlation to test
            assert permutation_p(x, y) == (1.0, 1.0)
            continue
        rhos = [spearman(x, o) for o in itertools.permutations(y)]
        up = sum(r >= observed - 1e-12 for r in rhos) / len(rhos)
        down = sum(r <= observed + 1e-12 for r in rhos) / len(rhos)
        assert permutation_p(x, y) == pytest.approx((up, down))


def test_rank_comparison_needs_significance_and_every_seed_on_its_side():
    from lib.core.ranks import rank_comparison
    from lib.core.results import Claim

    rising = rank_comparison([0.9, 1.0, 0.9], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    assert rising.outcome == "a" and rising.p == pytest.approx(1 / 120)
    assert rank_comparison([0.9, -0.1, 0.9], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5]).outcome == "unclear"  # a seed disagrees
    three = rank_comparison([1.0, 1.0, 1.0], [1, 2, 3], [1, 2, 3])
    assert three.outcome == "unclear"  # 3 models: p >= 1/6, and the sentence says why no verdict was possible
    assert "the smallest possible p is 1/6" in three.says("rho", "none")
    assert Claim("c", "s", "r", three, ("rho", "none"), scale=1.0, unit="").verdict == "inconclusive"
    falling = rank_comparison([-1.0, -1.0], [1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
    claim = Claim("c", "s", "r", falling, ("rho", "none"), scale=1.0, unit="")
    assert claim.verdict == "not reproduced" and "a clear negative rank correlation" in claim.evidence
    assert claim.as_dict()["comparison"]["p"] == pytest.approx(1 / 120)

"""Rank correlations across models, and when one counts: Spearman's rho, exact permutation p-values and the verdict
rule for a claim such as "more capable language models align better".

Why not :data:`lib.core.results.RULE` alone: there the seeds are the sample, but a correlation across models has the
*models* as its sample; seeds that agree perfectly say nothing when three models can be ordered in only six ways.
See notebooks/viterb.py, section "Does a more capable language model see better?".
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lib.core.results import Comparison, Runs, Summary, summarise

__all__ = ["RANK_RULE", "spearman", "permutation_p", "RankComparison", "rank_comparison", "rank_correlation"]

RANK_RULE = ("A rank correlation between a measure and a score over n models is clear when every seed's Spearman "
             "rho has the same sign as the rho of the seed means and an exact permutation test over the n models "
             "(all n! orderings) gives p < 0.05 for that sign; with 3 models no ordering can reach it (the smallest "
             "p is 1/6). The seeds only vary training: the models are the sample.")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (``scipy.stats.spearmanr``: Pearson's r of the ranks, ties at their mean rank);
    NaN when a side is constant."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"spearman needs two sequences of equal length >= 2, got {len(x)} and {len(y)}")
    from scipy import stats

    with warnings.catch_warnings():  # a constant side is NaN here, said by the caller, not a warning on the page
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        return float(stats.spearmanr(list(x), list(y)).statistic)


def permutation_p(x: Sequence[float], y: Sequence[float], *, exact_up_to: int = 8,
                  samples: int = 20_000) -> tuple[float, float]:
    """One-sided p-values of Spearman's rho: (P[rho >= observed], P[rho <= observed]) when ``y`` is shuffled over
    the models (``scipy.stats.permutation_test``, pairings). Exact (all n! orderings) up to ``exact_up_to`` models,
    else ``samples`` seeded random orderings."""
    observed = spearman(x, y)
    if math.isnan(observed):
        return 1.0, 1.0
    from scipy import stats

    resamples = math.inf if len(y) <= exact_up_to else samples

    def p(alternative: str) -> float:
        found = stats.permutation_test((list(y),), lambda shuffled: spearman(x, shuffled), vectorized=False,
                                       permutation_type="pairings", n_resamples=resamples, alternative=alternative,
                                       rng=0)
        return float(found.pvalue)

    return p("greater"), p("less")


@dataclass(frozen=True)
class RankComparison(Comparison):
    """A rank correlation against "no correlation" by :data:`RANK_RULE`: ``a`` holds the per-seed rhos, ``rho``
    is the rho of the seed means over ``n`` models and ``p`` the permutation p-value for its sign."""

    rho: float = float("nan")
    p: float = 1.0
    n: int = 0

    def says(self, name_a: str, name_b: str, scale: float = 1.0, unit: str = "", smallest: float | None = None) -> str:
        seeds = ", ".join(f"{v:+.2f}" for v in self.a.values)
        head = (f"{name_a}: rho {self.rho:+.2f} over {self.n} models (per seed {seeds}), exact permutation "
                f"p = {self.p:.3f}")
        if self.outcome == "unknown":
            return f"{head}: too few seeds to judge"
        if self.outcome == "unclear":
            floor = (f"; with {self.n} models the smallest possible p is 1/{math.factorial(self.n)}"
                     if self.n <= 4 else "")
            return f"{head}: no clear correlation (p >= 0.05, or a seed on the other side{floor})"
        return f"{head}: a clear {'positive' if self.outcome == 'a' else 'negative'} rank correlation"

    def as_dict(self) -> dict:
        return {**super().as_dict(), "rho": self.rho, "p": self.p, "n": self.n}


def rank_comparison(per_seed: Iterable[float], measure: Sequence[float], score: Sequence[float]) -> RankComparison:
    """:data:`RANK_RULE` on per-seed rhos and on the seed-mean ``score`` of each model against its ``measure``."""
    a = summarise(per_seed)
    rho = spearman(measure, score)
    p_up, p_down = permutation_p(measure, score)
    b = Summary((0.0,) * max(a.n, 2))
    if a.n < 2 or math.isnan(rho):
        return RankComparison(a, b, None, "unknown", rho=rho, p=min(p_up, p_down), n=len(score))
    p = p_up if rho > 0 else p_down
    agree = all(v > 0 for v in a.values) if rho > 0 else all(v < 0 for v in a.values)
    outcome = ("a" if rho > 0 else "b") if agree and p < 0.05 else "unclear"
    return RankComparison(a, b, None, outcome, rho=rho, p=p, n=len(score))


def rank_correlation(runs: Runs, capability: dict[str, float], *, by: str = "model", metric: str = "score",
                     **where) -> dict:
    """Spearman's rank correlation between a capability measure (model label -> value, higher = more capable)
    and a run metric: ``rho`` of the means over seeds, ``per_seed`` (one rho per seed, each over the models'
    values at that seed), and the ``measure`` and seed-mean ``score`` per model (for :func:`rank_comparison`).
    ``by`` is the runs' column naming the model, ``where`` selects the runs."""
    frame = runs.where(**where).frame()
    models = [m for m in capability if m in set(frame[by])]
    measure = [float(capability[m]) for m in models]
    per_seed = frame.groupby(["seed", by])[metric].mean().unstack()[models]
    score = [float(v) for v in per_seed.mean()]

    def rho(values) -> float:  # a model without a run at some seed drops out of that seed's rho (as in pandas)
        kept = [(m, float(v)) for m, v in zip(measure, values) if v == v]
        return spearman(*zip(*kept)) if len(kept) >= 2 else float("nan")

    return {"models": models, "rho": rho(score), "per_seed": [rho(list(row)) for _, row in per_seed.iterrows()],
            "measure": measure, "score": score}

"""A fair recipe per method: each method's learning rate and weight decay chosen on the validation concepts.

Why: a comparison between two methods trained with one shared recipe measures partly how well that recipe suits
each of them (a head that peaks at step 50 of 1,500 is over-trained or mis-tuned, not a worse method). So each
method gets a small grid of learning rates and weight decays, trained once on the first seed, and the candidate
with the best score on the *validation* set (never the unseen test concepts) becomes that method's recipe for every
seed. The step budget is then chosen as always: the weights of the best validation step are kept
(``lib.core.train.fit``).

The score is the chapter's measure of what it tests, on validation items: retrieval R@1 between validation images
and their captions (:func:`retrieval_score`), or classification of validation images. Not the validation loss: with
a learned temperature a model can lower its loss by calibration alone, and a first version that chose by the loss
picked a FLAME head (lr 0.027) whose embeddings had collapsed onto a few hubs.

See notebooks/sharelock.py, section "Training the head".
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from lib.core.config import TrainSettings

__all__ = ["SweepConfig", "candidates", "choose", "choose_each", "lead_needed", "retrieval_score"]


@dataclass(frozen=True)
class SweepConfig:
    """The grid a chapter's ``sweep:`` section names. An empty axis keeps the train settings' own value; both empty
    (the default) means no sweep: the config's recipe is used as written."""

    lr: tuple[float, ...] = ()
    weight_decay: tuple[float, ...] = ()
    extend: int = 1  # learning rates tried past the grid's edge while the best lies on it (see choose)
    keep_within_se: float = 0.0  # keep the configured recipe unless beaten by more than this many standard errors

    def __post_init__(self) -> None:
        if not isinstance(self.extend, int) or isinstance(self.extend, bool) or self.extend < 0:
            raise ValueError(f"sweep.extend must be a whole number >= 0 (learning rates tried past the grid's edge), "
                             f"got {self.extend!r}")
        k = self.keep_within_se
        if not isinstance(k, (int, float)) or isinstance(k, bool) or not math.isfinite(k) or k < 0:
            raise ValueError(f"sweep.keep_within_se must be a number >= 0 (standard errors by which another "
                             f"candidate must beat the configured recipe; 0: the best score wins), got {k!r}")
        object.__setattr__(self, "keep_within_se", float(k))
        for name in ("lr", "weight_decay"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            if any(not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0
                   for v in values) or (name == "lr" and any(v == 0 for v in values)):
                raise ValueError(f"sweep.{name} must be a list of {'positive' if name == 'lr' else 'non-negative'} "
                                 f"numbers, e.g. [3.0e-4, 1.0e-3], got {list(values)!r}")
            if len(set(values)) != len(values):
                raise ValueError(f"sweep.{name} lists a value twice: {list(values)!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.lr or self.weight_decay)


def candidates(train: TrainSettings, sweep: SweepConfig) -> list[TrainSettings]:
    """Every (lr, weight decay) of the grid as train settings, the rest of ``train`` unchanged; the configured
    recipe first when it is in the grid (it wins ties, see :func:`choose`)."""
    lrs = sweep.lr or (train.lr,)
    decays = sweep.weight_decay or (train.weight_decay,)
    grid = [dataclasses.replace(train, lr=float(lr), weight_decay=float(wd))
            for lr, wd in itertools.product(lrs, decays)]
    return sorted(grid, key=lambda t: (t.lr, t.weight_decay) != (train.lr, train.weight_decay))


def retrieval_score(found: dict[str, float]) -> float:
    """The mean of R@1 in both directions (``lib.core.evaluate.retrieval``'s keys): a sweep's score on pairs."""
    return (found["image_retrieval_recall@1"] + found["text_retrieval_recall@1"]) / 2


def lead_needed(best: float, n: int, k: float) -> float:
    """The lead over the configured recipe that a candidate with score ``best`` needs to be chosen: ``k`` binomial
    standard errors of that score over ``n`` validation items, ``k * sqrt(best * (1 - best) / n)``."""
    return k * math.sqrt(max(best * (1 - best), 0.0) / n)


def choose(train: TrainSettings, sweep: SweepConfig,
           run: Callable[[TrainSettings], float | None], n: int | None = None) -> tuple[TrainSettings, list[dict]]:
    """The candidate whose ``run`` (one training on the first seed) returns the highest validation score, and the
    record of every candidate (``lr``, ``weight_decay``, ``score``, ``chosen``, ``extended``, ``at_edge``).

    A best learning rate on the edge of the grid says the optimum may lie beyond it, so the grid grows on that side
    by its own step (the ratio of its two outermost values), with the best's weight decay, up to ``sweep.extend``
    times, while the best stays on the edge; ``at_edge`` marks a choice still on it when the extension is spent. A
    run without a finite score cannot be judged and is never chosen; the earlier candidate wins ties (the
    configured recipe comes first). No sweep: ``train`` itself, no record.

    With ``sweep.keep_within_se`` = k > 0 the configured recipe is kept unless the best beats it by more than
    :func:`lead_needed` (k standard errors of the best score over the ``n`` validation items the score counts; every
    row then records that ``lead``). Why: a score on a few validation items moves by one item's worth between two
    runs that differ only in rounding, and a best-score rule follows that noise to another learning rate
    (``tools.sweep_steadiness`` measures it); a recipe should leave the configured one only for a lead the
    validation set can tell from noise."""
    if not sweep.enabled:
        return train, []
    if sweep.keep_within_se and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError(f"sweep.keep_within_se = {sweep.keep_within_se:g} needs the number of validation items the "
                         f"score counts (n, a whole number >= 1), got {n!r}: pass it to choose / choose_each")
    record: list[dict] = []

    def judge(settings: TrainSettings, extended: bool) -> None:
        score = run(settings)
        judged = score is not None and math.isfinite(score)
        record.append({"lr": settings.lr, "weight_decay": settings.weight_decay,
                       "score": float(score) if judged else None, "chosen": False, "extended": extended,
                       "at_edge": False})

    def best_row() -> dict | None:
        judged = [r for r in record if r["score"] is not None]
        return max(judged, key=lambda r: r["score"]) if judged else None  # max keeps the earliest of ties

    for settings in candidates(train, sweep):
        judge(settings, extended=False)
    best = best_row()
    if best is None:
        raise RuntimeError("no candidate of the sweep reached a finite validation score: check the validation set "
                           f"and the grid {record}")
    for _ in range(sweep.extend if len(set(sweep.lr)) > 1 else 0):
        lrs = sorted({r["lr"] for r in record})
        if best["lr"] not in (lrs[0], lrs[-1]):
            break
        low = best["lr"] == lrs[0]
        step = lrs[1] / lrs[0] if low else lrs[-1] / lrs[-2]
        judge(dataclasses.replace(train, lr=best["lr"] / step if low else best["lr"] * step,
                                  weight_decay=best["weight_decay"]), extended=True)
        best = best_row()
    if sweep.keep_within_se:
        lead = lead_needed(best["score"], n, sweep.keep_within_se)
        configured = next((r for r in record if (r["lr"], r["weight_decay"]) == (train.lr, train.weight_decay)
                           and r["score"] is not None), None)
        for row in record:
            row["lead"] = lead
        if configured is not None and best["score"] - configured["score"] <= lead:
            best = configured
    lrs = sorted({r["lr"] for r in record})
    best["chosen"] = True
    best["at_edge"] = len(lrs) > 1 and best["lr"] in (lrs[0], lrs[-1])
    return dataclasses.replace(train, lr=best["lr"], weight_decay=best["weight_decay"]), record


def choose_each(train: TrainSettings, sweep: SweepConfig, methods: Iterable[Hashable],
                score: Callable[[Hashable, TrainSettings], float | None],
                describe: Callable[[Hashable], dict], n: int | None = None) -> tuple[dict, list[dict]]:
    """:func:`choose` for every method of a chapter: ``score(method, settings)`` trains one candidate and returns its
    validation score (over ``n`` validation items). Returns ``{method: its recipe}`` and the record of every
    candidate, each row led by ``describe(method)``'s columns (e.g. ``{"method": "FDT"}``), as one table of the
    chapter's sweep."""
    chosen, record = {}, []
    for method in methods:
        chosen[method], rows = choose(train, sweep, functools.partial(score, method), n)
        record += [{**describe(method), **row} for row in rows]
    return chosen, record

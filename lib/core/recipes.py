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

__all__ = ["SweepConfig", "candidates", "choose", "choose_each", "retrieval_score"]


@dataclass(frozen=True)
class SweepConfig:
    """The grid a chapter's ``sweep:`` section names. An empty axis keeps the train settings' own value; both empty
    (the default) means no sweep: the config's recipe is used as written."""

    lr: tuple[float, ...] = ()
    weight_decay: tuple[float, ...] = ()
    extend: int = 1  # learning rates tried past the grid's edge while the best lies on it (see choose)

    def __post_init__(self) -> None:
        if not isinstance(self.extend, int) or isinstance(self.extend, bool) or self.extend < 0:
            raise ValueError(f"sweep.extend must be a whole number >= 0 (learning rates tried past the grid's edge), "
                             f"got {self.extend!r}")
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


def choose(train: TrainSettings, sweep: SweepConfig,
           run: Callable[[TrainSettings], float | None]) -> tuple[TrainSettings, list[dict]]:
    """The candidate whose ``run`` (one training on the first seed) returns the highest validation score, and the
    record of every candidate (``lr``, ``weight_decay``, ``score``, ``chosen``, ``extended``, ``at_edge``).

    A best learning rate on the edge of the grid says the optimum may lie beyond it, so the grid grows on that side
    by its own step (the ratio of its two outermost values), with the best's weight decay, up to ``sweep.extend``
    times, while the best stays on the edge; ``at_edge`` marks a choice still on it when the extension is spent. A
    run without a finite score cannot be judged and is never chosen; the earlier candidate wins ties (the
    configured recipe comes first). No sweep: ``train`` itself, no record."""
    if not sweep.enabled:
        return train, []
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
    lrs = sorted({r["lr"] for r in record})
    best["chosen"] = True
    best["at_edge"] = len(lrs) > 1 and best["lr"] in (lrs[0], lrs[-1])
    return dataclasses.replace(train, lr=best["lr"], weight_decay=best["weight_decay"]), record


def choose_each(train: TrainSettings, sweep: SweepConfig, methods: Iterable[Hashable],
                score: Callable[[Hashable, TrainSettings], float | None],
                describe: Callable[[Hashable], dict]) -> tuple[dict, list[dict]]:
    """:func:`choose` for every method of a chapter: ``score(method, settings)`` trains one candidate and returns its
    validation score. Returns ``{method: its recipe}`` and the record of every candidate, each row led by
    ``describe(method)``'s columns (e.g. ``{"method": "FDT"}``), as one table of the chapter's sweep."""
    chosen, record = {}, []
    for method in methods:
        chosen[method], rows = choose(train, sweep, functools.partial(score, method))
        record += [{**describe(method), **row} for row in rows]
    return chosen, record

"""Data-size curves: a chapter's headline comparison at growing, nested shares of its training set.

Why: the papers' claims are about data far larger than a CPU book's; repeating the comparison at a few sizes
shows whether the paper's gap opens, closes or flips as the data grow. The subsets are nested and do not depend
on the training seed. See notebooks/three_towers.py, section
"More data".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from lib.core.results import Runs

SUBSET_SEED = 20240917  # fixed: the subsets must not move with the training seed


def nested_subset(rows: int, size: int | None) -> torch.Tensor | None:
    """The first ``size`` of a fixed permutation of ``rows`` training rows (None: all of them)."""
    if size is None or size >= rows:
        return None
    if size < 2:
        raise ValueError(f"a training subset needs at least 2 rows, got {size}")
    return torch.randperm(rows, generator=torch.Generator().manual_seed(SUBSET_SEED))[:size]


def subset_settings(train, rows: int):
    """The budget rule on a training subset of ``rows`` rows (a ``lib.core.config.TrainSettings`` in and out):
    validate once an epoch of the subset (never less often than ``eval_every``, never more often than every 5
    steps) and stop after as many *steps* without improvement as on the whole set. A fixed interval is many
    epochs of a small subset, by which a model may have overfitted already: its run keeps its first evaluation."""
    import dataclasses

    every = max(5, min(train.eval_every, rows // max(1, min(train.batch_size, rows))))
    patience = None if train.patience is None else -(-train.patience * train.eval_every // every)
    return dataclasses.replace(train, eval_every=every, patience=patience)


def sizes(total: int, fractions: Sequence[float]) -> list[int]:
    """The training-set sizes of a curve: each fraction of ``total`` rounded, at least 2, ascending, unique."""
    if not fractions or any(not 0.0 < f <= 1.0 for f in fractions):
        raise ValueError(f"curve fractions must lie in (0, 1], got {list(fractions)}")
    return sorted({max(2, round(f * total)) for f in fractions})


def table(curve: Runs, metric: str, a: Mapping, b: Mapping, names: tuple[str, str], size_key: str = "train_pairs"):
    """One row per training-set size: A and B as mean ± sd over seeds, A − B in points, the rule's outcome."""
    import pandas as pd

    rows = []
    for size in sorted({r[size_key] for r in curve}):
        cmp = curve.compare(metric, {**a, size_key: size}, {**b, size_key: size})
        rows.append({"training pairs": int(size), names[0]: cmp.a.text(), names[1]: cmp.b.text(),
                     f"{names[0]} − {names[1]} (points)":
                         None if cmp.difference is None else round(100 * cmp.difference, 1),
                     "outcome": {"a": f"{names[0]} ahead", "b": f"{names[1]} ahead", "unclear": "no clear difference",
                                 "tie": "no clear difference", "unknown": "too few seeds"}[cmp.outcome]})
    return pd.DataFrame(rows)


def trend(curve: Runs, metric: str, a: Mapping, b: Mapping, names: tuple[str, str], size_key: str = "train_pairs",
          context: str = "") -> str:
    """One sentence on how A − B moves along the curve (a claim's diagnosis); empty with fewer than 2 sizes.
    ``context`` names what A and B share (a text model), said after "in points"."""
    steps = []
    for size in sorted({r[size_key] for r in curve}):
        cmp = curve.compare(metric, {**a, size_key: size}, {**b, size_key: size})
        if cmp.difference is not None:
            mark = {"a": f" ({names[0]} ahead)", "b": f" ({names[1]} ahead)"}.get(cmp.outcome, "")
            steps.append(f"{size:,}: {100 * cmp.difference:+.1f}{mark}")
    if len(steps) < 2:
        return ""
    where = f", {context}" if context else ""
    return f"{names[0]} − {names[1]} in points{where}, by training pairs: " + "; ".join(steps)

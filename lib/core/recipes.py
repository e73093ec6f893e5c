"""A fair recipe per method: each method's learning rate and weight decay chosen on the validation concepts.

Why: a comparison between two methods trained with one shared recipe measures partly how well that recipe suits
each of them (a head that peaks at step 50 of 1,500 is over-trained or mis-tuned, not a worse method). So each
method gets a small grid of learning rates and weight decays, trained once on the first seed; the candidate with
the lowest validation loss (the quantity early stopping already watches, on the *validation* concepts, never the
unseen ones) becomes that method's recipe for every seed. The step budget is then chosen the same way it always
is: the weights of the best validation step are kept (``lib.core.train.fit``).

See notebooks/sharelock.py, section "Training the head".
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from lib.core.config import TrainSettings

__all__ = ["SweepConfig", "candidates", "choose"]


@dataclass(frozen=True)
class SweepConfig:
    """The grid a chapter's ``sweep:`` section names. An empty axis keeps the train settings' own value; both empty
    (the default) means no sweep: the config's recipe is used as written."""

    lr: tuple[float, ...] = ()
    weight_decay: tuple[float, ...] = ()

    def __post_init__(self) -> None:
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


def choose(train: TrainSettings, sweep: SweepConfig,
           run: Callable[[TrainSettings], float | None]) -> tuple[TrainSettings, list[dict]]:
    """The candidate whose ``run`` (one training on the first seed) returns the lowest validation loss, and the
    record of every candidate (``lr``, ``weight_decay``, ``val_loss``, ``chosen``). A run without a validation loss
    cannot be judged and is never chosen; the first candidate wins ties. No sweep: ``train`` itself, no record."""
    if not sweep.enabled:
        return train, []
    record, best, best_loss = [], None, math.inf
    for settings in candidates(train, sweep):
        loss = run(settings)
        judged = loss is not None and math.isfinite(loss)
        record.append({"lr": settings.lr, "weight_decay": settings.weight_decay,
                       "val_loss": float(loss) if judged else None, "chosen": False})
        if judged and loss < best_loss:
            best, best_loss = settings, loss
    if best is None:
        raise RuntimeError("no candidate of the sweep reached a finite validation loss: check the validation set "
                           f"and the grid {record}")
    for row in record:
        row["chosen"] = (row["lr"], row["weight_decay"]) == (best.lr, best.weight_decay)
    return best, record

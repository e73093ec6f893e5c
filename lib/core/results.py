"""Results: per-seed runs, mean ± sd, the one comparison rule, claim verdicts, and the metrics file.

Why one module: "is A clearly better than B?" must be decided the same way in every chapter, or two
chapters could call the same gap a finding and noise. The rule, stated once (and in the book's
introduction):

    **A is clearly ahead of B when the difference of their means over seeds is larger than twice the
    larger of their two standard deviations over seeds.** With fewer than two seeds on either side no
    difference is clear.

A paper's claim gets a verdict from that rule (:class:`Claim`): *reproduced* when the comparison shows
the paper's direction clearly, *not reproduced* when it clearly shows the opposite, *inconclusive* when
the difference is within the seed spread (or there are too few seeds). A claim against a fixed level
(chance) uses the same rule with the level's spread taken as 0 (:func:`versus`).

``write_metrics`` writes each chapter's ``metrics.json`` in one schema (:data:`SCHEMA`), strict JSON (a
NaN is written as ``null``), with the versions, seconds and feature counts filled in here.
See notebooks/sharelock.py, section "What reproduced, what did not".
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "RULE", "Summary", "summarise", "Comparison", "compare", "versus", "stuck", "Claim", "Runs", "VERDICTS",
    "json_safe", "write_metrics", "validate_metrics", "SCHEMA", "versions",
]

RULE = ("A is clearly ahead of B when the difference of their means over seeds is larger than twice the larger "
        "of their two standard deviations over seeds; with fewer than two seeds on either side, no difference "
        "is clear.")
VERDICTS = ("reproduced", "not reproduced", "inconclusive")
Outcome = Literal["a", "b", "tie", "unknown"]


def _finite(values: Iterable) -> tuple[float, ...]:
    out = []
    for v in values:
        if v is None:
            continue
        v = float(v)
        if math.isfinite(v):
            out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (ddof = 1) of per-seed values; ``sd`` is None below two values."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return sum(self.values) / self.n if self.n else None

    @property
    def sd(self) -> float | None:
        if self.n < 2:
            return None
        m = self.mean
        return math.sqrt(sum((v - m) ** 2 for v in self.values) / (self.n - 1))

    def text(self, scale: float = 100.0, digits: int = 1) -> str:
        """``"12.3 ± 0.4"`` (``scale`` 100: fractions shown as percentages); one seed: ``"12.3"``."""
        if self.mean is None:
            return "–"
        if self.sd is None:
            return f"{scale * self.mean:.{digits}f}"
        return f"{scale * self.mean:.{digits}f} ± {scale * self.sd:.{digits}f}"


def summarise(values: Iterable) -> Summary:
    """A :class:`Summary` of the finite values (None and NaN are left out)."""
    return Summary(_finite(values))


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: both summaries, the margin (twice the larger sd) and the outcome.

    ``outcome``: ``"a"`` (A clearly ahead), ``"b"``, ``"tie"`` (difference within the margin) or ``"unknown"``
    (fewer than two seeds on a side).
    """

    a: Summary
    b: Summary
    margin: float | None
    outcome: Outcome

    @property
    def difference(self) -> float | None:
        if self.a.mean is None or self.b.mean is None:
            return None
        return self.a.mean - self.b.mean

    def says(self, name_a: str, name_b: str, scale: float = 100.0, unit: str = " %") -> str:
        """One sentence: both means ± sd, the margin and the outcome."""
        head = f"{name_a} {self.a.text(scale)}{unit} vs {name_b} {self.b.text(scale)}{unit}"
        if self.outcome == "unknown":
            return f"{head}: too few seeds to judge"
        margin = f"twice the larger seed spread is {scale * self.margin:.1f}{unit.strip() and ' points'}"
        if self.outcome == "tie":
            return f"{head}: no clear difference ({margin})"
        return f"{head}: {name_a if self.outcome == 'a' else name_b} is clearly ahead ({margin})"

    def as_dict(self) -> dict:
        return {"a": {"mean": self.a.mean, "sd": self.a.sd, "n": self.a.n},
                "b": {"mean": self.b.mean, "sd": self.b.sd, "n": self.b.n},
                "margin": self.margin, "outcome": self.outcome}


def compare(a: Iterable | Summary, b: Iterable | Summary) -> Comparison:
    """Apply :data:`RULE` to per-seed values of A and B."""
    a = a if isinstance(a, Summary) else summarise(a)
    b = b if isinstance(b, Summary) else summarise(b)
    if a.sd is None or b.sd is None:
        return Comparison(a, b, None, "unknown")
    margin = 2 * max(a.sd, b.sd)
    gap = a.mean - b.mean
    return Comparison(a, b, margin, "a" if gap > margin else "b" if -gap > margin else "tie")


def versus(a: Iterable | Summary, level: float) -> Comparison:
    """:data:`RULE` against a fixed level (chance, a paper's number): the level has no seed spread."""
    a = a if isinstance(a, Summary) else summarise(a)
    b = Summary((float(level),) * max(a.n, 2))
    return compare(a, b)


def stuck(row: Mapping, first_eval: int | None = None) -> bool:
    """A run whose best validation step is its first evaluation (``first_eval``, default the row's own
    ``"first_eval"``): a model that never improved on what it knew after its first evaluation has not trained,
    and its numbers must not be read as its method's. Each chapter's ``stuck_runs`` applies this to the runs it
    reports (leaving out the controls that are meant not to learn). See notebooks/sharelock.py, "Training the head"."""
    first = row["first_eval"] if first_eval is None else first_eval
    return row["best_step"] is not None and first is not None and row["best_step"] <= first


@dataclass
class Claim:
    """A paper's claim, the book's evidence, and the verdict :data:`RULE` gives.

    ``comparison`` compares A (what the paper says is ahead) with B; ``expected`` is the outcome the paper
    predicts (``"a"``, or ``"tie"`` for a claim that two things are equal). ``paper_value`` is the paper's
    own number(s) in words, with ``reference`` the table or section. ``diagnosis``: for a claim not
    reproduced, what the chapter measured about why (a data-size curve, an ablation).

    ``origin``: ``"paper"`` for a claim the paper makes (its ``reference`` names the table or section, which
    book/papers.yaml quotes), ``"book"`` for a question the book asks on its own (an ablation the paper does not
    run, a frozen-feature analogue the paper does not claim); the results page keeps the two apart.
    """

    id: str
    statement: str
    reference: str
    comparison: Comparison
    names: tuple[str, str]
    expected: Outcome = "a"
    paper_value: str | None = None
    diagnosis: str | None = None
    scale: float = 100.0
    unit: str = " %"
    origin: Literal["paper", "book"] = "paper"

    def __post_init__(self) -> None:
        if self.origin not in ("paper", "book"):
            raise ValueError(f"claim {self.id}: origin must be 'paper' or 'book', got {self.origin!r}")

    @property
    def verdict(self) -> str:
        outcome = self.comparison.outcome
        if outcome == self.expected:
            return "reproduced"
        if outcome in ("unknown", "tie") or self.expected == "tie":
            return "inconclusive" if outcome in ("unknown", "tie") else "not reproduced"
        return "not reproduced"

    @property
    def evidence(self) -> str:
        return self.comparison.says(*self.names, scale=self.scale, unit=self.unit)

    @property
    def paper_column(self) -> str:
        """What a table's "paper" column shows: the paper's number and where it is printed, or, for the book's own
        question, where the paper stands (no number)."""
        return f"{self.paper_value} ({self.reference})" if self.paper_value else self.reference

    def finding(self) -> str:
        """One line of a chapter's key findings: the verdict, the claim, the evidence, and the paper's number
        (a paper claim) or the label of the book's own question."""
        if self.origin == "book":
            line = f"**{self.verdict}** (the book's own question): {self.statement} — {self.evidence}"
        else:
            line = f"**{self.verdict}**: {self.statement} — {self.evidence} (paper: {self.paper_value}; {self.reference})"
        return line + (f"; measured: {self.diagnosis}" if self.diagnosis else "")

    def as_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "reference": self.reference,
                "paper_value": self.paper_value, "verdict": self.verdict, "evidence": self.evidence,
                "comparison": self.comparison.as_dict(), "names": list(self.names), "expected": self.expected,
                "diagnosis": self.diagnosis, "origin": self.origin}


class Runs:
    """One row per trained model and seed (a list of dicts with a ``seed`` key), with selection and summaries."""

    def __init__(self, rows: Iterable[Mapping] = ()) -> None:
        self.rows: list[dict] = [dict(r) for r in rows]

    def add(self, row: Mapping | None = None, **columns) -> dict:
        record = {**(row or {}), **columns}
        if "seed" not in record:
            raise KeyError("every run needs a 'seed' column")
        self.rows.append(record)
        return record

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def where(self, **conditions) -> "Runs":
        """The rows whose columns equal every condition (a missing column reads as None)."""
        return Runs(r for r in self.rows if all(r.get(k) == v for k, v in conditions.items()))

    def values(self, metric: str, **conditions) -> list[float]:
        """One value per seed (the mean over the selected rows of that seed), in seed order."""
        per_seed: dict[Any, list[float]] = {}
        for r in self.where(**conditions).rows:
            v = r.get(metric)
            if v is not None and math.isfinite(float(v)):
                per_seed.setdefault(r["seed"], []).append(float(v))
        return [sum(v) / len(v) for _, v in sorted(per_seed.items(), key=lambda kv: str(kv[0]))]

    def summary(self, metric: str, **conditions) -> Summary:
        return summarise(self.values(metric, **conditions))

    def compare(self, metric: str, a: Mapping, b: Mapping) -> Comparison:
        """:func:`compare` of ``metric`` between the rows matching ``a`` and those matching ``b``."""
        return compare(self.values(metric, **a), self.values(metric, **b))

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def table(self, metrics: Sequence[str], by: Sequence[str], *, scale: float = 100.0, digits: int = 1,
              labels: Mapping[str, str] | None = None):
        """A DataFrame with one row per group of ``by`` and one ``"mean ± sd"`` column per metric."""
        import pandas as pd

        groups: dict[tuple, None] = {}
        for r in self.rows:
            groups.setdefault(tuple(r.get(k) for k in by), None)
        out = []
        for key in groups:
            where = dict(zip(by, key))
            row = {k: ("" if v is None else v) for k, v in where.items()}
            for metric in metrics:
                row[(labels or {}).get(metric, metric)] = self.summary(metric, **where).text(scale, digits)
            row["seeds"] = len({r["seed"] for r in self.where(**where).rows})
            out.append(row)
        return pd.DataFrame(out)


# --- the metrics file ----------------------------------------------------------------------------------------
SCHEMA = 2
_REQUIRED = {"schema": int, "chapter": str, "config": str, "settings": dict, "versions": dict, "seconds": float,
             "features": dict, "findings": dict, "claims": list, "runs": list, "extra": dict}


def json_safe(value: Any) -> Any:
    """Plain JSON values: numpy/torch scalars to numbers, tuples to lists, NaN and infinities to None."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return json_safe(value.item())
    if hasattr(value, "tolist"):
        return json_safe(value.tolist())
    return str(value)


def versions() -> dict[str, str]:
    """The versions a result depends on."""
    out = {"python": platform.python_version()}
    for module in ("torch", "transformers", "timm", "open_clip", "numpy"):
        try:
            out[module] = __import__(module).__version__
        except ImportError:  # pragma: no cover
            out[module] = "not installed"
    return out


def arithmetic() -> dict:
    """What a config's ``dtype: auto`` and ``precision: auto`` resolved to on this machine, and why (its CPU's
    bfloat16 units; :mod:`lib.core.precision`): the same config computes in bfloat16 on one machine and in float32
    on another, and a result must say which."""
    from lib.core.precision import cpu_bf16_units, resolve_dtype, resolve_precision

    return {"cpu_bf16_units": list(cpu_bf16_units()), "auto_dtype": resolve_dtype("auto"),
            "auto_precision": resolve_precision("auto")}


def validate_metrics(metrics: Mapping) -> None:
    """Raise ValueError naming the first field that breaks :data:`SCHEMA`."""
    for name, kind in _REQUIRED.items():
        if name not in metrics:
            raise ValueError(f"metrics.json: field {name!r} is missing")
        value = metrics[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind):
            raise ValueError(f"metrics.json: field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    if metrics["schema"] != SCHEMA:
        raise ValueError(f"metrics.json: schema {metrics['schema']} is not {SCHEMA}")
    for key, value in metrics["findings"].items():
        if value is not None and not isinstance(value, (int, float)):
            raise ValueError(f"metrics.json: finding {key!r} must be a number or null, got {value!r}")
    for claim in metrics["claims"]:
        if claim.get("verdict") not in VERDICTS:
            raise ValueError(f"metrics.json: claim {claim.get('id')!r} has verdict {claim.get('verdict')!r}, "
                             f"not one of {VERDICTS}")
    json.dumps(metrics, allow_nan=False)  # strict JSON: raises on NaN or infinity


def write_metrics(output_dir: str | os.PathLike, *, chapter: str, config: str, settings: Any, started: float,
                  runs: Runs | Sequence[Mapping] = (), findings: Mapping[str, Any] | None = None,
                  claims: Sequence[Claim] = (), features: Any = None, extra: Mapping | None = None) -> Path:
    """Write ``<output_dir>/metrics.json`` (atomically) in :data:`SCHEMA`, and return its path.

    ``settings``: the chapter's validated config (a dataclass); ``started``: ``time.time()`` at the start
    of the run; ``features``: the :class:`lib.core.features.Features` of the run (its shard counts are
    recorded); ``extra``: anything else the chapter's tests or the results page read.
    """
    from lib.core import run_cache
    from lib.core.atomic import write_json

    computed, reused = features.counts() if features is not None else (0, 0)
    metrics = json_safe({
        "schema": SCHEMA, "chapter": chapter, "config": config, "settings": settings, "versions": versions(),
        "arithmetic": arithmetic(),
        "seconds": round(time.time() - started, 1),
        "features": {"shards_computed": computed, "shards_reused": reused,
                     "entries": len(features.report) if features is not None else 0},
        "training": run_cache.counts(),  # runs trained here and runs read back (lib.core.run_cache)
        "findings": dict(findings or {}),
        "claims": [c.as_dict() for c in claims],
        "runs": list(runs.rows if isinstance(runs, Runs) else runs),
        "extra": dict(extra or {}),
    })
    if isinstance(metrics["seconds"], int):
        metrics["seconds"] = float(metrics["seconds"])
    validate_metrics(metrics)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    write_json(path, metrics)
    return path


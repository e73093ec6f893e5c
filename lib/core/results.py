"""Results: per-seed runs, mean ± sd, the one paired comparison rule, and claim verdicts.

Why one module: "is A better than B?" must be decided the same way in every chapter, or two chapters could call
the same gap a finding and noise. The rule, stated once (and in the book's introduction), is :data:`RULE`:

    **Every comparison is paired**: A and B are trained with the same seeds on the same splits and scored on the
    same test items, so each seed gives one difference A − B. Its mean comes with a 95 % confidence interval
    (Student's t over the seeds' differences). The paper's claim is **reproduced** when the interval lies on the
    paper's side of 0, **not reproduced** when it lies on the other side, **no effect at this scale** when it lies
    inside ± the smallest effect of interest (the paper's own relative gap applied to this book's baseline), and
    **inconclusive** otherwise, reported with the minimum detectable effect (80 % power) and the seeds it would take.

Why a t-interval over seeds and not a bootstrap over test items as well: the test items here are fixed (every seed
is scored on the same unseen classes), so the seed-to-seed spread is the only randomness the runs sample; the
interval therefore speaks about these test classes. Its coverage and its false-verdict rate are checked by
simulation (tests/test_results_rule.py). A claim against a fixed level (chance) is the one-sample case (:func:`versus`).

See notebooks/sharelock.py, section "What reproduced, what did not", and book/design.md, "The comparison rule".
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "RULE", "Summary", "summarise", "Comparison", "compare", "versus", "stuck", "Claim", "Runs", "VERDICTS",
    "t_quantile", "welch_interval", "POWER", "LEVEL",
]

LEVEL, POWER = 0.95, 0.80
RULE = ("every comparison is paired (same seeds, splits and test items): the mean of the per-seed differences A − B "
        "comes with a 95 % t-interval over the seeds; a claim is reproduced when the interval lies on the paper's "
        "side of 0, not reproduced when it lies on the other side, no effect at this scale when it lies inside ± "
        "the smallest effect of interest (the paper's relative gap applied to our baseline), and inconclusive "
        "otherwise, with the minimum detectable effect (80 % power) and the seeds it would take.")
VERDICTS = ("reproduced", "not reproduced", "no effect at this scale", "inconclusive")
Outcome = Literal["a", "b", "tie", "unclear", "unknown"]


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (``scipy.stats.t.ppf``)."""
    from scipy import stats

    return float(stats.t.ppf(q, df))


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
    """A − B over seeds (:func:`compare`): both summaries, the 95 % interval of the difference, and the outcome.

    ``outcome``: ``"a"`` (the interval lies above 0), ``"b"`` (below 0), ``"unclear"`` (it contains 0) or
    ``"unknown"`` (fewer than two seeds). ``"tie"`` (inside ± a smallest effect of interest) needs that effect:
    :meth:`decide`. ``margin`` is the interval's half-width; ``paired``: the differences were taken seed by seed
    (else Welch's interval for two independent samples).
    """

    a: Summary
    b: Summary
    margin: float | None
    outcome: Outcome
    pairs: int = 0
    diff_sd: float | None = None
    paired: bool = True

    @property
    def difference(self) -> float | None:
        if self.a.mean is None or self.b.mean is None:
            return None
        return self.a.mean - self.b.mean

    @property
    def low(self) -> float | None:
        return None if self.margin is None else self.difference - self.margin

    @property
    def high(self) -> float | None:
        return None if self.margin is None else self.difference + self.margin

    def _df_and_se(self, n: int | None = None) -> tuple[float, float] | None:
        if self.diff_sd is None:
            return None
        n = n or self.pairs
        return n - 1, self.diff_sd / math.sqrt(n)

    @property
    def mde(self) -> float | None:
        """The minimum detectable effect: the true difference this design finds with 80 % power at the 5 % level."""
        found = self._df_and_se()
        if found is None or found[0] < 1:
            return None
        df, se = found
        return (t_quantile(0.5 + LEVEL / 2, df) + t_quantile(POWER, df)) * se

    def seeds_for(self, effect: float | None, most: int = 1000) -> int | None:
        """How many paired seeds would make the MDE no larger than ``effect`` (at the spread measured here)."""
        if effect is None or effect <= 0 or self.diff_sd is None:
            return None
        if self.diff_sd == 0:
            return max(2, self.pairs)
        for n in range(2, most + 1):
            df, se = n - 1, self.diff_sd / math.sqrt(n)
            if (t_quantile(0.5 + LEVEL / 2, df) + t_quantile(POWER, df)) * se <= effect:
                return n
        return None

    def decide(self, smallest: float | None) -> Outcome:
        """The outcome given a smallest effect of interest: ``"tie"`` when the whole interval lies inside ± it."""
        if self.outcome == "unclear" and smallest and -smallest < self.low and self.high < smallest:
            return "tie"
        return self.outcome

    def says(self, name_a: str, name_b: str, scale: float = 100.0, unit: str = " %",
             smallest: float | None = None) -> str:
        """One sentence: both means ± sd, the difference with its interval, and what the interval decides."""
        head = f"{name_a} {self.a.text(scale)}{unit} vs {name_b} {self.b.text(scale)}{unit}"
        if self.outcome == "unknown":
            return f"{head}: too few seeds to judge"
        points = unit.strip() and " points"
        interval = (f"A − B {scale * self.difference:+.2f}{points}, 95 % interval [{scale * self.low:+.2f}, "
                    f"{scale * self.high:+.2f}] over {self.pairs} {'paired seeds' if self.paired else 'seeds'}")
        outcome = self.decide(smallest)
        if outcome in ("a", "b"):
            return f"{head}: {interval}, so {name_a if outcome == 'a' else name_b} is ahead"
        if outcome == "tie":
            return f"{head}: {interval}, inside ± {scale * smallest:.2f}{points}: no effect of the paper's size"
        mde = self.mde
        return f"{head}: {interval}, which contains 0" + (f" (MDE {scale * mde:.2f}{points})" if mde else "")

    @property
    def differences(self) -> tuple[float, ...] | None:
        """The per-seed differences A − B, in seed order (None when unpaired)."""
        if not self.paired or self.a.n != self.b.n:
            return None
        return tuple(x - y for x, y in zip(self.a.values, self.b.values))

    def as_dict(self) -> dict:
        """The comparison as metrics.json keeps it. The per-seed values and differences are kept beside their
        summaries, so that two runs of one claim (e.g. in two arithmetics) can be compared seed by seed."""
        differences = self.differences
        return {"a": {"mean": self.a.mean, "sd": self.a.sd, "n": self.a.n, "values": list(self.a.values)},
                "b": {"mean": self.b.mean, "sd": self.b.sd, "n": self.b.n, "values": list(self.b.values)},
                "margin": self.margin, "outcome": self.outcome, "difference": self.difference, "low": self.low,
                "high": self.high, "pairs": self.pairs, "paired": self.paired, "diff_sd": self.diff_sd,
                "mde": self.mde, "differences": None if differences is None else list(differences)}


def _interval(differences: Sequence[float]) -> tuple[float | None, Outcome, float | None]:
    """Half-width, outcome and sd of the one-sample t-interval of ``differences``."""
    n = len(differences)
    if n < 2:
        return None, "unknown", None
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = t_quantile(0.5 + LEVEL / 2, n - 1) * sd / math.sqrt(n)
    return half, ("a" if mean - half > 0 else "b" if mean + half < 0 else "unclear"), sd


def welch_interval(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """Half-width of Welch's 95 % interval for a difference of two independent means, from each sample's sd and
    size (Welch–Satterthwaite degrees of freedom). Used where pairing is impossible: unequal seed counts, or two
    runs that kept only a mean and sd (the results page's arithmetic shift)."""
    va, vb = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va ** 2 / (n_a - 1)) + (vb ** 2 / (n_b - 1))) if se > 0 else n_a + n_b - 2
    return t_quantile(0.5 + LEVEL / 2, df) * se


def compare(a: Iterable | Summary, b: Iterable | Summary) -> Comparison:
    """:data:`RULE` on per-seed values of A and B, paired seed by seed (value i of A with value i of B: the same
    seed). Two :class:`Summary` objects, or lists of unequal length, cannot be paired: Welch's interval is used."""
    pairable = not isinstance(a, Summary) and not isinstance(b, Summary)
    a = a if isinstance(a, Summary) else summarise(a)
    b = b if isinstance(b, Summary) else summarise(b)
    if pairable and a.n == b.n:
        half, outcome, sd = _interval([x - y for x, y in zip(a.values, b.values)])
        return Comparison(a, b, half, outcome, a.n, sd, True)
    if a.sd is None or b.sd is None:
        return Comparison(a, b, None, "unknown", min(a.n, b.n), None, False)
    half = welch_interval(a.sd, a.n, b.sd, b.n)
    gap = a.mean - b.mean
    outcome = "a" if gap - half > 0 else "b" if gap + half < 0 else "unclear"
    return Comparison(a, b, half, outcome, min(a.n, b.n), None, False)


def versus(a: Iterable | Summary, level: float) -> Comparison:
    """:data:`RULE` against a fixed level (chance): the one-sample interval of A − level."""
    a = a if isinstance(a, Summary) else summarise(a)
    b = Summary((float(level),) * a.n)
    half, outcome, sd = _interval([x - float(level) for x in a.values])
    return Comparison(a, b, half, outcome, a.n, sd, True)


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

    ``paper_pair``: the paper's own A and B numbers; their relative gap ``A / B − 1``, applied to this run's B,
    is the smallest effect of interest (an interval inside ± it is "no effect at this scale", and the MDE is
    judged against it). Without it (a claim against chance, the book's own questions), no such verdict is given.

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
    paper_pair: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.origin not in ("paper", "book"):
            raise ValueError(f"claim {self.id}: origin must be 'paper' or 'book', got {self.origin!r}")

    @property
    def paper_effect(self) -> float | None:
        """The paper's relative gap, ``A / B − 1`` of :attr:`paper_pair`."""
        if not self.paper_pair or not self.paper_pair[1]:
            return None
        return self.paper_pair[0] / self.paper_pair[1] - 1

    @property
    def smallest_effect(self) -> float | None:
        """The paper's relative gap applied to this run's B (in the metric's units), or None."""
        base = self.comparison.b.mean
        if self.paper_effect is None or base is None:
            return None
        return abs(self.paper_effect) * abs(base)

    @property
    def outcome(self) -> Outcome:
        return self.comparison.decide(self.smallest_effect)

    @property
    def verdict(self) -> str:
        outcome = self.outcome
        if self.expected == "tie":
            return "reproduced" if outcome == "tie" else "not reproduced" if outcome in ("a", "b") else "inconclusive"
        if outcome == self.expected:
            return "reproduced"
        if outcome in ("a", "b"):
            return "not reproduced"
        return "no effect at this scale" if outcome == "tie" else "inconclusive"

    @property
    def seeds_needed(self) -> int | None:
        """Paired seeds that would bring the MDE down to the smallest effect of interest (inconclusive claims)."""
        return self.comparison.seeds_for(self.smallest_effect)

    @property
    def power_note(self) -> str:
        """For an inconclusive claim: the MDE against the paper's effect, and the seeds it would take."""
        mde, smallest = self.comparison.mde, self.smallest_effect
        if self.verdict != "inconclusive" or mde is None:
            return ""
        points = self.unit.strip() and " points"
        if smallest is None:
            return f"underpowered for any effect below {self.scale * mde:.2f}{points} (MDE at 80 % power)"
        need = self.seeds_needed
        return (f"underpowered: MDE {self.scale * mde:.2f}{points} against the paper's effect applied here, "
                f"{self.scale * smallest:.2f}{points} ({100 * self.paper_effect:+.0f} %); "
                + (f"about {need} paired seeds would reach it" if need else "no feasible number of seeds reaches it"))

    @property
    def evidence(self) -> str:
        said = self.comparison.says(*self.names, scale=self.scale, unit=self.unit, smallest=self.smallest_effect)
        return f"{said}; {self.power_note}" if self.power_note else said

    @property
    def paper_column(self) -> str:
        """What a table's "paper" column shows: the paper's number and where it is printed, or, for the book's own
        question, where the paper stands (no number)."""
        return f"{self.paper_value} ({self.reference})" if self.paper_value else self.reference

    @property
    def short_evidence(self) -> str:
        """``"A − B +0.30 [−0.20, +0.80] points"`` (or the rank correlation, or "too few seeds"): a table cell."""
        cmp = self.comparison
        if cmp.outcome == "unknown" or cmp.low is None:
            rho = getattr(cmp, "rho", None)
            return f"rho {rho:+.2f}, p = {cmp.p:.3f}" if rho is not None and rho == rho else "too few seeds"
        points = " points" if self.unit.strip() else ""
        said = (f"{self.scale * cmp.difference:+.2f} [{self.scale * cmp.low:+.2f}, {self.scale * cmp.high:+.2f}]"
                f"{points} over {cmp.pairs} seeds")
        if self.verdict == "inconclusive" and cmp.mde is not None:
            said += f"; MDE {self.scale * cmp.mde:.2f}" + (f", about {self.seeds_needed} seeds would reach the paper's "
                                                          "effect" if self.seeds_needed else "")
        return said

    def finding(self) -> str:
        """One line of a chapter's key findings: the verdict, the claim, the evidence, and the paper's number
        (a paper claim) or the label of the book's own question."""
        if self.origin == "book":
            line = f"**{self.verdict}** (the book's own question): {self.statement} — {self.evidence}"
        else:
            line = (f"**{self.verdict}**: {self.statement} — {self.evidence} "
                    f"(paper: {self.paper_value}; {self.reference})")
        return line + (f"; measured: {self.diagnosis}" if self.diagnosis else "")

    def as_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "reference": self.reference,
                "paper_value": self.paper_value, "verdict": self.verdict, "evidence": self.evidence,
                "comparison": self.comparison.as_dict(), "names": list(self.names), "expected": self.expected,
                "diagnosis": self.diagnosis, "origin": self.origin, "paper_pair": self.paper_pair,
                "paper_effect": self.paper_effect, "smallest_effect": self.smallest_effect, "mde": self.comparison.mde,
                "seeds_needed": self.seeds_needed, "outcome": self.outcome, "scale": self.scale, "unit": self.unit}


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

    def by_seed(self, metric: str, **conditions) -> dict[Any, float]:
        """Seed -> the mean of ``metric`` over the selected rows of that seed (finite values only), in seed order."""
        per_seed: dict[Any, list[float]] = {}
        for r in self.where(**conditions).rows:
            v = r.get(metric)
            if v is not None and math.isfinite(float(v)):
                per_seed.setdefault(r["seed"], []).append(float(v))
        return {k: sum(v) / len(v) for k, v in sorted(per_seed.items(), key=lambda kv: str(kv[0]))}

    def values(self, metric: str, **conditions) -> list[float]:
        """One value per seed (the mean over the selected rows of that seed), in seed order."""
        return list(self.by_seed(metric, **conditions).values())

    def summary(self, metric: str, **conditions) -> Summary:
        return summarise(self.values(metric, **conditions))

    def compare(self, metric: str, a: Mapping, b: Mapping) -> Comparison:
        """:func:`compare` of ``metric`` between the rows matching ``a`` and those matching ``b``, paired on the seeds
        both have (a seed that only one side has is left out, so no difference mixes two seeds)."""
        va, vb = self.by_seed(metric, **a), self.by_seed(metric, **b)
        common = [k for k in va if k in vb]
        return compare([va[k] for k in common], [vb[k] for k in common])

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

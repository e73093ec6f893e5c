"""Many claims at once: the p-value behind each claim's interval, Holm's correction within a chapter and over the
book, and how many directional verdicts chance alone would give.

Why: every verdict of the book is decided at 95 % on its own (``lib.core.results.RULE``). With some two dozen claims,
about one directional verdict ("reproduced" or "not reproduced") is expected even if no method differed from
another. The chapters keep the per-claim rule (each page states one claim's evidence); the results page and the
intro report, beside each verdict, whether it survives Holm's step-down correction over its chapter's claims, and
state the book-wide expectation. Holm controls the family-wise error at 5 % under any dependence between the claims,
which here share seeds and runs.

The p-value is the two-sided one of the very test whose interval the rule reads: the one-sample t-test of the
per-seed differences (a paired comparison, or a method against chance), so ``p < 0.05`` exactly when the 95 %
interval excludes 0; a rank-correlation claim keeps the exact permutation p its chapter stored.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

LEVEL = 0.05  # the rule's 95 %
DIRECTIONAL = ("a", "b")  # outcomes whose interval excludes 0: "reproduced" or "not reproduced" of a directional claim


def claim_p_value(claim: Mapping) -> float | None:
    """Two-sided p of the test behind ``claim``'s interval (a claim as ``metrics.json`` stores it), or None when it has
    no test (fewer than two seeds, or no per-seed differences)."""
    from scipy import stats

    comparison = claim.get("comparison") or {}
    if "rho" in comparison:
        return comparison.get("p")
    differences = [float(d) for d in comparison.get("differences") or []]
    n = len(differences)
    if n < 2:
        return None
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    if sd == 0:
        return 0.0 if mean != 0 else 1.0
    return float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values: sorted ascending, the i-th (from 0) of m is multiplied by ``m - i``, then
    made monotone; a claim is significant at 5 % family-wise when its adjusted p is below 0.05."""
    order = sorted(p_values, key=lambda key: p_values[key])
    m, running, out = len(order), 0.0, {}
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[key]))
        out[key] = running
    return out


def directional(claim: Mapping) -> bool:
    """Whether the claim's verdict rests on an interval that excludes 0 (its outcome is A ahead or B ahead)."""
    return claim.get("outcome") in DIRECTIONAL and claim.get("verdict") in ("reproduced", "not reproduced")


def survivors(claims: Iterable[tuple[str, Mapping]]) -> dict[tuple[str, str], dict]:
    """For every ``(chapter, claim)``: its p, its Holm-adjusted p within the chapter and over the book, and whether a
    directional verdict survives each correction. Keyed by ``(chapter, claim id)``."""
    claims = list(claims)
    p = {(chapter, claim["id"]): claim_p_value(claim) for chapter, claim in claims}
    tested = {key: value for key, value in p.items() if value is not None}
    book = holm({f"{c}/{i}": v for (c, i), v in tested.items()})
    out = {}
    for chapter in dict.fromkeys(c for c, _ in claims):
        within = holm({i: v for (c, i), v in tested.items() if c == chapter})
        for c, claim in claims:
            if c != chapter:
                continue
            key = (c, claim["id"])
            adjusted = within.get(claim["id"])
            out[key] = {"p": p[key], "chapter_p": adjusted, "book_p": book.get(f"{c}/{claim['id']}"),
                        "directional": directional(claim),
                        "survives_chapter": directional(claim) and adjusted is not None and adjusted < LEVEL,
                        "survives_book": directional(claim) and book.get(f"{c}/{claim['id']}", 1.0) < LEVEL}
    return out


def summary(claims: Iterable[tuple[str, Mapping]]) -> dict[str, float | int]:
    """The book-wide numbers: claims with a test, the directional verdicts expected if no claim had any effect
    (``tested * 0.05``), the directional verdicts found, and how many survive Holm within their chapter and over the
    book."""
    found = survivors(claims)
    tested = sum(v["p"] is not None for v in found.values())
    return {"tested": tested, "expected_by_chance": tested * LEVEL,
            "directional": sum(v["directional"] for v in found.values()),
            "survive_chapter": sum(v["survives_chapter"] for v in found.values()),
            "survive_book": sum(v["survives_book"] for v in found.values())}

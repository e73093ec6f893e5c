"""tools.multiplicity: the p behind each claim's interval, Holm's correction, and the book-wide expectation."""
from __future__ import annotations

import numpy as np
import pytest

from tools import multiplicity, results_page


def _claim(differences, outcome, verdict, id_="c"):
    return {"id": id_, "outcome": outcome, "verdict": verdict, "comparison": {"differences": list(differences)}}


def test_holm_multiplies_the_sorted_p_values_and_keeps_them_monotone():
    adjusted = multiplicity.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    adjusted = multiplicity.holm({"a": 0.2, "b": 0.9, "c": 0.001, "d": 0.5})
    assert adjusted == pytest.approx({"c": 0.004, "a": 0.6, "d": 1.0, "b": 1.0})
    assert multiplicity.holm({}) == {}


def test_the_p_value_is_the_rules_test_on_every_committed_claim():
    """p < 0.05 exactly when the claim's 95 % interval excludes 0 (the rule's own t-test of the per-seed
    differences), for every claim the chapters wrote; rank correlations keep their stored p."""
    claims = results_page._claims_of(results_page.toc_chapters(), results_page.METRICS)
    assert claims
    for chapter, claim in claims:
        p = multiplicity.claim_p_value(claim)
        comparison = claim["comparison"]
        if "rho" in comparison:
            assert p == comparison["p"]
            continue
        excludes_zero = comparison["low"] > 0 or comparison["high"] < 0
        assert (p < 0.05) == excludes_zero, (chapter, claim["id"], p, comparison["low"], comparison["high"])


def test_one_seed_or_no_spread_is_handled():
    assert multiplicity.claim_p_value(_claim([0.1], "unknown", "inconclusive")) is None
    assert multiplicity.claim_p_value(_claim([0.1, 0.1, 0.1], "a", "reproduced")) < 1e-12
    assert multiplicity.claim_p_value(_claim([0.0, 0.0], "unclear", "inconclusive")) == 1.0


def test_holm_holds_the_family_wise_error_where_the_per_claim_rule_does_not():
    """Simulated families of 12 null claims (true difference 0), 7 paired seeds each: the per-claim rule gives at least
    one directional verdict in about 1 − 0.95^12 = 46 % of families; Holm's correction in at most 5 %."""
    rng = np.random.default_rng(0)
    families, m, seeds = 2000, 12, 7
    any_raw = any_holm = 0
    for _ in range(families):
        p = {str(i): multiplicity.claim_p_value(_claim(rng.normal(0, 1, seeds), "unclear", "inconclusive"))
             for i in range(m)}
        any_raw += min(p.values()) < 0.05
        any_holm += min(multiplicity.holm(p).values()) < 0.05
    assert 0.40 < any_raw / families < 0.52
    assert any_holm / families < 0.05 + 3 * (0.05 * 0.95 / families) ** 0.5


def test_survivors_correct_within_each_chapter_and_over_the_book():
    strong = [0.10, 0.11, 0.12, 0.09, 0.10]  # p ~ 1e-6
    weak = [0.05, 0.01, 0.06, 0.02, 0.04]  # p ~ 0.018: survives alone, not beside three others
    claims = [("one", _claim(strong, "a", "reproduced", "s1")), ("one", _claim(weak, "a", "reproduced", "w1")),
              ("one", _claim([0.3, -0.2, 0.1, -0.1, 0.0], "unclear", "inconclusive", "n1")),
              ("one", _claim([0.2, -0.3, 0.1, 0.0, -0.1], "unclear", "inconclusive", "n2")),
              ("two", _claim(weak, "b", "not reproduced", "w2"))]
    found = multiplicity.survivors(claims)
    assert found[("one", "s1")]["survives_chapter"] and found[("one", "s1")]["survives_book"]
    assert multiplicity.claim_p_value(claims[1][1]) < 0.05
    assert not found[("one", "w1")]["survives_chapter"]
    assert found[("two", "w2")]["survives_chapter"] and not found[("two", "w2")]["survives_book"]
    assert not found[("one", "n1")]["directional"]
    summary = multiplicity.summary(claims)
    assert summary == {"tested": 5, "expected_by_chance": pytest.approx(0.25), "directional": 3, "survive_chapter": 2,
                       "survive_book": 1}


def test_the_results_page_says_how_many_verdicts_survive_and_marks_the_others():
    chapters = results_page.toc_chapters()
    found = multiplicity.summary(results_page._claims_of(chapters, results_page.METRICS))
    page = results_page.render()
    assert f"The book tests {found['tested']} claims" in page
    assert f"{found['survive_chapter']} survive Holm's correction over their chapter's claims" in page
    if found["survive_chapter"] < found["directional"]:
        assert results_page.HOLM_MARK in page and results_page.HOLM_NOTE in page


def test_the_seeds_a_claim_would_need_come_with_the_range_its_measured_spread_allows():
    """Issue 61, item 14: "about N seeds" rests on a spread estimated from few seeds; its 90 % range brackets N for
    every committed claim and narrows as the seeds grow."""
    for _, claim in results_page._claims_of(results_page.toc_chapters(), results_page.METRICS):
        found = results_page.seeds_needed_range(claim)
        if claim.get("seeds_needed") and found:
            low, high = found
            assert low <= claim["seeds_needed"] <= high, (claim["id"], found, claim["seeds_needed"])
    few = {"smallest_effect": 0.01, "comparison": {"diff_sd": 0.03, "pairs": 5}}
    many = {"smallest_effect": 0.01, "comparison": {"diff_sd": 0.03, "pairs": 50}}
    (a, b), (c, d) = results_page.seeds_needed_range(few), results_page.seeds_needed_range(many)
    assert a < c <= d < b
    assert results_page.seeds_needed_range({"smallest_effect": None, "comparison": few["comparison"]}) is None


def test_two_runs_count_as_equal_only_when_the_shifts_90_percent_interval_sits_inside_the_margin():
    """Issue 61, item 13: an interval that holds 0 is not equivalence; two one-sided tests at 5 % are."""
    inside = results_page.Shift(0.01, -0.05, 0.07, 0.2, True, -0.03, 0.05)
    wide = results_page.Shift(0.01, -0.5, 0.52, 0.2, True, -0.4, 0.42)  # holds 0, yet not shown equal
    assert results_page.equivalent(inside, 0.1) is True
    assert results_page.equivalent(wide, 0.1) is False
    assert results_page.equivalent(inside, None) is None
    assert results_page.equivalence_margin({"smallest_effect": 0.3}, inside) == 0.3
    assert results_page.equivalence_margin({"smallest_effect": None}, inside) == 0.2  # the MDE

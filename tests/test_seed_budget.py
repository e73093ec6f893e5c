"""tools.seed_budget: each claim judged again on its first k paired seeds, in both arithmetics."""
import json

import pytest

from lib.core.results import Claim, compare
from tools import seed_budget


def record(claim_id: str, differences: list[float], expected: str = "a", paper_pair=None, **extra) -> dict:
    """A metrics.json claim whose per-seed A − B are ``differences`` (B is 0.5 on every seed)."""
    b = [0.5] * len(differences)
    claim = Claim(id=claim_id, statement=claim_id, reference="§1", names=("A", "B"), expected=expected,
                  comparison=compare([0.5 + d for d in differences], b),
                  paper_pair=tuple(paper_pair) if paper_pair else None)
    return {**claim.as_dict(), **extra}


def test_a_claim_on_its_first_k_seeds_is_the_rule_on_those_seeds_only():
    full = record("x", [0.02, 0.01, 0.021, 0.019, 0.02, 0.022])
    again = seed_budget.claim_on_first(full, 6)
    assert again.verdict == full["verdict"] == "reproduced"
    assert again.comparison.difference == pytest.approx(full["comparison"]["difference"])
    two = seed_budget.claim_on_first(full, 2)
    assert two.comparison.pairs == 2 and two.comparison.difference == pytest.approx(0.015)
    assert two.verdict == "inconclusive"  # +0.02 and +0.01 on two seeds: t(1) makes the interval hold 0


def test_fewest_is_where_every_longer_prefix_gives_the_full_verdict_in_both_arithmetics():
    # Shown run: reproduced from 3 seeds on. Kept run (the other arithmetic): only from 5 on.
    shown = {"claims": [record("x", [0.02, 0.01, 0.021, 0.019, 0.02, 0.022])]}
    kept = {"claims": [record("x", [0.02, 0.0, 0.021, 0.019, 0.02, 0.022])]}
    [alone] = seed_budget.budget("ch", shown, None)
    [both] = seed_budget.budget("ch", shown, kept)
    assert alone.by_seeds == {"shown": ["inconclusive"] + ["reproduced"] * 4} and alone.fewest == 3
    assert both.by_seeds["kept"] == ["inconclusive"] * 3 + ["reproduced"] * 2 and both.fewest == 5
    assert both.seeds == 6 and both.verdict == "reproduced"
    # a kept run with another seed count cannot be matched prefix by prefix: the shown run decides alone
    shorter = {"claims": [record("x", [0.02, 0.0, 0.021, 0.019, 0.02])]}
    assert seed_budget.budget("ch", shown, shorter)[0].fewest == 3


def test_the_mde_grows_as_seeds_are_dropped_and_claims_not_judged_over_seeds_are_skipped():
    late = record("late", [0.02, -0.01, 0.021, 0.019, 0.02, 0.022])  # reproduced on all 6 seeds only
    [at_all] = seed_budget.budget("ch", {"claims": [late]}, None)
    assert at_all.fewest == 6 and at_all.mde_at_fewest == pytest.approx(100 * late["mde"])
    rank = record("rho", [0.1, 0.2, 0.3])
    rank["comparison"]["rho"] = 0.4  # a rank correlation over models: not a paired rule over seeds
    steady = record("s", [0.02, 0.021, 0.019, 0.02], paper_pair=(50.0, 40.0))
    rows = seed_budget.budget("ch", {"claims": [rank, steady]}, None)
    assert [r.claim for r in rows] == ["s"]
    assert rows[0].fewest == 2 and rows[0].smallest_effect == pytest.approx(100 * 0.25 * 0.5)
    assert rows[0].mde_at_fewest > 100 * steady["mde"] * (4 / 2) ** 0.5  # fewer pairs: a wider t and a larger SE


def test_the_command_prints_one_row_per_claim_and_names_a_missing_chapter(tmp_path, capsys):
    (tmp_path / "ch.json").write_text(json.dumps({"claims": [record("x", [0.02, 0.021, 0.019])]}))
    assert seed_budget.main(["--metrics", str(tmp_path), "ch"]) == 0
    out = capsys.readouterr().out
    assert "| ch | x | reproduced | 3 | 2 |" in out and "- ch: 2 of 3 seeds keep all 1 verdicts" in out
    with pytest.raises(SystemExit, match="no .*other.json"):
        seed_budget.main(["--metrics", str(tmp_path), "other"])


def test_a_kept_run_is_read_only_where_the_results_page_pairs_it_with_the_shown_run(tmp_path):
    """The other arithmetic's run counts only as the same experiment (tools.results_page.arithmetic_pairs): a kept
    run with other seeds, say, judges other runs, and its prefixes say nothing about the shown one."""
    def metrics(dtype: str, seeds: list[int]) -> dict:
        return {"config": "medium", "settings": {"seeds": seeds, "text": [{"name": "m", "dtype": dtype}]},
                "claims": [record("x", [0.02, 0.021, 0.019][: len(seeds)])]}

    (tmp_path / "float32").mkdir()
    (tmp_path / "ch.json").write_text(json.dumps(metrics("bfloat16", [0, 1, 2])))
    (tmp_path / "float32" / "ch.json").write_text(json.dumps(metrics("float32", [0, 1, 2])))
    shown, kept = seed_budget.load("ch", tmp_path)
    assert kept["settings"]["text"][0]["dtype"] == "float32"
    assert set(seed_budget.budget("ch", shown, kept)[0].by_seeds) == {"shown", "kept"}
    (tmp_path / "float32" / "ch.json").write_text(json.dumps(metrics("float32", [0, 1])))
    assert seed_budget.load("ch", tmp_path)[1] is None

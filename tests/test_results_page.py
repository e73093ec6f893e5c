"""The results page is generated, complete, and in step with the chapters and the papers' numbers.

* book/results.md is exactly what tools/results_page.py renders from book/papers.yaml and the
  committed book/metrics/<chapter>.json (the metrics of the executed notebooks the book shows);
* every chapter of _toc.yml has its section, its paper numbers (with their table reference) and
  every small-config analogue value on the page;
* a metric that papers.yaml names but a chapter does not write is an error naming chapter and key;
* the chapters as they run *now* (nbval's runs of this session) still write every metric the page
  needs, so a renamed metric fails here rather than at the next `make book`.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import SESSION_START
from tools import results_page

PAPERS = results_page.load_papers()
CHAPTERS = results_page.toc_chapters()


def test_committed_page_is_the_rendering_of_the_committed_metrics():
    assert results_page.PAGE.read_text() == results_page.render(), "run `python -m tools.results_page`"


def test_the_intro_opens_with_the_findings_of_the_committed_metrics():
    """The intro's first section is generated: one sentence per paper, then the verdict table (and, in a fold, the
    seeds, the power and the arithmetic), all from the committed metrics."""
    intro = results_page.INTRO.read_text(encoding="utf-8")
    assert intro == results_page.render_intro(intro, results_page.intro_findings()), \
        "run `python -m tools.results_page`"
    opening = "\n## ".join(intro.split("\n## ")[:2])  # the title's paragraph and the first section
    assert results_page.INTRO_MARKERS[0] in opening and re.search(r"reproduced|inconclusive|no effect", opening)
    findings = opening.split(results_page.INTRO_MARKERS[0])[1]
    sentences = [line for line in findings.splitlines() if line.startswith("- **")]
    assert [s.split("**")[1] for s in sentences[:len(CHAPTERS)]] == [PAPERS[c]["title"] for c in CHAPTERS]
    assert findings.index(sentences[len(CHAPTERS) - 1]) < findings.index("| chapter | claim | paper |")
    assert findings.index("| chapter | claim | paper |") < findings.index(":::{dropdown}")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_its_numbers_and_verdicts_on_the_page(chapter):
    page = results_page.PAGE.read_text(encoding="utf-8")
    info = PAPERS[chapter]
    metrics = results_page.load_metrics(chapter)
    assert f"## {info['title']}" in page
    for claim in info["claims"]:
        assert f"{claim['paper']:.1f} % ({claim['ref']})" in page
        for analogue in claim["analogues"]:
            value = results_page.lookup(metrics, analogue["metric"], chapter)
            assert f"| {results_page.fmt(value, analogue.get('percent', False))} |" in page, analogue["label"]
    assert metrics["claims"], f"{chapter} tested no claim"
    rows = {claim["id"]: row for origin in ("paper", "book") for ch, claim, row in
            results_page.table_rows(PAPERS, CHAPTERS, results_page.METRICS, origin) if ch == chapter}
    for claim in metrics["claims"]:
        row = rows[claim["id"]]
        shown = row if claim.get("origin", "paper") == "paper" else [c for i, c in enumerate(row) if i != 1]
        assert "| " + " | ".join(results_page._cell(c) for c in shown) + " |" in page, claim["id"]
        assert claim["statement"] in page and f"**{results_page.label(claim)}**: " in page
    if "full_run" not in info:  # the full-config column is shown only where a full run exists
        assert "full config, this book" not in page.split(f"## {info['title']}")[1].split("\n## ")[0]


def test_a_missing_metric_is_an_error_naming_chapter_and_key(tmp_path):
    for chapter in CHAPTERS:
        shutil.copy(results_page.METRICS / f"{chapter}.json", tmp_path / f"{chapter}.json")
    broken = json.loads((tmp_path / "sharelock.json").read_text())
    del broken["findings"]["sharelock_unseen_acc1"]
    (tmp_path / "sharelock.json").write_text(json.dumps(broken))
    with pytest.raises(results_page.MissingMetric,
                       match=r"sharelock: metrics.json has no 'findings.sharelock_unseen_acc1'"):
        results_page.render(metrics_dir=tmp_path)


def test_a_chapter_without_metrics_or_paper_entry_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"fdt.json is missing: run the chapter"):
        results_page.render(metrics_dir=tmp_path, chapters=["fdt"])
    with pytest.raises(results_page.MissingMetric, match="not in book/papers.yaml"):
        results_page.render(metrics_dir=tmp_path, chapters=["a_new_chapter"])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_chapter_as_run_now_still_writes_every_metric_the_page_needs(chapter):
    """nbval ran the notebooks first in this session (make test); their fresh metrics must serve the page."""
    fresh = results_page.ROOT / "notebooks" / "runs" / chapter / "metrics.json"
    if not fresh.is_file() or fresh.stat().st_mtime < SESSION_START:
        pytest.skip(f"{chapter} was not run by nbval in this session (run `make test`, which runs it first)")
    from tools.run_notebooks import shown_configs

    shown = shown_configs()[chapter]
    if shown != "small":  # the page reads the committed run of that config (test_committed_page_is_the_rendering_...)
        pytest.skip(f"{chapter} is shown in {shown}; its page metrics come from that run, not nbval's small one")
    metrics = json.loads(fresh.read_text(encoding="utf-8"))
    assert metrics.get("config") == "small" and metrics["claims"]
    for claim in PAPERS[chapter]["claims"]:
        for analogue in claim["analogues"]:
            value = results_page.lookup(metrics, analogue["metric"], chapter)
            results_page.fmt(value, analogue.get("percent", False))  # a finite number


def test_the_figure_shows_every_two_method_claim_as_a_difference_with_its_interval(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from PIL import Image

    path = results_page.figure(path=tmp_path / "results.png")
    width, height = Image.open(path).size
    rows = [c for ch in CHAPTERS for c in results_page.load_metrics(ch).get("claims", [])
            if "rho" not in c["comparison"] and c["names"][1] != "chance" and c["comparison"].get("low") is not None]
    assert rows and width >= 1000 and height > 50 * len(rows)  # 150 dpi; one row per claim
    page = results_page.PAGE.read_text(encoding="utf-8")
    assert "figures/claims-differences-with-intervals.png" in page and results_page.FIGURE.is_file()


def test_the_page_opens_with_the_verdict_counts_and_a_table_of_every_claim():
    """The summary is a table (chapter, claim, paper, this book's two arms, A − B with its interval, verdict), one
    row per claim, each claim named by its short label; no semicolon prose."""
    page = results_page.PAGE.read_text(encoding="utf-8")
    first_screen = page.split("\n## ")[0]
    assert re.search(r"\*\*Of the papers' \d+ claims tested offline: ", first_screen)
    table = first_screen.split("| chapter | claim | paper | this book, % |")[1]
    for chapter in CHAPTERS:
        assert f"\n| {PAPERS[chapter]['title']} | " in table
        for claim in results_page.load_metrics(chapter)["claims"]:
            assert f"| {results_page._cell(results_page.verdict_row(claim)[0])}" in first_screen, claim["id"]
    assert "; " not in " ".join(line for line in first_screen.splitlines() if line.startswith("- **"))


def test_each_paper_claim_is_counted_once_where_two_chapters_test_it():
    """Issue 61, item 6: ShareLock's and ViTeRB's tests of one Table 1 claim show as two rows, counted once."""
    paper = [(ch, c) for ch in CHAPTERS for c in results_page.load_metrics(ch)["claims"] if c["origin"] == "paper"]
    twice = [(ch, c) for ch, c in paper if results_page.SAME_CLAIM.get((ch, c["id"]), (None,))[0] in CHAPTERS]
    primaries = {(ch, c["id"]) for ch, c in paper}
    assert all(results_page.SAME_CLAIM[(ch, c["id"])] in primaries for ch, c in twice)  # the primary is tested
    page = results_page.PAGE.read_text(encoding="utf-8")
    assert f"**Of the papers' {len(paper) - len(twice)} claims tested offline: " in page
    for chapter, claim in twice:
        primary = results_page.SAME_CLAIM[(chapter, claim["id"])][0]
        assert f"(the claim of {PAPERS[primary]['title']}'s row; counted there)" in page, claim["id"]


def _claims():
    return [(chapter, claim) for chapter in CHAPTERS for claim in results_page.load_metrics(chapter)["claims"]]


def test_every_claim_has_a_short_unique_label_naming_what_is_compared_on_what():
    """A label per claim id (tools.results_page.LABELS): "A vs B, on what"; a paper claim's label names its table."""
    labels = {}
    for chapter, claim in _claims():
        assert claim["id"] in results_page.LABELS, f"{chapter}: claim {claim['id']} has no label in LABELS"
        text = results_page.label(claim)
        assert " vs " in text and "," in text and len(text) <= 80, text
        if claim.get("origin", "paper") == "paper":
            assert re.search(r"\((Table \w+|Figure \d+|§[\d.]+)\)$", text), text
        assert text not in labels, f"{claim['id']} and {labels.get(text)} share the label {text!r}"
        labels[text] = claim["id"]
    assert not set(results_page.LABELS) - {claim["id"] for _, claim in _claims()}, "a label for no claim"


def test_no_table_cell_of_the_generated_pages_is_longer_than_300_characters():
    """Long texts (a claim's statement, its evidence, its diagnosis, what an analogue shows) are lines of their own,
    never cells; a diagnosis is never glued onto a verdict's text."""
    intro = results_page.INTRO.read_text(encoding="utf-8")
    for name, text in (("results.md", results_page.PAGE.read_text(encoding="utf-8")), ("intro.md", intro)):
        cells = [cell.strip() for line in text.splitlines() if line.startswith("|")
                 for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert cells, name
        long = [cell[:80] for cell in cells if len(cell) > 300]
        assert not long, f"{name}: {len(long)} cells over 300 characters, e.g. {long[0]!r}"
        assert not [cell for cell in cells if "Diagnosis" in cell], f"{name}: a diagnosis in a table cell"


REFERENCE = re.compile(r"\b(Tables?|Figure|Fig\.|Section|Appendix|abstract)\b|§\s?\d|\bA\.\d")


@pytest.mark.parametrize("chapter", sorted(PAPERS))
def test_every_paper_number_carries_a_table_or_section_reference(chapter):
    for claim in PAPERS[chapter]["claims"]:
        ref = str(claim.get("ref", ""))
        assert REFERENCE.search(ref), f"{chapter}: {claim['claim']!r} has no table or section reference ({ref!r})"
        assert "not yet located" not in ref and "DESIGN" not in ref, f"{chapter}: {ref!r}"


def test_the_stability_table_sets_each_verdict_beside_the_float32_runs(tmp_path):
    now, before = tmp_path / "now", tmp_path / "before"
    now.mkdir(), before.mkdir()
    on_bf16 = {"cpu_bf16_units": ["amx_bf16"], "auto_dtype": "bfloat16", "auto_precision": "bf16"}
    on_fp32 = {"cpu_bf16_units": [], "auto_dtype": "float32", "auto_precision": "fp32"}

    def run(path, verdicts, dtype="auto", seeds=(0, 1, 2), arithmetic=on_bf16, config="medium"):
        precision = {"auto": "auto", "float32": "fp32"}[dtype]
        path.write_text(json.dumps({
            "config": config, "arithmetic": arithmetic,
            "settings": {"seeds": list(seeds), "text": [{"name": "m", "dtype": dtype}],
                         "train": {"precision": precision}},
            "claims": [{"id": k, "statement": f"claim {k}", "verdict": v} for k, v in verdicts.items()]}))

    shown = {"x": "reproduced", "y": "inconclusive", "z": "not reproduced", "new": "reproduced"}
    kept = {"x": "reproduced", "y": "reproduced", "z": "reproduced", "gone": "inconclusive"}
    run(now / "a.json", shown)
    run(before / "a.json", kept, dtype="float32")
    papers = {"a": {"title": "Chapter A"}}
    rows = results_page.stability_rows(papers, ["a"], now, before)
    assert [(r[1], r[-1]) for r in rows] == [("claim x", "same"), ("claim y", "changed"), ("claim z", "**opposite**")]
    assert [r[2] for r in rows] == ["✓ reproduced"] * 3  # the float32 run's column holds the float32 verdicts
    section = "\n".join(results_page.stability_section(papers, ["a"], now, before))
    assert ("Of 3 claims, **1 keep their verdict**, 1 change between a verdict and another that is not its opposite, "
            "and 1 turn") in section
    assert "resolved to bfloat16 features and bf16 training (the CPU's bfloat16 units: amx_bf16)" in section
    assert "the book shows the bfloat16 run of Chapter A" in section
    assert results_page.stability_section(papers, ["a"], now, tmp_path / "absent") == []
    other = tmp_path / "other"
    other.mkdir()
    run(other / "a.json", kept, dtype="float32", config="small")
    assert results_page.stability_rows(papers, ["a"], now, other) == []  # another config: nothing to compare
    redesigned = tmp_path / "redesigned"
    redesigned.mkdir()
    run(redesigned / "a.json", kept, dtype="float32", seeds=(0, 1))
    assert results_page.stability_rows(papers, ["a"], now, redesigned) == []  # other seeds: not an arithmetic check
    # A shown run whose `auto` meant float32 (a CPU without bfloat16 units) pairs with a bfloat16 run of it instead,
    # and is the float32 column; beside an explicit float32 run it has nothing to compare.
    cpu_without, bf16 = tmp_path / "cpu_without", tmp_path / "bf16"
    cpu_without.mkdir(), bf16.mkdir()
    run(cpu_without / "a.json", kept, arithmetic=on_fp32)
    assert results_page.stability_rows(papers, ["a"], cpu_without, before) == []
    run(bf16 / "a.json", shown)
    rows = results_page.stability_rows(papers, ["a"], cpu_without, [before, bf16])
    assert [r[2] for r in rows] == ["✓ reproduced"] * 3 and rows[1][3] == "? inconclusive"
    section = "\n".join(results_page.stability_section(papers, ["a"], cpu_without, [before, bf16]))
    assert "the book shows the float32 run of Chapter A" in section


def test_chapters_run_on_different_bfloat16_units_are_named_per_group(tmp_path):
    """Runs from two machines (AMX and AVX512-BF16) are both bfloat16, but the page says which chapter ran where
    rather than hiding the difference behind one word."""
    now, before = tmp_path / "now", tmp_path / "before"
    now.mkdir(), before.mkdir()
    units = {"a": ["avx512_bf16"], "b": ["avx512_bf16"], "c": ["amx_bf16", "avx512_bf16"]}
    for chapter, found in units.items():
        for path, dtype, precision in ((now, "auto", "auto"), (before, "float32", "fp32")):
            path.joinpath(f"{chapter}.json").write_text(json.dumps({
                "config": "medium",
                "arithmetic": {"cpu_bf16_units": found, "auto_dtype": "bfloat16", "auto_precision": "bf16"},
                "settings": {"seeds": [0, 1, 2], "text": [{"name": "m", "dtype": dtype}],
                             "train": {"precision": precision}},
                "claims": [{"id": "x", "statement": "claim x", "verdict": "reproduced"}]}))
    papers = {c: {"title": f"Chapter {c.upper()}"} for c in units}
    section = "\n".join(results_page.stability_section(papers, list(units), now, before))
    assert ("resolved to bfloat16 features and bf16 training (the CPU's bfloat16 units: avx512_bf16 for Chapter A "
            "and Chapter B; amx_bf16, avx512_bf16 for Chapter C)") in section


def test_a_verdict_that_moves_shows_both_intervals_and_whether_they_overlap():
    def claim(verdict, low, high):
        return {"verdict": verdict, "scale": 100.0, "unit": " %",
                "comparison": {"difference": (low + high) / 2, "low": low, "high": high, "paired": True}}

    edge, across = claim("reproduced", 0.001, 0.009), claim("inconclusive", -0.001, 0.007)
    assert results_page._interval_text(edge) == "✓ reproduced, +0.50 [+0.10, +0.90] points"
    assert results_page._agreement(edge, edge) == "same"
    assert results_page._agreement(edge, across) == "changed; the intervals overlap: on a boundary of the rule"
    flipped = claim("not reproduced", -0.009, -0.002)
    assert results_page._agreement(edge, flipped) == "**opposite**; the intervals do not overlap"
    rank = {"verdict": "inconclusive", "comparison": {"rho": 0.2, "p": 0.4}}
    assert results_page._interval_text(rank) == "? inconclusive"  # a rank correlation has no interval to show


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_claim_says_whether_the_paper_or_the_book_makes_it(chapter):
    """A paper claim cites a table, figure or section that book/papers.yaml quotes for that chapter, and carries the
    paper's number; a book claim (the book's own question) carries no paper number, so no reader sets one beside it."""
    quoted = json.dumps(PAPERS[chapter], ensure_ascii=False)
    for claim in results_page.load_metrics(chapter)["claims"]:
        assert claim.get("origin") in ("paper", "book"), f"{chapter}: {claim['id']} says neither paper nor book"
        if claim["origin"] == "book":
            assert not claim.get("paper_value"), f"{chapter}: the book's question {claim['id']} carries a paper number"
            continue
        cited = re.findall(r"Table \w+|Figure \d+|§[\d.]+|abstract", claim["reference"])
        assert cited, f"{chapter}: paper claim {claim['id']} cites no table, figure or section ({claim['reference']!r})"
        assert any(c in quoted for c in cited), (
            f"{chapter}: paper claim {claim['id']} cites {cited}, none of which book/papers.yaml quotes for {chapter}")
        assert claim.get("paper_value"), f"{chapter}: paper claim {claim['id']} has no paper number beside it"


def test_a_run_computes_in_what_its_settings_and_machine_resolve():
    bf16_cpu = {"auto_dtype": "bfloat16", "auto_precision": "bf16", "cpu_bf16_units": ["avx512_bf16"]}
    overridden = {"vision": {"dtype": "float32"}, "text": [{"dtype": "float32"}], "train": {"precision": "fp32"}}
    shown = {"vision": {"dtype": "auto"}, "text": [{"dtype": "auto"}], "train": {"precision": "auto"}}
    assert results_page.arithmetic_of({"settings": overridden, "arithmetic": bf16_cpu}) == "float32"
    assert results_page.arithmetic_of({"settings": shown, "arithmetic": bf16_cpu}) == "bfloat16"
    without = {"auto_dtype": "float32", "auto_precision": "fp32", "cpu_bf16_units": []}
    assert results_page.arithmetic_of({"settings": shown, "arithmetic": without}) == "float32"
    # Three Towers' third tower is float32 by its config; only its training's `auto` precision moves.
    towers = {"third": {"dtype": "float32"}, "train": {"precision": "auto"}}
    assert results_page.arithmetic_of({"settings": towers, "arithmetic": bf16_cpu}) == "bfloat16"


def test_the_arithmetic_shift_is_welchs_interval_of_the_two_runs_differences():
    """The shift column equals lib.core.results.compare's Welch interval on the two runs' per-seed differences
    (the one rule's implementation), computed from the mean, sd and count that the metrics keep."""
    from lib.core.results import compare, summarise

    float32_diffs, bfloat16_diffs = [0.010, 0.004, 0.007, 0.012, 0.001], [0.006, 0.009, 0.002, 0.005, 0.004]

    def claim(diffs, verdict):
        found = summarise(diffs)
        return {"verdict": verdict, "scale": 100.0, "unit": " %",
                "comparison": {"difference": found.mean, "diff_sd": found.sd, "pairs": found.n, "mde": 0.004,
                               "low": found.mean - 0.003, "high": found.mean + 0.003, "paired": True}}

    old, new = claim(float32_diffs, "reproduced"), claim(bfloat16_diffs, "inconclusive")
    reference = compare(summarise(bfloat16_diffs), summarise(float32_diffs))  # Summary objects: Welch's interval
    found = results_page.arithmetic_shift(old, new)
    assert not reference.paired
    assert found.shift == pytest.approx(reference.difference)
    assert (found.low, found.high) == (pytest.approx(reference.low), pytest.approx(reference.high))
    assert found.mde == 0.004
    assert results_page._shift_text(found, new).startswith(f"{100 * reference.difference:+.2f} [")
    rank = {"verdict": "inconclusive", "comparison": {"rho": 0.2, "p": 0.4}}
    assert results_page.arithmetic_shift(rank, rank) is None  # a rank correlation has no spread of differences
    assert results_page._shift_text(None, rank) == "–"
    assert not found.paired and "Welch" in results_page._shift_text(found, new)
    # A shift far beyond both runs' noise is counted as one.
    far = claim([d + 0.05 for d in bfloat16_diffs], "reproduced")
    shifted = results_page.arithmetic_shift(old, far)
    assert shifted.low > 0


def test_runs_that_kept_their_seeds_are_compared_seed_by_seed():
    """With each run's per-seed differences (``comparison.differences``), the shift is the paired interval over
    seeds, which sees a small shift that is the same on every seed although the seeds themselves scatter widely."""
    from lib.core.results import compare

    float32_a, b = [0.10, 0.30, 0.20, 0.50, 0.40], [0.05, 0.20, 0.15, 0.30, 0.35]
    bfloat16_a = [x + 0.01 + 0.001 * i for i, x in enumerate(float32_a)]  # every seed moved up by about 1 point

    def claim(a):
        kept = compare(a, b).as_dict()
        return {"verdict": "reproduced", "scale": 100.0,
                "comparison": {**kept, "differences": [x - y for x, y in zip(a, b)]}}

    old, new = claim(float32_a), claim(bfloat16_a)
    found = results_page.arithmetic_shift(old, new)
    assert found.paired and found.shift == pytest.approx(0.012)
    assert 0 < found.low < found.high < 0.02  # paired: the shift is seen ...
    welch = results_page.arithmetic_shift(
        {**old, "comparison": {**old["comparison"], "differences": None}}, new)
    assert not welch.paired and welch.low < 0 < welch.high  # ... where Welch's interval cannot see it
    assert "Welch" not in results_page._shift_text(found, new)

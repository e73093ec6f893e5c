"""Render ``book/results.md``: every paper's headline numbers beside this book's, from data only.

The page is never edited by hand. Its two inputs are

* ``book/papers.yaml``: each paper's headline numbers with their table reference, what a full-config
  run needs, and which offline metric (of the config book/configs.yaml shows) is the analogue of each number (a
  path of keys into the chapter's ``metrics.json``), with one sentence on what the analogue shows;
* ``book/metrics/<chapter>.json``: the ``metrics.json`` that each chapter's notebook wrote when
  ``make book`` executed it (``tools/run_notebooks.py`` copies it there beside the executed notebook).

A third, optional input, ``book/metrics/float32/<chapter>.json`` or ``book/metrics/bfloat16/<chapter>.json``, holds
the metrics of the chapter's shown config run in the other arithmetic: float32 throughout (papermill with
``overrides`` of the ``dtype`` / ``precision`` keys) beside a run whose ``auto`` meant bfloat16, or a run on a CPU
with bfloat16 units beside one whose ``auto`` meant float32. The page's last section sets the two runs' verdicts and
intervals side by side, so a reader sees which verdicts survive a change of arithmetic (:func:`stability_rows`).

``python -m tools.results_page`` writes the page (``make book`` runs it before building the book);
``--metrics DIR`` reads ``DIR/<chapter>.json`` instead, and ``--check`` fails if the committed page
differs from a fresh rendering. A metric named in ``papers.yaml`` that a chapter no longer writes is
an error naming the chapter and the key, so the page cannot silently lose a number
(``tests/test_results_page.py``); a metrics file that is not valid JSON, or holds a claim that the rule could not
have produced (a number that is not finite, no seeds, a verdict its interval contradicts) is refused in one line
naming the file and the claim (:func:`check_claims`), before anything is rendered from it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

import yaml

from tools import multiplicity

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / "book" / "papers.yaml"
METRICS = ROOT / "book" / "metrics"
REFERENCE_RUNS = (METRICS / "float32", METRICS / "bfloat16")  # the same configs in the other arithmetic (docstring)
PAGE = ROOT / "book" / "results.md"
FIGURE = ROOT / "book" / "figures" / "claims-differences-with-intervals.png"


class MissingMetric(KeyError):
    """A metric that ``book/papers.yaml`` names is not in the chapter's ``metrics.json``."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class BadMetrics(ValueError):
    """A ``metrics.json`` that is not valid JSON or holds a claim the rule could not have produced: one line,
    ``<file>: claim <id>: <what is wrong>``."""


def load_papers(path: Path = PAPERS) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))["chapters"]


def toc_chapters() -> list[str]:
    """Chapter names in ``_toc.yml`` order (the notebooks of the book)."""
    from tools.run_notebooks import chapters

    return [path.stem for path in chapters()]


def load_metrics(chapter: str, metrics_dir: Path = METRICS) -> dict:
    path = metrics_dir / f"{chapter}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the chapter (`python -m tools.run_notebooks {chapter}`), "
                                f"which copies its metrics.json there")
    return parse_metrics(path.read_text(encoding="utf-8"), path)


def parse_metrics(text: str, path: Path | str) -> dict:
    """A chapter's ``metrics.json`` read from ``text``, its claims checked (:func:`check_claims`)."""
    try:
        metrics = json.loads(text)
    except ValueError as error:
        raise BadMetrics(f"{path}: not valid JSON ({error}): run the chapter again, or restore the file from "
                         "git") from None
    check_claims(metrics, path)
    return metrics


def rule_verdict(expected: str, outcome: str) -> str:
    """The verdict ``lib.core.results.Claim.verdict`` gives an outcome (tests check that the two agree)."""
    if expected == "tie":
        return "reproduced" if outcome == "tie" else "not reproduced" if outcome in ("a", "b") else "inconclusive"
    if outcome == expected:
        return "reproduced"
    if outcome in ("a", "b"):
        return "not reproduced"
    return "no effect at this scale" if outcome == "tie" else "inconclusive"


def _interval_outcomes(low: float, high: float, smallest) -> set[str]:
    """The outcomes ``lib.core.results`` gives the interval [low, high] (``Comparison.decide``), with both ends
    nudged by far more than a rounding error so that an interval that ends on a boundary accepts either side."""
    found = set()
    for nudge in (-1e-12, 0.0, 1e-12):
        lo, hi = low + nudge, high - nudge
        outcome = "a" if lo > 0 else "b" if hi < 0 else "unclear"
        if outcome == "unclear" and smallest and -smallest < lo and hi < smallest:
            outcome = "tie"
        found.add(outcome)
    return found


def _not_finite(value, where: str = "") -> str | None:
    """The first number under ``value`` that is NaN or infinite (or a null among per-seed values: a NaN that
    ``chapters.metrics.json_safe`` wrote as null), by its path; None when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value}"
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        here = f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]"
        if item is None and isinstance(value, list) and where.rsplit(".", 1)[-1] in ("values", "differences"):
            return f"{here} is null"
        found = _not_finite(item, here.lstrip("."))
        if found:
            return found
    return None


def _claim_problem(claim) -> str | None:
    """What makes ``claim`` (as metrics.json keeps it) something the rule could not have produced, or None."""
    if not isinstance(claim, dict):
        return "is not a mapping"
    bad = _not_finite(claim)
    if bad:
        return f"{bad}: not a finite number"
    verdict, cmp = claim.get("verdict"), claim.get("comparison")
    if verdict not in VERDICT_MARK:
        return f"verdict {verdict!r} is not one of {', '.join(VERDICT_MARK)}"
    if cmp is None:
        return None
    if not isinstance(cmp, dict):
        return "comparison is not a mapping"
    rank = "rho" in cmp
    counts = [cmp.get("pairs")] if not rank else []
    counts += [(cmp.get(side) or {}).get("n") for side in ("a", "b") if isinstance(cmp.get(side), dict)]
    if any(isinstance(n, int) and n < 1 for n in counts):
        return "no seeds (a count of 0): the rule judges a claim over paired seeds"
    expected, outcome = claim.get("expected", "a"), claim.get("outcome", cmp.get("outcome"))
    low, high = cmp.get("low"), cmp.get("high")
    if low is not None or high is not None:
        if low is None or high is None or low > high:
            return f"[{low}, {high}] is not an interval"
        pairs = cmp.get("pairs")
        if isinstance(pairs, int) and pairs < 2:
            return f"an interval over {pairs} seed: the rule needs two at least"
        difference = cmp.get("difference")
        if difference is not None and not low - 1e-12 <= difference <= high + 1e-12:
            return f"difference {difference} lies outside its interval [{low}, {high}]"
        allowed = _interval_outcomes(low, high, claim.get("smallest_effect"))
        interval = f"its interval [{low:+.4g}, {high:+.4g}]"
    elif rank:
        rho, p = cmp.get("rho"), cmp.get("p")
        if (rho is not None and not -1 <= rho <= 1) or (p is not None and not 0 <= p <= 1):
            return f"rho {rho} or p {p} is out of range"
        decided = p is not None and p < 0.05 and rho
        allowed = {"unclear"} | ({"a" if rho > 0 else "b"} if decided else set())
        interval = f"its rank correlation (rho {rho}, p {p})"
    else:
        allowed, interval = {"unknown"}, "no interval (too few seeds)"
    if outcome is not None and outcome not in allowed:
        return f"outcome {outcome!r} contradicts {interval}"
    verdicts = {rule_verdict(expected, o) for o in ([outcome] if outcome is not None else allowed)}
    if verdict not in verdicts:
        return f"verdict {verdict!r} contradicts {interval} (the rule gives {' or '.join(sorted(verdicts))})"
    return None


def check_claims(metrics, path: Path | str) -> None:
    """Refuse (:class:`BadMetrics`) a metrics file whose claims the rule could not have produced: a number that is
    NaN or infinite, a claim over no seeds, an interval the wrong way round or over one seed, an outcome or a verdict
    its own interval contradicts, a verdict that is none of the rule's."""
    claims = metrics.get("claims", []) if isinstance(metrics, dict) else None
    if not isinstance(claims, list):
        raise BadMetrics(f"{path}: not a chapter's metrics.json (no list of claims): run the chapter again")
    for claim in claims:
        problem = _claim_problem(claim)
        if problem:
            name = claim.get("id") if isinstance(claim, dict) else None
            raise BadMetrics(f"{path}: claim {name}: {problem}")


def lookup(metrics: dict, path: list, chapter: str):
    """``metrics[path[0]][path[1]]...``; a missing key names the chapter and the whole path."""
    value = metrics
    for i, key in enumerate(path):
        if not isinstance(value, dict) or key not in value:
            raise MissingMetric(f"{chapter}: metrics.json has no {'.'.join(map(str, path[: i + 1]))!r} "
                                f"(book/papers.yaml asks for {path}); rerun the chapter or fix the path in "
                                "book/papers.yaml")
        value = value[key]
    return value


def fmt(value, percent: bool) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return f"{100 * value:.1f} %" if percent else f"{value:.3g}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


VERDICT_MARK = {"reproduced": "✓ reproduced", "not reproduced": "✗ not reproduced",
                "no effect at this scale": "= no effect at this scale", "inconclusive": "? inconclusive"}
VERDICT_COLOUR = {"reproduced": "#2a9d8f", "not reproduced": "#e76f51", "no effect at this scale": "#e9c46a",
                  "inconclusive": "#8d99ae"}


def _counts(claims: list[dict]) -> str:
    """``"2 reproduced, 1 not reproduced, 3 inconclusive"`` (verdicts with no claim left out)."""
    found = [f"{sum(c['verdict'] == v for c in claims)} {v}" for v in VERDICT_MARK
             if any(c["verdict"] == v for c in claims)]
    return ", ".join(found) or "none tested"


# A short label per claim, unique over the book: what is compared, on what. The tables show it where the claim's full
# statement would not fit a cell; a paper claim's label ends with the table it comes from (:func:`label`).
LABELS = {
    "sharelock_beats_lit": "ShareLock vs LiT, classification",
    "zero_shot_above_chance": "ShareLock head vs chance, unseen concepts",
    "decoder_beats_encoder": "Gemma decoder vs MiniLM encoder, classification",
    "real_photos_above_chance": "ShareLock head vs chance, real photographs",
    "mlp_beats_linear": "MLP vs linear head, classification",
    "decoders_beat_encoders": "decoders vs encoders, Caltech-101 photographs",
    "decoders_beat_encoders_drawings": "decoders vs encoders, ViTeRB score on drawings",
    "reference_beats_names": "human-written text vs class names, Caltech-101 photographs",
    "reference_beats_names_drawings": "human-written text vs class names, ViTeRB score on drawings",
    "wikipedia_beats_names": "Wikipedia paragraphs vs class names, Caltech-101 photographs",
    "wikipedia_beats_names_drawings": "Wikipedia paragraphs vs class names, ViTeRB score on drawings",
    "capability_predicts_alignment": "bits per byte vs score, decoders ranked, Caltech-101 photographs",
    "capability_predicts_alignment_drawings": "bits per byte vs ViTeRB score, decoders ranked, drawings",
    "size_predicts_alignment": "size vs score, decoders ranked, Caltech-101 photographs",
    "size_predicts_alignment_drawings": "size vs ViTeRB score, decoders ranked, drawings",
    "above_chance": "ViTeRB protocol vs chance, Caltech-101 photographs",
    "above_chance_drawings": "ViTeRB score vs chance, unseen drawn concepts",
    "frozen_llm_beats_scratch": "FLAME vs text tower from scratch, Caltech-101 photographs",
    "frozen_llm_beats_scratch_unseen_words": "FLAME vs text tower from scratch, held-out drawn concepts",
    "more_facets_help": "3 facets vs 1, text-to-image retrieval",
    "multilingual_transfer": "FLAME vs text tower from scratch, other languages",
    "3t_beats_scratch_retrieval": "3T vs from scratch, retrieval",
    "3t_beats_scratch_average": "3T vs from scratch, classification",
    "3t_beats_lit_retrieval": "3T vs LiT, retrieval",
    "lit_beats_3t_where_labels_cover": "LiT vs 3T, concepts ImageNet-1k names",
    "3t_beats_lit_where_labels_do_not_cover": "3T vs LiT, concepts ImageNet-1k lacks",
    "fdt_beats_pooled": "FDT vs pooled head, Caltech-101 photographs",
    "fdt_beats_pooled_drawings": "FDT vs pooled head, unseen drawn concepts",
    "sparsemax_beats_softmax_drawings": "sparsemax vs softmax, FDT embeddings, unseen drawn concepts",
    "sparsemax_beats_softmax_as_features": "sparsemax vs softmax, code weights as features",
    "sparsemax_beats_softmax": "sparsemax vs softmax, FDT embeddings, Caltech-101 photographs",
    "fdt_above_chance": "FDT head vs chance, unseen concepts",
}


def cited_where(claim: dict) -> str:
    """The paper's table (else figure, else section) a claim's reference names first, or ``""``."""
    reference = claim.get("reference") or ""
    for pattern in (r"Table \w+", r"Figure \d+", r"§[\d.]+"):
        found = re.search(pattern, reference)
        if found:
            return found.group(0)
    return ""


def label(claim: dict, where: bool = True) -> str:
    """A claim's short label (:data:`LABELS`), with the paper's table for a paper claim; a claim without one (a
    stand-in's) falls back to its statement, else its two names."""
    text = LABELS.get(claim.get("id")) or claim.get("statement") or " vs ".join(claim.get("names") or ["?"])
    cited = cited_where(claim) if where and claim.get("origin", "paper") == "paper" else ""
    return f"{text} ({cited})" if cited else text


def _percent(value: float) -> str:
    return f"{value:.2f}"


def arms_text(claim: dict) -> str:
    """This book's two arms, ``"2.56 vs 3.05"`` in the claim's unit (%), or the rank correlation's rho."""
    cmp, scale = claim.get("comparison") or {}, claim.get("scale", 100.0)
    if "rho" in cmp:
        return "–" if cmp.get("rho") is None else f"rho {cmp['rho']:+.2f} over {cmp.get('n')} models"
    a, b = (cmp.get(side) or {} for side in ("a", "b"))
    if a.get("mean") is None or b.get("mean") is None:
        return "–"
    return f"{_percent(scale * a['mean'])} vs {_percent(scale * b['mean'])}"


def difference_text(claim: dict) -> str:
    """``"-0.49 [-0.81, -0.17]"`` (A − B in points with its 95 % interval), ``"p = 0.167"`` for a rank correlation,
    ``"–"`` without an interval."""
    cmp, scale = claim.get("comparison") or {}, claim.get("scale", 100.0)
    if "rho" in cmp:
        return "–" if cmp.get("p") is None else f"p = {cmp['p']:.3f}"
    if cmp.get("difference") is None or cmp.get("low") is None:
        return "–"
    return f"{scale * cmp['difference']:+.2f} [{scale * cmp['low']:+.2f}, {scale * cmp['high']:+.2f}]"


def paper_text(claim: dict) -> str:
    """The paper's two numbers, ``"50.5 vs 41.7"``, or its printed value where it is not a pair; ``"–"`` for the
    book's own question."""
    pair = claim.get("paper_pair")
    if pair and len(pair) == 2 and all(isinstance(v, (int, float)) for v in pair):
        return f"{pair[0]:.1f} vs {pair[1]:.1f}"
    return claim.get("paper_value") or "–"


# The table's columns after the chapter's; book/_static/reader.css gives them their widths (class "verdicts").
VERDICT_HEADER = ["claim", "paper", "this book, %", "A − B [95\u00a0%]", "verdict"]


NBSP = "\u00a0"


def verdict_row(claim: dict) -> list[str]:
    """One claim as a row of :data:`VERDICT_HEADER` (a short cell each: the long texts stay out of tables). A number
    pair never breaks inside (``2.56 vs 3.05``, ``[-0.81, -0.17]``), so the narrow columns wrap only between them."""
    arms = arms_text(claim)
    arms = arms.replace(" ", NBSP) if re.fullmatch(r"\S+ vs \S+", arms) else arms
    difference = difference_text(claim).replace(", ", "," + NBSP)
    name = re.sub(r"(Table|Figure) (\w+)\)$", lambda m: f"{m.group(1)}{NBSP}{m.group(2)})", label(claim))
    return [name, paper_text(claim), arms, difference, VERDICT_MARK[claim["verdict"]].replace(" ", NBSP, 1)]


# One paper claim, one verdict in the tallies. The ShareLock paper introduces ViTeRB, and two of its Table 1 claims are
# tested in both chapters: ViTeRB's protocol is the paper's own test of them, so ViTeRB's verdict is the one counted and
# the ShareLock chapter's row is shown under it as a second test of the same claim.
SAME_CLAIM = {("sharelock", "zero_shot_above_chance"): ("viterb", "above_chance"),
              ("sharelock", "decoder_beats_encoder"): ("viterb", "decoders_beat_encoders")}


def counted_in(chapter: str, claim: dict, chapters: list[str]) -> str | None:
    """The chapter whose row counts this claim instead (:data:`SAME_CLAIM`), when that chapter is among ``chapters``."""
    primary = SAME_CLAIM.get((chapter, claim["id"]), (None,))[0]
    return primary if primary in chapters else None


def counted(claims: list[tuple[str, dict]], chapters: list[str]) -> list[dict]:
    """The claims that the tallies count: each paper claim once (a second chapter's test of a claim, :func:`counted_in`,
    is left out of the counts, not out of the tables)."""
    return [claim for chapter, claim in claims if counted_in(chapter, claim, chapters) is None]


def _claims_of(chapters: list[str], metrics_dir: Path, origin: str | None = None) -> list[tuple[str, dict]]:
    """``(chapter, claim)`` of every claim the chapters tested, of ``origin`` (``"paper"`` / ``"book"``) or all."""
    return [(chapter, claim) for chapter in chapters for claim in load_metrics(chapter, metrics_dir).get("claims", [])
            if origin is None or claim.get("origin", "paper") == origin]


HOLM_MARK = "\u2020"  # beside a directional verdict that Holm's correction over its chapter's claims does not keep
HOLM_NOTE = (f"{HOLM_MARK} The interval excludes 0 at 95 % for this claim alone, but not once Holm's correction over "
             "the chapter's claims is applied (adjusted p ≥ 0.05): read it as suggestive, not decided.")


def verdict_table(papers: dict, chapters: list[str], metrics_dir: Path, origin: str = "paper") -> list[str]:
    """Every claim from ``origin`` (the papers', or the book's own questions) as one short row each, the chapter
    named once in the first row of its claims; a directional verdict that Holm's correction within its chapter does
    not keep is marked :data:`HOLM_MARK` (``tools.multiplicity``), with the note under the table."""
    keep = [i for i, name in enumerate(VERDICT_HEADER) if origin == "paper" or name != "paper"]
    header = ["chapter", *(VERDICT_HEADER[i] for i in keep)]
    lines = [":::{table}", f":class: verdicts{'' if origin == 'paper' else ' without-paper'}", "",
             "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    previous, marked = None, False
    for chapter, _, row in table_rows(papers, chapters, metrics_dir, origin):
        title = papers[chapter]["title"] if chapter != previous else ""
        previous = chapter
        marked = marked or row[-1].endswith(HOLM_MARK)
        lines.append("| " + " | ".join(_cell(c) for c in [title, *(row[i] for i in keep)]) + " |")
    return [*lines, ":::", *(["", HOLM_NOTE] if marked else [])]


def table_rows(papers: dict, chapters: list[str], metrics_dir: Path, origin: str = "paper"):
    """``(chapter, claim, row)`` of :func:`verdict_table`: :func:`verdict_row`, its label saying where a claim tested
    twice is counted (:data:`SAME_CLAIM`) and its verdict marked :data:`HOLM_MARK` where Holm's correction within the
    chapter does not keep it."""
    corrected = multiplicity.survivors(_claims_of(chapters, metrics_dir))
    for chapter, claim in _claims_of(chapters, metrics_dir, origin):
        row = verdict_row(claim)
        primary = counted_in(chapter, claim, chapters)
        if primary:
            row[0] += f" (the claim of {papers[primary]['title']}'s row; counted there)"
        found = corrected.get((chapter, claim["id"]), {})
        if found.get("directional") and not found.get("survives_chapter"):
            row[-1] += HOLM_MARK
        yield chapter, claim, row


def multiplicity_text(chapters: list[str], metrics_dir: Path) -> str:
    """One paragraph: how many claims were tested at 95 % each, how many directional verdicts chance alone would
    give, and how many of those found survive Holm within their chapter and over the whole book."""
    found = multiplicity.summary(_claims_of(chapters, metrics_dir))
    return (f"**Many claims at once.** The book tests {found['tested']} claims, each at 95 % on its own; if no method "
            f"differed from another, about {found['expected_by_chance']:.1f} of them would still get a directional "
            f"verdict (reproduced or not reproduced) by chance. Of the {found['directional']} directional verdicts "
            f"found, {found['survive_chapter']} survive Holm's correction over their chapter's claims and "
            f"{found['survive_book']} over all {found['tested']} (family-wise error 5 %, valid however the claims "
            f"depend on each other; {HOLM_MARK} marks the ones the chapter's correction does not keep). The chapters "
            "state each claim's own verdict; these corrections are how many of them to believe at once.")


def _counts_words(claims: list[dict]) -> str:
    """``"1 of 3 claims reproduced, 2 not reproduced"``: how a paper fared, in words."""
    reproduced = sum(c["verdict"] == "reproduced" for c in claims)
    rest = [f"{sum(c['verdict'] == v for c in claims)} {v}" for v in VERDICT_MARK
            if v != "reproduced" and any(c["verdict"] == v for c in claims)]
    head = f"{reproduced or 'none'} of {len(claims)} claim{'s' if len(claims) != 1 else ''} reproduced"
    return ", ".join([head, *rest])


def chapter_subtitle(chapter: str) -> str:
    """What the chapter is about, in its own words: its page title after the paper's name (``notebooks/<name>.py``'s
    first heading), or ``""``."""
    source = ROOT / "notebooks" / f"{chapter}.py"
    if not source.is_file():
        return ""
    found = re.search(r"^# # [^:\n]+: (.+)$", source.read_text(encoding="utf-8"), re.M)
    return found.group(1).strip() if found else ""


def paper_sentences(papers: dict, chapters: list[str], metrics_dir: Path) -> list[str]:
    """One plain sentence per paper: what it is about, and how its claims fared here."""
    lines = []
    for chapter in chapters:
        every = _claims_of([chapter], metrics_dir, "paper")
        own, about = counted(every, chapters), chapter_subtitle(chapter)
        elsewhere = sorted({papers[primary]["title"] for c, claim in every
                            if (primary := counted_in(c, claim, chapters))})
        more = (f"; {len(every) - len(own)} more of its rows test {_and(elsewhere)}'s claims, counted there"
                if elsewhere else "")
        lines.append(f"- **{papers[chapter]['title']}**{f' ({about})' if about else ''}: {_counts_words(own)}{more}.")
    return lines


def summary_lines(papers: dict, chapters: list[str], metrics_dir: Path) -> list[str]:
    """The page's first screen: the verdict counts over every chapter, then one short row per claim."""
    paper = counted(_claims_of(chapters, metrics_dir, "paper"), chapters)
    book = counted(_claims_of(chapters, metrics_dir, "book"), chapters)
    return [f"**Of the papers' {len(paper)} claims tested offline: {_counts(paper)}.** The book's own "
            f"{len(book)} questions: {_counts(book)}. The paper's numbers are those it prints (its table beside the "
            "claim); this book's are the two methods' means over paired seeds in %, and A − B is in points with its "
            "95 % interval. Each chapter's section below gives every claim in full, with the numbers behind it and, "
            "where the chapter found one, its diagnosis.", "",
            *verdict_table(papers, chapters, metrics_dir), "",
            "The book's own questions (claims the papers do not make, so no paper number stands beside them):", "",
            *verdict_table(papers, chapters, metrics_dir, "book"), "", multiplicity_text(chapters, metrics_dir), ""]


def claim_details(metrics: dict, origin: str = "paper") -> list[str]:
    """Every claim the chapter tested from ``origin``, in full and out of any table: its label and verdict, the
    claim as stated, the paper's number and where it is printed, this run's evidence, and the diagnosis on a line of
    its own."""
    lines = []
    for claim in metrics.get("claims", []):
        if claim.get("origin", "paper") != origin:
            continue
        paper = f"{claim['paper_value']} ({claim['reference']})" if claim.get("paper_value") else claim["reference"]
        lines += [f"**{label(claim)}**: {VERDICT_MARK[claim['verdict']]}", "",
                  f"- *The claim:* {claim['statement']}.", f"- *The paper:* {paper}.",
                  f"- *This book:* {claim['evidence']}."]
        if claim.get("diagnosis"):
            lines.append(f"- *Diagnosis:* {claim['diagnosis']}.")
        lines.append("")
    return lines


def chapter_rows(chapter: str, info: dict, metrics: dict) -> list[list[str]]:
    """Rows of a chapter's numbers table: the paper's number and each offline analogue (and the full
    config's number, only where a full-config run exists). What each analogue shows is a sentence below the table
    (:func:`render`), not a cell."""
    full = info.get("full_run")
    rows = []
    for claim in info["claims"]:
        paper = f"{claim['paper']:.1f} % ({claim['ref']})"
        here = []
        if full is not None:
            here = [fmt(lookup(json.loads((ROOT / full).read_text(encoding="utf-8")), claim["full_metric"], chapter),
                        True)]
        for j, analogue in enumerate(claim["analogues"]):
            value = fmt(lookup(metrics, analogue["metric"], chapter), analogue.get("percent", False))
            first = j == 0
            rows.append([claim["claim"] if first else "", paper if first else "",
                         *(here if first else [""] * len(here)), analogue["label"], value])
    return rows


OPPOSITE = {("reproduced", "not reproduced"), ("not reproduced", "reproduced")}


ARITHMETIC_KEYS = ("dtype", "precision")  # the settings that `auto` resolves: all a float32 re-run may change


def _sweep_defaults() -> dict:
    """Every ``sweep:`` field with its default (``lib.core.recipes.SweepConfig``). A run recorded before a field
    existed ran with that field's default, so a missing field and its default are the same experiment."""
    from lib.core.recipes import SweepConfig

    return {field.name: (list(field.default) if isinstance(field.default, tuple) else field.default)
            for field in dataclasses.fields(SweepConfig)}


def _beyond_arithmetic(settings, key: str | None = None):
    """``settings`` (a run's config, as metrics.json records it) without its number formats, for comparing runs;
    a ``sweep`` section with its missing fields at their defaults."""
    if isinstance(settings, dict):
        if key == "sweep":
            settings = {**_sweep_defaults(), **settings}
        return {k: _beyond_arithmetic(v, k) for k, v in settings.items() if k not in ARITHMETIC_KEYS}
    if isinstance(settings, list):
        return [_beyond_arithmetic(v) for v in settings]
    return settings


def _interval_text(claim: dict) -> str:
    """A claim's verdict with the paired difference behind it, in the claim's unit: ``"✓ reproduced, +0.46
    [+0.20, +0.72]"`` (the verdict alone where the comparison has no interval, e.g. a rank correlation)."""
    cmp, scale = claim.get("comparison") or {}, claim.get("scale", 100.0)
    if cmp.get("low") is None or cmp.get("difference") is None:
        return VERDICT_MARK[claim["verdict"]]
    points = " points" if (claim.get("unit") or "").strip() else ""
    return (f"{VERDICT_MARK[claim['verdict']]}, {scale * cmp['difference']:+.2f} "
            f"[{scale * cmp['low']:+.2f}, {scale * cmp['high']:+.2f}]{points}")


def _agreement(old: dict, new: dict) -> str:
    """``same``, or for a verdict that moved, whether the two intervals still overlap: a verdict can only move between
    two overlapping intervals when one of them ends near a boundary of the rule (0 or the smallest effect), so the
    overlap is what shows that the claim sits on that boundary rather than that the arithmetic changed the result."""
    if old["verdict"] == new["verdict"]:
        return "same"
    kind = "**opposite**" if (old["verdict"], new["verdict"]) in OPPOSITE else "changed"
    a, b = old.get("comparison") or {}, new.get("comparison") or {}
    if None in (a.get("low"), a.get("high"), b.get("low"), b.get("high")):
        return kind
    overlap = max(a["low"], b["low"]) <= min(a["high"], b["high"])
    return f"{kind}; the intervals {'overlap: on a boundary of the rule' if overlap else 'do not overlap'}"


class Shift(NamedTuple):
    """How far a change of arithmetic moved one claim's A − B (bfloat16 run minus float32 run), with its interval."""
    shift: float
    low: float
    high: float
    mde: float | None  # the smaller of the two runs' minimum detectable effects for the claim itself
    paired: bool  # seed by seed (both runs kept their per-seed differences), else Welch's interval
    low90: float | None = None  # the 90 % interval: two one-sided tests at 5 % (equivalence, :func:`equivalent`)
    high90: float | None = None


def equivalent(found: Shift, margin: float | None) -> bool | None:
    """Whether the two runs are shown to estimate the same difference: the shift's 90 % interval lies inside
    ± ``margin`` (two one-sided tests at 5 %, TOST). A 95 % interval that merely holds 0 shows only that no shift was
    detected. None without a margin or a 90 % interval."""
    if not margin or found.low90 is None:
        return None
    return bool(-margin < found.low90 and found.high90 < margin)


def arithmetic_shift(float32: dict, bfloat16: dict) -> Shift | None:
    """The bfloat16 run's A − B minus the float32 run's, with a 95 % interval; None for a claim without an interval
    (a rank correlation).

    Both runs use the same seeds and splits, so the interval is paired seed by seed (``lib.core.results.compare`` on
    the two runs' per-seed differences) when both runs kept those differences (``comparison.differences``). The
    metrics written so far keep only their mean and sd; then the interval is Welch's, from each run's spread. The
    same seeds make the two runs' errors positively correlated, so Welch's interval is *wider* than the paired one:
    a shift whose Welch interval excludes 0 is a real effect of the arithmetic, one that contains it is only not
    shown to be one. The claim's MDE beside the shift says whether a shift of that size could matter."""
    from scipy import stats

    from lib.core.results import compare, welch_interval

    a, b = float32.get("comparison") or {}, bfloat16.get("comparison") or {}
    needed = ("difference", "diff_sd", "pairs", "low", "high")
    if any(run.get(key) is None for run in (a, b) for key in needed) or min(a["pairs"], b["pairs"]) < 2:
        return None
    mdes = [run["mde"] for run in (a, b) if run.get("mde") is not None]
    mde = min(mdes) if mdes else None
    seeds_a, seeds_b = a.get("differences"), b.get("differences")
    if seeds_a and seeds_b and len(seeds_a) == len(seeds_b):
        paired = compare(seeds_b, seeds_a)
        half90 = stats.t.ppf(0.95, paired.pairs - 1) * paired.diff_sd / math.sqrt(paired.pairs)
        return Shift(paired.difference, paired.low, paired.high, mde, True, paired.difference - half90,
                     paired.difference + half90)
    half = welch_interval(a["diff_sd"], a["pairs"], b["diff_sd"], b["pairs"])
    # The normal quantiles' ratio: with few seeds it makes the 90 % interval a little wider than Welch's t would, so
    # equivalence errs towards "not shown"
    half90 = half * stats.norm.ppf(0.95) / stats.norm.ppf(0.975)
    shift = b["difference"] - a["difference"]
    return Shift(shift, shift - half, shift + half, mde, False, shift - half90, shift + half90)


def _shift_text(found: Shift | None, claim: dict) -> str:
    """``"+0.12 [-0.55, +0.79] (MDE 0.35)"`` in the claim's unit, or ``"–"`` for a claim without an interval."""
    if found is None:
        return "–"
    scale = claim.get("scale", 100.0)
    notes = [] if found.paired else ["Welch"]
    notes += [f"MDE {scale * found.mde:.2f}"] if found.mde is not None else []
    note = f" ({', '.join(notes)})" if notes else ""
    margin = equivalence_margin(claim, found)
    same = equivalent(found, margin)
    tost = "" if same is None else (f"; equal within ± {scale * margin:.2f}" if same else
                                     f"; not shown equal within ± {scale * margin:.2f}")
    return f"{scale * found.shift:+.2f} [{scale * found.low:+.2f}, {scale * found.high:+.2f}]{note}{tost}"


def equivalence_margin(claim: dict, found: Shift) -> float | None:
    """The margin within which two runs count as estimating the same difference: the claim's smallest effect of
    interest (the paper's effect applied here) where it has one, else the claim's MDE (the least the design sees)."""
    return claim.get("smallest_effect") or found.mde


def arithmetic_of(metrics: dict) -> str:
    """``"float32"`` or ``"bfloat16"``: what a run computed in. A setting of ``auto`` is what the machine resolved it
    to (``metrics["arithmetic"]``: ``auto_dtype`` for a ``dtype``, ``auto_precision`` for a ``precision``); explicit
    float32 settings (a papermill ``overrides`` run) are float32."""
    resolved = metrics.get("arithmetic") or {}
    auto = {"dtype": resolved.get("auto_dtype", "float32"), "precision": resolved.get("auto_precision", "fp32")}

    def formats(settings):
        if isinstance(settings, dict):
            for key, value in settings.items():
                if key in ARITHMETIC_KEYS and isinstance(value, str):
                    yield auto[key] if value == "auto" else value
                else:
                    yield from formats(value)
        elif isinstance(settings, list):
            for value in settings:
                yield from formats(value)

    return "bfloat16" if {"bfloat16", "bf16"} & set(formats(metrics.get("settings"))) else "float32"


class ArithmeticPair(NamedTuple):
    """A chapter's two runs of one experiment, by arithmetic, and which of them the book shows."""
    float32: dict
    bfloat16: dict
    shown: str


def arithmetic_pairs(chapters: list[str], metrics_dir: Path, reference_dirs) -> dict[str, ArithmeticPair]:
    """Per chapter, its shown run and a kept run of the same experiment in the other arithmetic. A kept run of
    another config, or whose settings differ from the shown run's in more than the number formats (other seeds,
    models, splits: :func:`_beyond_arithmetic`), or in the same arithmetic (``auto`` resolved to float32 on a CPU
    without bfloat16 units) is no arithmetic check, and is passed over."""
    folders = [reference_dirs] if isinstance(reference_dirs, Path) else list(reference_dirs)
    pairs = {}
    for chapter in chapters:
        current = load_metrics(chapter, metrics_dir)
        shown = arithmetic_of(current)
        for folder in folders:
            if not (folder / f"{chapter}.json").is_file():
                continue
            kept = load_metrics(chapter, folder)
            if kept.get("config") != current.get("config"):
                continue  # a run of another config tests the claims on other data: no verdict to set beside it
            if _beyond_arithmetic(kept.get("settings")) != _beyond_arithmetic(current.get("settings")):
                continue  # the experiment itself changed since that run: its verdicts are not an arithmetic check
            if arithmetic_of(kept) == shown:
                continue  # the same arithmetic twice (float32 beside float32): nothing to show
            f32, bf16 = (current, kept) if shown == "float32" else (kept, current)
            pairs[chapter] = ArithmeticPair(f32, bf16, shown)
            break
    return pairs


def _claim_pairs(pairs: dict[str, ArithmeticPair]):
    """``(chapter, float32 claim, bfloat16 claim, their arithmetic_shift)`` for every claim both runs of a chapter
    tested."""
    for chapter, pair in pairs.items():
        before = {c["id"]: c for c in pair.float32.get("claims", [])}
        for claim in pair.bfloat16.get("claims", []):
            if claim["id"] in before:
                old = before[claim["id"]]
                yield chapter, old, claim, arithmetic_shift(old, claim)


def _pair_rows(papers: dict, claim_pairs: list[tuple]) -> list[list[str]]:
    return [[papers[chapter]["title"], label(new), _interval_text(old), _interval_text(new),
             _shift_text(shift, new), _agreement(old, new)]
            for chapter, old, new, shift in claim_pairs]


def _shift_sentence(claim_pairs: list[tuple]) -> str:
    """What the shift column shows, counted: in how many claims the arithmetic moved A − B by more than the seeds'
    noise (the interval excludes 0), and, for the verdicts that changed, how large the move was against the MDE."""
    measured = [(old, new, s) for _, old, new, s in claim_pairs if s is not None]
    if not measured:
        return ""
    beyond = sum(not (s.low <= 0 <= s.high) for _, _, s in measured)
    moved = [(old, new, s) for old, new, s in measured if old["verdict"] != new["verdict"]]
    welch = sum(not s.paired for _, _, s in measured)
    if not welch:
        how = "paired seed by seed"
    elif welch == len(measured):
        how = ("Welch's, from each run's spread of its per-seed differences: these runs' metrics keep that spread, "
               "not the seeds' own values, and since both runs share seeds and splits a seed-paired interval would "
               "be narrower")
    else:
        how = (f"paired seed by seed, or, for the {welch} claims marked Welch, whose runs' metrics keep only the "
               f"spread of the per-seed differences, Welch's from each run's spread: wider than a paired one")
    text = (f"The shift column is the bfloat16 run's A − B minus the float32 run's, with a 95 % interval ({how}). "
            f"The shift's interval excludes 0 in {beyond} of the {len(measured)} claims with an interval.")
    if moved:
        inside = sum(s.low <= 0 <= s.high and s.mde is not None and abs(s.shift) < s.mde for _, _, s in moved)
        sizes = ", ".join(f"{new.get('scale', 100.0) * abs(s.shift):.2f}" for _, new, s in moved)
        text += (f" Of the {len(moved)} verdicts that change, {inside} moved by less than the claim's MDE with an "
                 f"interval that contains 0 (the moves: {sizes} points)")
        text += (": no shift is detected, and the verdict changes because the difference lies near 0 or the "
                 "smallest effect, where an interval's end can fall either side of the line (a move smaller than the "
                 "MDE can still carry an interval's end across a line: it is not proof that the arithmetic is "
                 "irrelevant)." if inside == len(moved) else "; the others moved by more than the runs' noise allows.")
    same = [equivalent(s, equivalence_margin(new, s)) for _, new, s in measured]
    text += (f" Whether the two runs estimate the same difference is an equivalence test (two one-sided tests at 5 %: "
             f"the shift's 90 % interval inside ± the claim's smallest effect of interest, else its MDE): shown for "
             f"{sum(x is True for x in same)} of the {sum(x is not None for x in same)} claims with a margin.")
    return text


def stability_rows(papers: dict, chapters: list[str], metrics_dir: Path, reference_dirs) -> list[list[str]]:
    """One row per claim tested in both runs of :func:`arithmetic_pairs`: chapter, claim, the float32 run's verdict
    and interval, the bfloat16 run's, and whether they agree. A claim that one run has and the other lacks is left
    out: the rows say what both tested."""
    return _pair_rows(papers, list(_claim_pairs(arithmetic_pairs(chapters, metrics_dir, reference_dirs))))


def _and(names: list[str]) -> str:
    """``"A"``, ``"A and B"``, ``"A, B and C"``."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def _paired(metrics: dict) -> bool:
    """Whether every claim of a run was judged by the paired rule."""
    return all((c.get("comparison") or {}).get("paired", False) or "rho" in (c.get("comparison") or {})
               for c in metrics.get("claims", []))


def _auto_resolved(papers: dict, pairs: dict) -> str:
    """What ``auto`` resolved to in the bfloat16 runs, naming the CPU's bfloat16 units; chapters that ran on
    different units (runs from different machines) are named per group, so the page never hides a difference."""
    groups: dict[str, list[str]] = {}
    resolved: dict[str, dict] = {}  # the same key -> the arithmetic record it was made from
    for chapter, pair in pairs.items():
        key = json.dumps(pair.bfloat16.get("arithmetic"), sort_keys=True)
        groups.setdefault(key, []).append(chapter)
        resolved[key] = pair.bfloat16.get("arithmetic")
    if not all(isinstance(r, dict) and {"auto_dtype", "auto_precision", "cpu_bf16_units"} <= set(r)
               for r in resolved.values()):
        return "bfloat16"
    formats = {(r["auto_dtype"], r["auto_precision"]) for r in resolved.values()}
    if len(formats) != 1:
        return "bfloat16"
    dtype, precision = formats.pop()

    def units(key: str) -> str:
        return ", ".join(resolved[key]["cpu_bf16_units"]) or "none"

    if len(groups) == 1:
        which = units(next(iter(groups)))
    else:
        which = "; ".join(f"{units(key)} for {_and([papers[c]['title'] for c in chapters])}"
                          for key, chapters in groups.items())
    return f"resolved to {dtype} features and {precision} training (the CPU's bfloat16 units: {which})"


def stability_section(papers: dict, chapters: list[str], metrics_dir: Path, reference_dirs) -> list[str]:
    """The page's last section: :func:`stability_rows` as a table, with the counts in a sentence."""
    pairs = arithmetic_pairs(chapters, metrics_dir, reference_dirs)
    claim_pairs = list(_claim_pairs(pairs))
    rows = _pair_rows(papers, claim_pairs)
    if not rows:
        return []
    where = _auto_resolved(papers, pairs)
    shown = {"float32": [], "bfloat16": []}
    for chapter, pair in pairs.items():
        shown[pair.shown].append(papers[chapter]["title"])
    which = "the book shows " + " and ".join(f"the {kind} run of {_and(names)}" for kind, names in shown.items()
                                             if names)
    kept = " or ".join(f"`book/metrics/{kind}/`" for kind in ("float32", "bfloat16")
                       if any(pair.shown != kind for pair in pairs.values()))
    rule = ("Both runs are judged by the same paired rule." if all(_paired(pair.float32) and _paired(pair.bfloat16)
                                                                   for pair in pairs.values())
            else "Some runs were judged by the earlier, unpaired rule (a gap of means beyond twice the larger seed "
            "spread), so for them this table compares two rules as well as two arithmetics.")
    counts = {kind: sum(row[-1].split(";")[0] == kind for row in rows) for kind in ("same", "changed", "**opposite**")}
    return [
        "## Do the verdicts survive a change of arithmetic?",
        "",
        "The `medium` configs compute in `dtype: auto` and `precision: auto`: bfloat16 where the CPU has bfloat16",
        "units, float32 elsewhere. Each chapter below ran twice with the same data, seeds and splits, once in float32",
        f"throughout and once in `auto` {where}; {which} (the other run's metrics are kept in",
        f"{kept}). A chapter whose two runs differ in anything but the",
        f"number formats is left out. {rule} Only the arithmetic differs, which moves every number by a little; a",
        "verdict that changes with it sits at the edge of what the runs can decide, and the two intervals show by how",
        "much.",
        f"Of {len(rows)} claims, **{counts['same']} keep their verdict**, {counts['changed']} change between a "
        f"verdict and another that is not its opposite, and {counts['**opposite**']} turn to the opposite verdict.",
        _shift_sentence(claim_pairs),
        "",
        "| chapter | the claim | float32 run: verdict, A − B [95 %] | bfloat16 run "
        "| shift, bfloat16 − float32 [95 %] | |",
        "|---|---|---|---|---|---|",
        *["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows],
        "",
    ]


def seeds_text(seeds: list) -> str:
    """``"7 paired seeds, 0–6"``, or the seeds listed where they are not a run of consecutive numbers."""
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{len(seeds)} paired seeds, {seeds[0]}–{seeds[-1]}"
    return f"{len(seeds)} paired seed{'s' if len(seeds) != 1 else ''}, {', '.join(map(str, seeds))}"


def run_text(metrics: dict) -> str:
    """``"medium config, 7 paired seeds (0–6)"``: which run a chapter's numbers come from."""
    seeds = (metrics.get("settings") or {}).get("seeds")
    return f"{metrics.get('config', 'small')} config, {seeds_text(seeds)}" if seeds else "small config"


def render(papers: dict | None = None, metrics_dir: Path = METRICS, chapters: list[str] | None = None,
           reference_dirs=REFERENCE_RUNS) -> str:
    from lib.core.results import RULE

    papers = load_papers() if papers is None else papers
    chapters = toc_chapters() if chapters is None else chapters
    for chapter in chapters:
        if chapter not in papers:
            raise MissingMetric(f"{chapter}: in _toc.yml but not in book/papers.yaml; add its claims there")
    lines = [
        "% Generated by `python -m tools.results_page` from book/papers.yaml and book/metrics/*.json:",
        "% do not edit (make book regenerates it; tests/test_results_page.py checks it).",
        "",
        "# Results: the papers' claims, tested",
        "",
        *summary_lines(papers, chapters, metrics_dir),
        f"One rule decides every verdict: {RULE} The numbers are those of the executed chapters of this book (their",
        "`metrics.json`); they come from the chapters' offline configs, with other data and models 10³–10⁴",
        "times smaller than the papers', so compare directions, not sizes. Each chapter's section then gives its",
        "claims in full and puts the paper's headline numbers, with the table they are printed in, beside the offline",
        "analogue of each.",
        "",
        "```{figure} figures/claims-differences-with-intervals.png",
        ":name: fig-claims-differences",
        ":alt: one row per claim: the difference A minus B in points with its 95 % interval, the zero line, and the "
        "paper's effect applied here",
        "",
        "Every claim that compares two methods: the difference A − B in points (dot) with its 95 % interval over",
        "paired seeds (bar), coloured by verdict. The shaded band is ± the paper's own relative effect applied to",
        "this book's baseline: an interval inside it is *no effect at this scale*. Rank correlations and claims",
        "against chance are in the tables above.",
        "```",
        "",
    ]
    for chapter in chapters:
        info, metrics = papers[chapter], load_metrics(chapter, metrics_dir)
        full = info["full_config"]
        has_full = info.get("full_run") is not None
        lines += [
            f"## {info['title']}",
            "",
            f"Paper: {{cite:t}}`{info['cite']}`. Chapter: [{info['title']}](../notebooks/{chapter}.ipynb) "
            f"({run_text(metrics)}).",
            "",
            *claim_details(metrics),
        ]
        own = claim_details(metrics, "book")
        if own:
            lines += ["The book's own questions (claims the paper does not make; no paper number belongs beside them):",
                      "", *own]
        header = ["paper's setting", "paper", *(["full config, this book"] if has_full else []),
                  "offline analogue", "this book"]
        lines += ["The paper's headline numbers beside their offline analogues:", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in chapter_rows(chapter, info, metrics)]
        lines += ["", "What each analogue shows:", ""]
        lines += [f"- *{claim['claim']}*: {claim['shows'].rstrip('.')}." for claim in info["claims"]]
        lines += ["", ":::{dropdown} What a full-config run needs", f"**GPU:** {full['gpu'].rstrip('.')}.", "",
                  f"**Data:** {full['data'].rstrip('.')}.", ":::", ""]
    lines += stability_section(papers, chapters, metrics_dir, reference_dirs)
    return "\n".join(lines)


INTRO = ROOT / "book" / "intro.md"
INTRO_MARKERS = ("<!-- findings: generated by python -m tools.results_page -->", "<!-- /findings -->")


def findings_table(papers: dict | None = None, metrics_dir: Path = METRICS, chapters: list[str] | None = None) -> str:
    """The intro's table of every paper claim tested (:func:`verdict_table`): the claim's label with its table, the
    paper's numbers, this book's two arms, A − B with its interval, the verdict. Generated, never typed by hand."""
    papers = load_papers() if papers is None else papers
    chapters = toc_chapters() if chapters is None else chapters
    return "\n".join(verdict_table(papers, chapters, metrics_dir))


def seeds_needed_range(claim: dict, level: float = 0.90) -> tuple[int, int] | None:
    """The seeds a claim would need (``seeds_needed``: the MDE brought down to the paper's effect applied here) at the
    ends of a ``level`` interval for the spread of its per-seed differences (chi-square, ``pairs - 1`` degrees of
    freedom): the measured spread is itself an estimate from few seeds, so the single number is not firm."""
    from scipy import stats

    cmp, smallest = claim.get("comparison") or {}, claim.get("smallest_effect")
    sd, n = cmp.get("diff_sd"), cmp.get("pairs")
    if not smallest or not sd or not n or n < 2:
        return None
    from lib.core.results import Comparison, Summary

    bounds = [sd * math.sqrt((n - 1) / stats.chi2.ppf(q, n - 1)) for q in ((1 + level) / 2, (1 - level) / 2)]
    needs = [Comparison(Summary(()), Summary(()), None, "unknown", n, bound).seeds_for(smallest, most=100_000)
             for bound in bounds]
    return (needs[0], needs[1]) if None not in needs else None


def _power_lines(chapters: list[str], metrics_dir: Path) -> list[str]:
    """For every paper claim that is inconclusive or shows no effect of the paper's size: what the runs could have
    detected (the claim's MDE, the paper's effect applied here, the seeds it would take)."""
    lines = []
    for _, claim in _claims_of(chapters, metrics_dir, "paper"):
        cmp, scale = claim.get("comparison") or {}, claim.get("scale", 100.0)
        mde, smallest, need = cmp.get("mde"), claim.get("smallest_effect"), claim.get("seeds_needed")
        if claim["verdict"] == "inconclusive" and "rho" in cmp:
            n = cmp.get("n") or 1
            lines.append(f"- {label(claim)}: {VERDICT_MARK['inconclusive']}, and it cannot be decided with {n} models: "
                         f"the exact permutation test of a rank correlation over {n} models has a smallest possible p "
                         f"of 1/{math.factorial(n)} = {1 / math.factorial(n):.3f}, so only a perfect ordering could "
                         "pass it (its power against anything short of that is nil); more models, not more seeds, "
                         "would decide it.")
        elif claim["verdict"] == "inconclusive" and mde is not None:
            spread = seeds_needed_range(claim) if need and smallest else None
            reach = (f"; about {need} paired seeds would reach the paper's effect" if need and smallest else "")
            reach += (f" (between {spread[0]} and {spread[1]} at the ends of a 90 % interval for the measured spread, "
                      f"itself estimated from {(claim.get('comparison') or {}).get('pairs')} seeds)" if spread else "")
            against = f" against the paper's effect applied here, {scale * smallest:.2f}" if smallest else ""
            lines.append(f"- {label(claim)}: {VERDICT_MARK['inconclusive']}, MDE {scale * mde:.2f} points"
                         f"{against}{reach}.")
        elif claim["verdict"] == "no effect at this scale" and smallest:
            lines.append(f"- {label(claim)}: {VERDICT_MARK['no effect at this scale']}, the interval "
                         f"{difference_text(claim)} lies inside ± {scale * smallest:.2f} points, the paper's effect "
                         "applied here.")
    return lines


def _arithmetic_lines(papers: dict, chapters: list[str], metrics_dir: Path, reference_dirs) -> list[str]:
    """The verdicts that a run in the other arithmetic keeps, counted, and the ones it changes, named."""
    claim_pairs = list(_claim_pairs(arithmetic_pairs(chapters, metrics_dir, reference_dirs)))
    if not claim_pairs:
        return []
    moved = [(old, new, shift) for _, old, new, shift in claim_pairs if old["verdict"] != new["verdict"]]
    lines = [f"**Arithmetic.** Run again with the same seeds in the other arithmetic (float32 against bfloat16), "
             f"{len(claim_pairs) - len(moved)} of {len(claim_pairs)} verdicts stay the same"
             + ("." if not moved else "; the one that changes:" if len(moved) == 1 else "; the ones that change:"), ""]
    lines += [f"- {label(new)}: float32 {_interval_text(old)}; bfloat16 {_interval_text(new)}; the shift "
              f"{_shift_text(shift, new)}." for old, new, shift in moved]
    return lines + ["", "The last section of [Results](results.md) sets every claim's two runs side by side.", ""]


def intro_findings(papers: dict | None = None, metrics_dir: Path = METRICS, chapters: list[str] | None = None,
                   reference_dirs=REFERENCE_RUNS) -> str:
    """The intro's findings, all generated from the chapters' metrics: the counts, one sentence per paper, the
    verdict table, the book's own questions counted, and in a fold what the runs could detect (seeds, power) and
    which verdicts a change of arithmetic keeps."""
    papers = load_papers() if papers is None else papers
    chapters = toc_chapters() if chapters is None else chapters
    paper = counted(_claims_of(chapters, metrics_dir, "paper"), chapters)
    book = counted(_claims_of(chapters, metrics_dir, "book"), chapters)
    runs = {c: load_metrics(c, metrics_dir) for c in chapters}
    configs = {run.get("config", "small") for run in runs.values()}
    counts = [f"{papers[c]['title']} {len((run.get('settings') or {}).get('seeds') or [])}"
              + ("" if len(configs) == 1 else f" ({run.get('config', 'small')} config)") for c, run in runs.items()]
    seeds = (f"{_and(counts)}" + (f", each chapter in its {configs.pop()} config" if len(configs) == 1 else ""))
    lines = [*paper_sentences(papers, chapters, metrics_dir), "",
             *verdict_table(papers, chapters, metrics_dir), "",
             f"**Of the papers' {len(paper)} claims tested offline: {_counts(paper)}.** The paper's numbers are those "
             "it prints (its table beside the claim); this book's are the two methods' means over paired seeds in %, "
             f"and A − B is in points with its 95 % interval. The book's own {len(book)} questions: {_counts(book)} "
             "([Results](results.md) lists them, with every claim in full).",
             "", ":::{dropdown} How firm these verdicts are: seeds, power, arithmetic",
             f"**Seeds.** Each verdict compares the two methods over the same paired seeds: {seeds}.", ""]
    lines += [multiplicity_text(chapters, metrics_dir), ""]
    power = _power_lines(chapters, metrics_dir)
    if power:
        lines += ["**Power.** What the runs could have detected where they found no clear difference:", "", *power,
                  ""]
    lines += _arithmetic_lines(papers, chapters, metrics_dir, reference_dirs)
    return "\n".join(lines).rstrip() + "\n:::"


def render_intro(text: str, table: str) -> str:
    """``text`` (book/intro.md) with the generated block between :data:`INTRO_MARKERS` replaced by ``table`` (the
    intro's findings, :func:`intro_findings`)."""
    start, end = INTRO_MARKERS
    if start not in text or end not in text:
        raise MissingMetric(f"book/intro.md has no {start} ... {end} block for the findings table")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{table}\n{end}{tail}"


def figure(papers: dict | None = None, metrics_dir: Path = METRICS, path: Path = FIGURE) -> Path:
    """One dot-and-interval row per two-method claim: A − B in points with its 95 % interval, the zero line, the
    band of ± the paper's effect applied here, the verdict as the colour (with a legend), the claim in words."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    papers = load_papers() if papers is None else papers
    rows = []
    for chapter in toc_chapters():
        for claim in load_metrics(chapter, metrics_dir).get("claims", []):
            cmp = claim["comparison"]
            if claim.get("scale", 100.0) != 100.0 or "rho" in cmp or cmp.get("low") is None:
                continue
            if claim["names"][1] == "chance":
                continue
            text = f"{papers[chapter]['title']}: {label(claim)}"
            rows.append((text + (" (book)" if claim.get("origin") == "book" else ""), 100 * cmp["difference"],
                         100 * cmp["low"], 100 * cmp["high"], claim.get("smallest_effect"), claim["verdict"]))
    height = 1.9 + 0.46 * max(1, len(rows))
    fig, axis = plt.subplots(figsize=(9.5, height))  # the book's column shows 9.5 in at >= 1 px per point
    fig.subplots_adjust(left=0.47, right=0.98, top=1 - 0.15 / height, bottom=1.55 / height)
    for y, (_label, diff, low, high, smallest, verdict) in enumerate(rows):
        if smallest:
            axis.fill_betweenx([y - 0.35, y + 0.35], -100 * smallest, 100 * smallest, color="#f1e3b0", zorder=0)
        axis.plot([low, high], [y, y], color=VERDICT_COLOUR[verdict], lw=3, solid_capstyle="round", zorder=2)
        axis.plot(diff, y, "o", color="black", ms=5, zorder=3)
    axis.axvline(0, color="black", lw=1)
    import textwrap

    axis.set_yticks(range(len(rows)), ["\n".join(textwrap.wrap(r[0], 44)) for r in rows], fontsize=10)
    axis.invert_yaxis()
    axis.tick_params(axis="x", labelsize=10)
    axis.set_xlabel("A − B in points of the chapter's headline metric\n"
                    "(dot: mean over paired seeds; bar: 95 % interval)", fontsize=10)
    handles = [Patch(color=c, label=v) for v, c in VERDICT_COLOUR.items()]
    handles.append(Patch(color="#f1e3b0", label="± the paper's effect applied here"))
    fig.legend(handles=handles, fontsize=10, loc="lower center", ncol=3, frameon=False, bbox_to_anchor=(0.5, 0.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=150)
    plt.close(fig)
    tmp.replace(path)
    return path


def kept_runs(metrics_dir: Path) -> tuple[Path, Path]:
    """Where the kept runs in the other arithmetic are, beside the shown runs of ``metrics_dir``."""
    return metrics_dir / "float32", metrics_dir / "bfloat16"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Render book/results.md from book/papers.yaml and chapter metrics.")
    parser.add_argument("--metrics", type=Path, default=METRICS, help="folder of <chapter>.json and of the kept runs "
                        "(float32/, bfloat16/) (default book/metrics)")
    parser.add_argument("--check", action="store_true", help="fail if book/results.md is not up to date")
    args = parser.parse_args(argv)
    try:
        page = render(metrics_dir=args.metrics, reference_dirs=kept_runs(args.metrics))
        intro = render_intro(INTRO.read_text(encoding="utf-8"),
                             intro_findings(metrics_dir=args.metrics, reference_dirs=kept_runs(args.metrics)))
    except (BadMetrics, MissingMetric, FileNotFoundError) as error:
        sys.exit(f"tools.results_page: {error}")
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != page or INTRO.read_text(encoding="utf-8") != intro:
            sys.exit("book/results.md or book/intro.md is out of date: run `python -m tools.results_page`")
        print("book/results.md and book/intro.md are up to date")
        return
    tmp = INTRO.with_name(f".{INTRO.name}.tmp")
    tmp.write_text(intro, encoding="utf-8")
    tmp.replace(INTRO)
    figure(metrics_dir=args.metrics)
    tmp = PAGE.with_name(f".{PAGE.name}.tmp")
    tmp.write_text(page)
    tmp.replace(PAGE)  # atomic: a reader never sees half a page
    print(f"wrote {PAGE.relative_to(ROOT)} and {FIGURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

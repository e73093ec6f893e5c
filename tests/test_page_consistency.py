"""Each committed chapter page agrees with its own output (the reader's pass: prose never contradicts the output
beside it, and describes the config the page shows).

These read the executed notebooks as committed (what the book renders), so they cost no computation. The checks are
the ones that can be automated without reading the prose for meaning:

* the config a page printed is the one `book/configs.yaml` says the book shows;
* a sentence that announces an output (a markdown cell ending in ":") is followed by a code cell that shows one,
  unless that cell runs only in another config (``if medium:`` on a page shown in ``small``);
* a sentence that calls two computations exact, identical or equal is not followed by a printed maximum difference
  above float32 rounding, unless the sentence itself says the comparison is up to rounding.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chapters import NAMES

from tools.run_notebooks import shown_configs

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = list(NAMES)
EXACT = re.compile(r"\b(exact(ly)?|identical(ly)?|equals?)\b", re.I)
ROUNDING = re.compile(r"\b(rounding|round-off|up to|tolerance|bfloat16|float32)\b", re.I)
MAX_DIFF = re.compile(r"max\s*\|[^|\n]*\|\s*[=:]?\s*([0-9.]+(?:e[-+]?\d+)?)", re.I)
FLOAT32_ROUNDING = 1e-3  # float32 arithmetic on activations up to ~50 differs by ~1e-5; a real difference is far larger


def cells(chapter: str) -> list[dict]:
    return json.loads((ROOT / "notebooks" / f"{chapter}.ipynb").read_text())["cells"]


def text_of(cell: dict) -> str:
    """A cell's source, or for a code cell the text of its outputs (streams, plain text, HTML, Markdown)."""
    if cell["cell_type"] != "code":
        return "".join(cell["source"])
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        for kind in ("text/plain", "text/html", "text/markdown"):
            parts.append("".join(output.get("data", {}).get(kind, "")))
    return "\n".join(parts)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_page_prints_the_config_the_book_shows(chapter):
    shown = shown_configs()[chapter]
    printed = [m for cell in cells(chapter) if cell["cell_type"] == "code"
               for m in re.findall(r"config '(\w+)'", text_of(cell))]
    assert printed, f"{chapter}: no cell prints `config '<name>'`; the page must say which config it shows"
    assert set(printed) == {shown}, f"{chapter}: the page printed config {sorted(set(printed))}, " \
                                    f"book/configs.yaml shows it in {shown!r}: re-execute it " \
                                    f"(python -m tools.run_notebooks {chapter})"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_announced_output_is_shown(chapter):
    shown = shown_configs()[chapter]
    page = cells(chapter)
    missing = []
    for before, cell in zip(page, page[1:]):
        if before["cell_type"] != "markdown" or cell["cell_type"] != "code":
            continue
        if not "".join(before["source"]).rstrip().endswith(":") or cell.get("outputs"):
            continue
        guard = re.match(r"if (not )?medium:", "".join(cell["source"]).lstrip())
        if guard and (shown == "medium") == bool(guard.group(1)):
            continue  # the cell runs only in the config the page does not show
        missing.append(f"...{''.join(before['source']).rstrip()[-90:]!r} -> {''.join(cell['source'])[:60]!r}")
    assert not missing, f"{chapter}: text announces an output that the next cell does not show:\n" + "\n".join(missing)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_exactness_claim_beside_a_larger_printed_difference(chapter):
    page = cells(chapter)
    contradictions = []
    for i, cell in enumerate(page):
        if cell["cell_type"] != "markdown":
            continue
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", text_of(cell)) if EXACT.search(s) and not ROUNDING.search(s)]
        if not sentences:
            continue
        following = next((c for c in page[i + 1:] if c["cell_type"] == "code"), None)
        if following is None:
            continue
        printed = [float(v) for v in MAX_DIFF.findall(text_of(following))]
        if printed and max(printed) > FLOAT32_ROUNDING:
            contradictions.append(f"{sentences[0][:120]!r} beside a printed max difference of {max(printed):.1e}")
    assert not contradictions, f"{chapter}:\n" + "\n".join(contradictions)


def test_the_exactness_rule_catches_the_contradiction_it_was_written_for():
    """The FLAME page once said each facet's state is "exactly" a separate pass's, above a printed 5.0e-01."""
    claim = "Each facet's final state is then exactly what a separate pass gives."
    output = "max |decoupled - separate| = 5.0e-01"
    assert EXACT.search(claim) and not ROUNDING.search(claim)
    assert float(MAX_DIFF.findall(output)[0]) > FLOAT32_ROUNDING


# --- a page that says its numbers are computed holds no number typed by hand ----------------------------------------
# A page that says so ("its findings are generated", "every number ... is computed") may show a number only where a
# generator writes it: a whole page generated (its first line "% Generated by", and a test that it is the generator's
# rendering: tests/test_results_page.py, tests/test_bench.py) or a block between `<!-- NAME: generated by ... -->` and
# `<!-- /NAME -->` (tools/results_page.py rewrites the intro's). Notebook outputs are the chapters' computed numbers.
SAYS_COMPUTED = re.compile(r"\b(?:every|each|all|its|these|the)\s+(?:\w+\s+){0,2}(?:findings?|numbers?|results?)\b"
                           r"[^.]{0,60}?\b(?:are|is)\s+(?:\w+\s+)?(?:generated|computed)\b", re.I)
GENERATED_BLOCK = re.compile(r"<!-- (\w+): generated by [^>]*-->.*?<!-- /\1 -->", re.S)
# Digits standing alone, as a count or a measurement is written; digits inside a name (ViT-S/14, ImageNet-1k,
# SmolLM2-135M, Table 3 of a citation key) are not numbers a run produced.
NUMBER = re.compile(r"(?<![\w./\-–])[-+−]?\d[\d,.]*(?:\s?%)?(?![\w\-/–])")
NAMES_WITH_A_NUMBER = ("Gemma 3", "Llama 3")  # model names whose version is a word of its own


def hand_written_numbers(markdown: str) -> list[str]:
    """The numbers of ``markdown`` outside generated blocks, code, links' targets, roles, directives' options and
    comments: what someone typed."""
    text = GENERATED_BLOCK.sub(" ", markdown)
    text = re.sub(r"```.*?```|~~~.*?~~~", " ", text, flags=re.S)  # code and directive blocks' fences...
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)  # inline code, and a role's argument ({cite}`key`)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # a link's target
    text = re.sub(r"^\s*:[\w-]+:.*$", " ", text, flags=re.M)  # a directive's options
    for name in NAMES_WITH_A_NUMBER:
        text = text.replace(name, " ")
    return [m.group(0).strip().rstrip(".,") for m in NUMBER.finditer(text) if m.group(0).strip(".,")]


def pages_that_say_their_numbers_are_computed() -> list[tuple[str, str]]:
    """(page, markdown) for every book page and chapter prose cell that says its numbers are computed or generated."""
    found = []
    for path in sorted((ROOT / "book").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        prose = re.sub(r"```.*?```|<!--.*?-->", " ", GENERATED_BLOCK.sub(" ", text), flags=re.S)
        if SAYS_COMPUTED.search(prose) or text.startswith("% Generated by"):
            found.append((f"book/{path.name}", text))
    for chapter in CHAPTERS:
        prose = "\n\n".join(text_of(c) for c in cells(chapter) if c["cell_type"] == "markdown")
        if SAYS_COMPUTED.search(prose):
            found.append((f"notebooks/{chapter}.ipynb (its markdown)", prose))
    return found


def test_a_page_that_says_its_numbers_are_computed_types_none_by_hand():
    pages = pages_that_say_their_numbers_are_computed()
    assert "book/intro.md" in dict(pages), "the intro says its findings are generated: the check would prove nothing"
    typed = []
    for page, text in pages:
        if text.startswith("% Generated by"):
            continue  # all of it comes from its generator, which its own test re-runs
        numbers = hand_written_numbers(text)
        if numbers:
            typed.append(f"{page}: {', '.join(dict.fromkeys(numbers))}")
    assert not typed, ("numbers typed by hand on a page that says its numbers are computed (generate them, e.g. in "
                       "a block that tools/results_page.py writes, or drop them):\n" + "\n".join(typed))


def test_the_hand_written_number_check_catches_what_the_intro_once_typed():
    typed = ("All five chapters are shown in the medium config (the medium corpus's 1,540 unseen concepts; ShareLock "
             "over 7 paired seeds). LiT leads by 0.49 points [0.17, 0.81]; three decoders from 135M to 500M; "
             "shifts of −0.14 and 22 of their 23 verdicts.")
    assert hand_written_numbers(typed) == ["1,540", "7", "0.49", "0.17", "0.81", "−0.14", "22", "23"]
    clean = ("Gemma 3 270M {cite}`gemmateam2025gemma3`, DINOv2 ViT-S/14, ImageNet-1k, `python -m tools.results_page`,"
             " [Results](results.md)\n<!-- findings: generated by x -->\n| 2.56 vs 3.05 |\n<!-- /findings -->")
    assert hand_written_numbers(clean) == []

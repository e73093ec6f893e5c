"""The benchmarks run, their results are well formed, and the performance page is exactly their rendering.

(a) every benchmark of ``python -m bench`` runs in ``--quick`` mode (tiny sizes) into a temporary folder
    and writes a JSON with the machine, ratios and positive finite numbers;
(b) rendering the committed ``bench/results/*.json`` gives the committed ``book/performance.md`` byte for
    byte, so the page can never drift from the data;
(c) every ratio in every committed JSON is on the page, with its name.
"""
from __future__ import annotations

import importlib
import json
import math

import pytest

from bench import render
from bench.__main__ import BENCHMARKS

# Tiny sizes beyond --quick for the two LLM benchmarks, whose --quick still loads a model per method.
EXTRA = {"text_features": ["--n", "4"], "facets": ["--n", "2"],
         "text_precision": ["--n", "4", "--models", "offline/smollm2-135m-instruct:last_token"]}


def _numbers(obj):
    """Every measured number of a report (fitted lines may slope or cut below zero: not measures)."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key != "fits":
                yield from _numbers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _numbers(value)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_quick_run_writes_a_complete_result(name, tmp_path, single_thread):
    out = tmp_path / f"{name}.json"
    importlib.import_module(f"bench.{name}").main(["--quick", "--threads", "1", "--out", str(out),
                                                   *EXTRA.get(name, [])])
    report = json.loads(out.read_text())
    machine = render.machine_of(report)
    for key in ("cpu", "cpu_count", "torch_threads", "torch", "gpu", "date"):
        assert key in machine, key
    assert report["benchmark"] == name
    ratios = render.ratios_of(name, report)
    assert ratios or name == "scaling"
    for r in ratios:
        assert {"name", "value", "baseline", "candidate", "measure"} <= set(r)
        assert all(math.isfinite(x) and x > 0
                   for x in (r["value"], r.get("baseline_value", 1), r.get("candidate_value", 1)))
    assert all(math.isfinite(x) and x >= 0 for x in _numbers(report))
    if name == "scaling":
        assert all(p["seconds"] > 0 and p["peak_rss_mb"] > 0 for p in report["points"])
        assert set(report["fits"]) == {"precompute", "train"}
    # the page renders from any complete set of results (here: this one alone)
    assert "## GPU figures" in render.render([(name, report)], {})


def test_page_is_the_rendering_of_the_committed_results():
    loaded = render.load()
    assert {label for label, _ in loaded} >= set(BENCHMARKS), "every benchmark has a committed result"
    page = render.PAGE.read_text()
    assert page == render.render(loaded, render.figure_paths(loaded)), "run: python -m bench.render"
    for figure in render.figure_paths(loaded).values():
        assert (render.PAGE.parent / figure).is_file(), figure


def test_every_ratio_is_on_the_page():
    page = render.PAGE.read_text()
    for label, report in render.load():
        for r in render.ratios_of(render._name((label, report)), report):
            assert r["name"] in page and render.fmt_ratio(r["value"]) in page, (label, r["name"])
            # Two rows name it: the ratio with its rates, then what it compares (candidate and baseline).
            ratio_row, compares_row = [line for line in page.splitlines() if line.startswith(f"| {r['name']} |")]
            assert render.fmt_ratio(r["value"]) in ratio_row
            assert r["candidate"] in compares_row and r["baseline"] in compares_row


def test_precision_agreement_is_the_formula():
    """bench.text_precision's agreement: max |diff|, relative to the reference's largest entry, cosines, and the
    share of rows whose nearest other row is unchanged."""
    import torch

    from bench.text_precision import agreement

    reference = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    same = agreement(reference, reference.clone())
    assert same["max_abs_difference"] == 0 and same["min_cosine"] == pytest.approx(1.0)
    assert same["same_nearest_neighbour"] == 1.0
    moved = reference.clone()
    moved[1] = torch.tensor([0.2, 0.8])  # row 1 moves beside row 3: only its own nearest neighbour changes
    found = agreement(reference, moved)
    assert found["max_abs_difference"] == pytest.approx(0.7)
    assert found["max_relative_difference"] == pytest.approx(0.7 / 1.0)
    expected = torch.nn.functional.cosine_similarity(reference[1], moved[1], dim=0)
    assert found["min_cosine"] == pytest.approx(float(expected))
    assert found["same_nearest_neighbour"] == pytest.approx(3 / 4)  # row 1: row 3 now, row 0 before

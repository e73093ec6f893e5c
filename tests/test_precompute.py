"""``provision.precompute``: a generic runner over each chapter's own feature plan (book/scale_out.md).

There is one code path: the notebook materialises ``chapters.<name>.feature_plan(cfg, bench)`` and
``python -m provision.precompute --chapter <name>`` runs the very same function (tests/test_layout.py checks that
every notebook calls it), so their store keys cannot differ. What is tested here: ``--list`` prints that
plan's names and computes nothing, a run fills the store so that the notebook's plan is then a pure hit,
and bad arguments stop with one line. The real 2-rank runs are in tests/test_distributed.py.
"""
from __future__ import annotations

import pytest

import chapters
from provision import precompute
from lib.core import features
from lib.core.store import FeatureStore

EXPECTED = {  # chapter -> (entry kinds, one entry it must list)
    "sharelock": ({"image", "text"}, "image:offline/efficientnet-lite0:fashion-mnist"),
    "viterb": ({"image", "text"}, None),
    "flame": ({"image", "facets", "text"}, "facets:offline/smollm2-135m-instruct:labels:ja"),
    "fdt": ({"image-tokens", "text-tokens"}, "image-tokens:offline/dinov2-small:fashion-mnist"),
    "three_towers": ({"image"}, "image:offline/efficientnet-lite0:emoji-train-twitter"),
}


def test_every_chapter_is_tested():
    assert set(EXPECTED) == set(chapters.NAMES)


@pytest.mark.parametrize("chapter", list(EXPECTED))
def test_list_prints_the_chapters_plan_and_computes_nothing(chapter, tmp_path, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("--list called FeatureStore.get_or_compute")

    monkeypatch.setattr(FeatureStore, "get_or_compute", refuse)
    loaded = features.ENCODERS.loaded()
    assert precompute.main(["--chapter", chapter, "--list", "--store", str(tmp_path / "store")]) == 0
    names = capsys.readouterr().out.splitlines()
    module = chapters.get(chapter)
    cfg = module.load_config("small")
    assert names == module.feature_plan(cfg, module.benchmark(cfg)).names()  # the notebook's plan, as is
    kinds, example = EXPECTED[chapter]
    assert len(names) == len(set(names)) and {name.split(":")[0] for name in names} == kinds
    assert example is None or example in names
    assert features.ENCODERS.loaded() == loaded
    assert not (tmp_path / "store").exists()


def test_a_run_fills_the_store_and_the_notebooks_plan_then_computes_nothing(tmp_path, capsys):
    store = tmp_path / "store"
    args = ["--chapter", "sharelock", "--limit", "4", "--only", "text:offline/all-MiniLM-L6-v2:emoji-*",
            "--store", str(store)]
    assert precompute.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all("computed per rank [" in line and "0 reused" in line for line in lines), lines
    module = chapters.get("sharelock")
    cfg = module.load_config("small", {"data": {"limit": 4}})
    plan = module.feature_plan(cfg, module.benchmark(cfg)).select(["text:offline/all-MiniLM-L6-v2:emoji-*"])
    found = features.materialise(FeatureStore(store), plan)
    assert found.counts()[0] == 0 and found.counts()[1] == 3  # a pure hit: one shard each
    assert precompute.main(args) == 0
    assert all("computed per rank [0]" in line for line in capsys.readouterr().out.splitlines())


def test_only_that_matches_nothing_names_the_entries():
    with pytest.raises(SystemExit, match=r"--only nothing\* matches none of the \d+ entries: image:"):
        precompute.main(["--chapter", "sharelock", "--only", "nothing*", "--list"])


def test_a_row_limit_the_chapter_has_not_is_a_config_error():
    with pytest.raises(SystemExit) as exit_info:
        precompute.main(["--chapter", "viterb", "--limit", "8", "--list"])
    message = str(exit_info.value.code)
    assert message.startswith("provision.precompute: viterb config 'small':")
    assert "data" in message and "\n" not in message


@pytest.mark.parametrize("flag", ["--limit", "--shard-rows"])
def test_a_non_positive_number_is_refused(flag):
    with pytest.raises(SystemExit, match=rf"{flag} 0: expected a positive number"):
        precompute.main(["--chapter", "sharelock", flag, "0", "--list"])


def test_an_unknown_chapter_names_the_closest_one():
    with pytest.raises(SystemExit,
                       match=r"unknown chapter 'fame' \(did you mean 'flame'\?\): provision.precompute knows"):
        precompute.main(["--chapter", "fame", "--list"])

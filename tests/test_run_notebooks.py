"""The book's runner (tools/run_notebooks.py): each chapter runs in the config book/configs.yaml names, the
committed notebook keeps its source's cells (papermill's injected cell removed), and what is committed
matches what the book says it shows."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

from tools import run_notebooks

ROOT = Path(__file__).resolve().parents[1]


def test_every_chapter_is_shown_in_small_or_medium():
    shown = run_notebooks.shown_configs()
    assert set(shown) == {p.stem for p in run_notebooks.chapters()}
    assert set(shown.values()) <= {"small", "medium"}


def test_a_bad_configs_file_names_itself_and_the_fix(tmp_path, monkeypatch):
    bad = tmp_path / "configs.yaml"
    bad.write_text("sharelock: large\n", encoding="utf-8")
    monkeypatch.setattr(run_notebooks, "SHOWN", bad)
    monkeypatch.setattr(run_notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(run_notebooks, "chapters", lambda: [tmp_path / "notebooks" / "sharelock.py"])
    with pytest.raises(SystemExit, match=r"configs.yaml must map every chapter \(sharelock\) to `small` or `medium`"):
        run_notebooks.shown_configs()
    bad.unlink()
    with pytest.raises(SystemExit, match="configs.yaml is missing"):
        run_notebooks.shown_configs()


def test_chapters_run_longest_first_by_their_last_recorded_seconds(tmp_path, monkeypatch):
    (tmp_path / "book" / "metrics").mkdir(parents=True)
    monkeypatch.setattr(run_notebooks, "ROOT", tmp_path)
    for name, seconds in (("a", 10.0), ("b", 300.0), ("c", 40.0)):
        (tmp_path / "book" / "metrics" / f"{name}.json").write_text(json.dumps({"seconds": seconds}))
    (tmp_path / "book" / "metrics" / "broken.json").write_text("{not json")
    sources = [tmp_path / "notebooks" / f"{name}.py" for name in ("a", "new", "b", "broken", "c")]
    assert [s.stem for s in run_notebooks.longest_first(sources)] == ["b", "c", "a", "new", "broken"]


def test_run_all_skips_current_chapters_and_sets_up_medium_once_before_any_chapter(tmp_path, monkeypatch):
    sources = [tmp_path / f"{name}.py" for name in ("fresh", "stale_small", "stale_medium")]
    shown = {"fresh": "medium", "stale_small": "small", "stale_medium": "medium"}
    events = []
    monkeypatch.setattr(run_notebooks, "is_current", lambda source, config: source.stem == "fresh")
    monkeypatch.setattr(run_notebooks, "ensure_medium_setup", lambda: events.append("setup"))
    monkeypatch.setattr(run_notebooks, "run", lambda source, force, config: events.append((source.stem, config)) or 1.0)
    assert run_notebooks.run_all(sources, shown, force=False, jobs=1) == {"stale_small": 1.0, "stale_medium": 1.0}
    assert events[0] == "setup" and sorted(events[1:]) == [("stale_medium", "medium"), ("stale_small", "small")]
    events.clear()
    assert run_notebooks.run_all(sources[:2], {**shown, "fresh": "small"}, force=False, jobs=2) == {"stale_small": 1.0}
    assert events == [("stale_small", "small")], "no medium chapter to run: no medium set-up; one chapter: no pool"


def test_the_fingerprint_changes_with_the_shown_config():
    source = run_notebooks.ROOT / "notebooks" / "sharelock.py"
    assert run_notebooks.fingerprint(source, "small") != run_notebooks.fingerprint(source, "medium")
    assert run_notebooks.fingerprint(source, "medium") == run_notebooks.fingerprint(source, "medium")


def test_the_fingerprint_reads_only_the_shown_section_of_the_config(tmp_path, monkeypatch):
    (tmp_path / "notebooks" / "configs").mkdir(parents=True)
    config = tmp_path / "notebooks" / "configs" / "chapter.yaml"
    source = tmp_path / "notebooks" / "chapter.py"
    monkeypatch.setattr(run_notebooks, "ROOT", tmp_path)

    def section(small_steps, medium_steps):
        config.write_text(f"small:\n  steps: {small_steps}\nmedium:\n  steps: {medium_steps}\n", encoding="utf-8")
        return run_notebooks.config_section(source, "medium")

    shown = section(10, 100)
    assert section(5, 100) == shown          # CI's small section changed: the medium outputs still hold
    assert section(10, 200) != shown         # the shown section changed: re-execute
    with pytest.raises(SystemExit, match="chapter.yaml has no `full` section, but book/configs.yaml shows chapter"):
        run_notebooks.config_section(source, "full")


def test_the_injected_parameters_cell_is_removed_and_nothing_else():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('config = "small"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell('config = "medium"', metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("print(config)"),
    ])
    kept = run_notebooks.without_injected_parameters(notebook)
    assert [c.source for c in kept.cells] == ['config = "small"', "print(config)"]


def test_image_outputs_lose_their_fixed_size_and_keep_everything_else():
    figure = nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"},
                                    metadata={"image/png": {"width": 727, "height": 233}})
    other = nbformat.v4.new_output("display_data", data={"image/jpeg": "/9j/"},
                                   metadata={"image/jpeg": {"width": 10, "unconfined": True}})
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("plot()", outputs=[figure, other])])
    outputs = run_notebooks.unsized_images(notebook).cells[0].outputs
    assert outputs[0].metadata == {} and outputs[0].data["image/png"] == "iVBOR"
    assert outputs[1].metadata == {"image/jpeg": {"unconfined": True}}


@pytest.mark.parametrize("source", run_notebooks.chapters(), ids=lambda p: p.stem)
def test_no_committed_figure_carries_a_fixed_size(source):
    """A fixed size is stretched by the book's column (tools.run_notebooks.unsized_images)."""
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    sized = [(i, kind) for i, cell in enumerate(committed.cells) for output in cell.get("outputs", [])
             for kind, value in output.get("metadata", {}).items()
             if kind.startswith("image/") and isinstance(value, dict) and {"width", "height"} & set(value)]
    assert not sized, f"{source.stem}.ipynb: image outputs with a fixed size (cell, format): {sized}"


def test_each_cells_seconds_are_recorded_slowest_first_outside_the_committed_notebook(tmp_path, monkeypatch, capsys):
    def timed(source, seconds, kind="code"):
        make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        return make(source, metadata={} if seconds is None else {"papermill": {"duration": seconds}})

    notebook = nbformat.v4.new_notebook(cells=[
        timed("import x", 0.25), timed("# Features\n\nfound = materialise(plan)", 754.04),
        timed("## prose", 0.0, kind="markdown"), timed("runs = train_all()", 483.3), timed("never run", None)])
    monkeypatch.setattr(run_notebooks, "ROOT", tmp_path)
    out = run_notebooks.record_cell_seconds(notebook, tmp_path / "notebooks" / "flame.py", "medium")
    assert out == tmp_path / "runs" / "flame" / "cells.json"
    recorded = json.loads(out.read_text())
    assert recorded["chapter"] == "flame" and recorded["config"] == "medium"
    assert recorded["cells"] == [
        {"cell": 1, "seconds": 754.0, "first_line": "# Features"},
        {"cell": 3, "seconds": 483.3, "first_line": "runs = train_all()"},
        {"cell": 0, "seconds": 0.2, "first_line": "import x"}]  # markdown and unexecuted cells carry no time
    assert not list(out.parent.glob(".*.tmp"))
    assert "flame: slowest cells: cell 1 754 s (# Features); cell 3 483 s" in capsys.readouterr().out
    assert "papermill" in notebook.cells[1].metadata  # recording leaves the notebook as it was


@pytest.mark.parametrize("source", run_notebooks.chapters(), ids=lambda p: p.stem)
def test_the_committed_notebook_shows_the_config_the_book_names(source):
    shown = run_notebooks.shown_configs()[source.stem]
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    assert committed.metadata.get("book", {}).get("config", "small") == shown, (
        f"{source.stem}.ipynb was executed in another config than book/configs.yaml names ({shown}): "
        f"run `python -m tools.run_notebooks --force {source.stem}`")
    # nbval runs the committed notebook as it is: no injected cell may make CI run anything but the default
    assert not [c for c in committed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    tagged = [c for c in jupytext.read(source).cells if "parameters" in c.metadata.get("tags", [])]
    assert 'config = "small"' in tagged[0].source
    metrics = json.loads((ROOT / "book" / "metrics" / f"{source.stem}.json").read_text(encoding="utf-8"))
    assert metrics["config"] == shown, f"book/metrics/{source.stem}.json is from the {metrics['config']} config"
    assert yaml.safe_load((ROOT / "notebooks" / "configs" / f"{source.stem}.yaml").read_text())[shown]


def test_a_chapter_depends_on_the_lib_modules_it_imports_and_not_on_other_chapters():
    by_name = {source.stem: {p.relative_to(ROOT).as_posix() for p in run_notebooks.lib_closure(source)}
               for source in run_notebooks.chapters()}
    for name, closure in by_name.items():
        assert {f"chapters/{name}/__init__.py", f"chapters/{name}/experiments.py"} <= closure
        assert {"lib/__init__.py", "chapters/__init__.py", "lib/core/train.py", "lib/core/store.py"} <= closure
        others = {path for path in closure for other in by_name if other != name
                  and path.startswith(f"chapters/{other}/")}
        assert not others, f"{name} would be re-executed when another chapter's module changes: {sorted(others)}"


def test_the_closure_follows_imports_transitively_with_their_packages(tmp_path, monkeypatch):
    package = tmp_path / "lib" / "pkg"  # lib.pkg.b imports lib.pkg.c; lib.pkg.unused is imported by no one
    package.mkdir(parents=True)
    files = {("__init__.py",): "", ("pkg", "__init__.py"): "", ("pkg", "b.py"): "from lib.pkg import c\n",
             ("pkg", "c.py"): "import json\n", ("pkg", "unused.py"): ""}
    for parts, text in files.items():
        tmp_path.joinpath("lib", *parts).write_text(text, encoding="utf-8")
    notebook = tmp_path / "nb.py"
    notebook.write_text("# %%\nfrom lib.pkg.b import something\n", encoding="utf-8")
    monkeypatch.setattr(run_notebooks, "ROOT", tmp_path)
    found = {p.relative_to(tmp_path / "lib").parts for p in run_notebooks.lib_closure(notebook)}
    assert found == set(files) - {("pkg", "unused.py")}


def test_set_up_time_code_keys_only_the_full_config(tmp_path, monkeypatch):
    """A dataset preparer that an offline run never executes does not re-execute a chapter shown offline."""
    for parts, text in {("lib", "__init__.py"): "", ("lib", "a.py"): "",
                        ("provision", "__init__.py"): "", ("provision", "preflight.py"): "from corpora import only\n",
                        ("corpora", "__init__.py"): "", ("corpora", "only.py"): ""}.items():
        tmp_path.joinpath(*parts).parent.mkdir(parents=True, exist_ok=True)
        tmp_path.joinpath(*parts).write_text(text, encoding="utf-8")
    notebook = tmp_path / "nb.py"
    notebook.write_text("# %%\nfrom lib import a\nfrom provision.preflight import require\n", encoding="utf-8")
    monkeypatch.setattr(run_notebooks, "ROOT", tmp_path)
    offline = {p.relative_to(tmp_path).parts for p in run_notebooks.lib_closure(notebook, "medium")}
    full = {p.relative_to(tmp_path).parts for p in run_notebooks.lib_closure(notebook, "full")}
    assert offline == {("lib", "__init__.py"), ("lib", "a.py")}
    assert full == offline | {("provision", "__init__.py"), ("provision", "preflight.py"), ("corpora", "__init__.py"),
                              ("corpora", "only.py")}


@pytest.mark.parametrize("source", run_notebooks.chapters(), ids=lambda p: p.stem)
def test_a_chapter_runs_set_up_time_code_only_in_the_full_config(source):
    """The premise of :data:`tools.run_notebooks.SETUP_TIME_PACKAGES`: a notebook imports nothing from them but
    ``provision.preflight.require``, and calls it only under ``if config == "full"``."""
    import ast

    tree = ast.parse(source.read_text(encoding="utf-8"))
    imported = {(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[0] in run_notebooks.SETUP_TIME_PACKAGES for alias in node.names}
    assert imported == {("provision.preflight", "require")}
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Import)
                and any(a.name.split(".")[0] in run_notebooks.SETUP_TIME_PACKAGES for a in node.names)]
    guarded = {id(call) for branch in ast.walk(tree) if isinstance(branch, ast.If)
               and ast.unparse(branch.test) == "config == 'full'" for statement in branch.body
               for call in ast.walk(statement) if isinstance(call, ast.Call)}
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "require"]
    assert calls and all(id(call) in guarded for call in calls), f"{source.stem}: require() outside config == 'full'"


@pytest.mark.parametrize("source", run_notebooks.chapters(), ids=lambda p: p.stem)
def test_the_committed_outputs_come_from_the_current_inputs(source):
    """The book shows what the code computes now: each committed notebook was executed from its current source,
    config and lib modules, in the config it is shown in (else `make book` would re-execute it)."""
    shown = run_notebooks.shown_configs()[source.stem]
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    assert committed.metadata.get("book", {}).get("fingerprint") == run_notebooks.fingerprint(source, shown), (
        f"{source.stem}: its inputs changed since its committed run; re-execute it: "
        f"python -m tools.run_notebooks {source.stem}")


def _root_conftest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    root_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root_conftest)
    return root_conftest


def _item(path: Path):
    """What the root conftest's hook reads of a collected item: its path and nbval's options."""
    from collections import defaultdict
    from types import SimpleNamespace

    return SimpleNamespace(path=path, options=defaultdict(bool, check=True))


def test_nbval_compares_outputs_only_of_notebooks_shown_in_the_config_it_runs():
    shown = run_notebooks.shown_configs()
    items = [_item(ROOT / "notebooks" / f"{name}.ipynb") for name in shown]
    test_file = _item(ROOT / "tests" / "test_layout.py")
    _root_conftest().pytest_collection_modifyitems(None, [*items, test_file])
    assert {Path(i.path).stem: i.options["check"] for i in items} == {n: c == "small" for n, c in shown.items()}


def test_each_chapter_test_runs_on_the_worker_that_ran_its_notebook_after_it():
    """make test runs on two workers (pytest-xdist, --dist loadgroup): a test that checks the run nbval made of a
    chapter must share that notebook's group (one worker, in collection order), and the notebooks come first."""
    conftest = _root_conftest()
    group = conftest.worker_group
    assert group("notebooks/fdt.ipynb::Cell 3") == group("notebooks/fdt::ipynb::Cell 0") == "fdt"
    assert group("tests/test_fdt_chapter.py::test_claims_follow_the_one_rule") == "fdt"
    assert group("tests/test_notebooks.py::test_py_and_ipynb_are_in_sync[flame]") == "sharelock"
    assert group("tests/test_results_page.py::test_the_chapter_as_run_now[viterb]") == "viterb"
    assert group("tests/test_results_page.py::test_a_chapter_without_metrics") == "tests/test_results_page.py"
    assert group("tests/test_store.py::test_round_trip[float16]") == "tests/test_store.py"
    assert set(conftest.READS_THE_CHAPTER_RUN.values()) <= set(conftest.NOTEBOOK_ORDER)
    # Every test module that reads a chapter's nbval run is in the map (else it may run before, or beside, the
    # notebook).
    readers = {path.stem: found.group(1) for path in (ROOT / "tests").glob("test_*.py")
               for found in [re.search(r'chapter_metrics\("(\w+)"', path.read_text(encoding="utf-8"))] if found}
    assert readers == conftest.READS_THE_CHAPTER_RUN
    assert set(conftest.NOTEBOOK_ORDER) == {p.stem for p in run_notebooks.chapters()}

    cells = [_item(ROOT / "notebooks" / f"{name}.ipynb") for name in ("fdt", "fdt", "viterb", "sharelock")]
    tests = [_item(ROOT / "tests" / "test_fdt_chapter.py"), _item(ROOT / "tests" / "test_rehearsal.py")]
    items = [tests[0], *cells, tests[1]]
    conftest.pytest_collection_modifyitems(None, items)
    assert items == [cells[2], cells[3], cells[0], cells[1], tests[1], tests[0]]  # longest first, cells in order

"""pytest, for the whole repository: nbval and a notebook that the book shows in another config.

``make test`` runs nbval on the committed notebooks, in their default config (``small``: papermill's injected cell is
removed when the book executes them, tools/run_notebooks.py). A notebook that ``book/configs.yaml`` shows in another
config (``medium``) carries that config's outputs, which a ``small`` run cannot reproduce, so its
``NBVAL_CHECK_OUTPUT`` cells still run (an error fails the test) without their outputs being compared. The numbers
of the ``small`` run are checked by the chapter tests (tests/test_notebooks.py and the others) instead.

``make test`` runs on two workers (``pytest -n 2 --dist loadgroup``, pytest-xdist). Each notebook and every test that
reads its run share a group, and so a worker, in collection order: nbval executes the chapter first, then its tests
check the ``metrics.json`` it wrote. Every other test file is a group of its own, so its module fixtures are built
once. Each worker (and every kernel and subprocess it starts) uses one torch thread: two workers with two threads
each on two cores spin against each other.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# The tests train for real: a run read back from the run cache (lib.core.run_cache, on with LIB_RUN_CACHE=1 under
# `make book`) would make a determinism or a learning test pass without training. tests/test_run_cache.py turns
# it on in a scratch folder. Set here, before nbval starts a kernel, so the notebooks' kernels inherit it.
os.environ["LIB_RUN_CACHE"] = "0"
if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported, and inherited by nbval's kernels
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

# The chapter a test module checks through the run nbval made of it in this session (tests/conftest.chapter_metrics),
# or (test_results_page) whose run its `chapter` parameter names: that test must run after the notebook, on its worker.
READS_THE_CHAPTER_RUN = {"test_notebooks": "sharelock", "test_fdt_chapter": "fdt", "test_flame_chapter": "flame",
                         "test_three_towers_chapter": "three_towers", "test_viterb": "viterb"}
# Notebooks first, longest first, so that the two workers start on the two longest chapters.
NOTEBOOK_ORDER = ["viterb", "flame", "sharelock", "three_towers", "fdt"]


def _group(item, path: Path) -> str:
    if path.suffix == ".ipynb":
        return path.stem
    chapter = getattr(getattr(item, "callspec", None), "params", {}).get("chapter")
    if path.stem == "test_results_page" and chapter:
        return chapter
    return READS_THE_CHAPTER_RUN.get(path.stem, path.stem)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    from tools.run_notebooks import shown_configs

    shown = shown_configs()
    rank = {name: i for i, name in enumerate(NOTEBOOK_ORDER)}

    def path_of(item) -> Path:
        return Path(str(getattr(item, "path", getattr(item, "fspath", ""))))

    notebooks = [item for item in items if path_of(item).suffix == ".ipynb"]
    notebooks.sort(key=lambda item: rank.get(path_of(item).stem, len(rank)))  # stable: cells keep their order
    items[:] = notebooks + [item for item in items if path_of(item).suffix != ".ipynb"]
    for item in items:
        path = path_of(item)
        item.add_marker(pytest.mark.xdist_group(_group(item, path)))
        options = getattr(item, "options", None)
        if path.suffix == ".ipynb" and isinstance(options, dict) and shown.get(path.stem, "small") != "small":
            options["check"] = False

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
import re
from pathlib import Path

import pytest

# The tests train for real: a run read back from the run cache (lib.core.run_cache, on with LIB_RUN_CACHE=1 under
# `make book`) would make a determinism or a learning test pass without training. tests/test_run_cache.py turns
# it on in a scratch folder. Set here, before nbval starts a kernel, so the notebooks' kernels inherit it.
os.environ["LIB_RUN_CACHE"] = "0"
if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported, and inherited by nbval's kernels
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")

# The chapter whose nbval run of this session a test module checks (chapter_metrics in tests/conftest.py), or, for
# test_results_page, the one its `chapter` parameter names: such a test must run after the notebook, on its worker.
READS_THE_CHAPTER_RUN = {"test_notebooks": "sharelock", "test_fdt_chapter": "fdt", "test_flame_chapter": "flame",
                         "test_three_towers_chapter": "three_towers", "test_viterb": "viterb"}
# Notebooks first, longest first, so that the two workers start on the two longest chapters; then the rehearsals (the
# longest test file); then the rest in collection order (make test passes --no-loadscope-reorder to keep this order).
NOTEBOOK_ORDER = ["viterb", "flame", "sharelock", "three_towers", "fdt"]
EARLY_TESTS = ["test_rehearsal"]
_NOTEBOOK = re.compile(r"(?:^|/)notebooks/(\w+)(?:\.|::)ipynb(?:::|$)")  # pytest 9 may show "name::ipynb"


def worker_group(nodeid: str) -> str:
    """The unit that one worker runs in collection order: a notebook's cells with the tests of its run, else a file."""
    found = _NOTEBOOK.search(nodeid)
    if found:
        return found.group(1)
    path, _, rest = nodeid.partition("::")
    stem = Path(path).stem
    param = rest[rest.find("[") + 1:-1] if rest.endswith("]") else ""
    if stem == "test_results_page" and param in NOTEBOOK_ORDER:
        return param
    return READS_THE_CHAPTER_RUN.get(stem, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the groups of :func:`worker_group` (pytest-xdist's own groups come from renaming
    node ids, which pytest 9 no longer allows)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ChapterGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return ChapterGroups(config, log)


def pytest_collection_modifyitems(config, items):
    from tools.run_notebooks import shown_configs

    shown = shown_configs()
    rank = {name: i for i, name in enumerate(NOTEBOOK_ORDER)}

    def path_of(item) -> Path:
        return Path(str(getattr(item, "path", getattr(item, "fspath", ""))))

    def place(item) -> tuple:
        path = path_of(item)
        if path.suffix == ".ipynb":
            return 0, rank.get(path.stem, len(rank))
        return (1, EARLY_TESTS.index(path.stem)) if path.stem in EARLY_TESTS else (2, 0)

    items.sort(key=place)  # stable: cells and tests keep their order within a file
    for item in items:
        path = path_of(item)
        options = getattr(item, "options", None)
        if path.suffix == ".ipynb" and isinstance(options, dict) and shown.get(path.stem, "small") != "small":
            options["check"] = False

"""pytest, for the whole repository: nbval and a notebook that the book shows in another config.

``make test`` runs nbval on the committed notebooks, in their default config (``small``: papermill's injected cell is
removed when the book executes them, tools/run_notebooks.py). A notebook that ``book/configs.yaml`` shows in another
config (``medium``) carries that config's outputs, which a ``small`` run cannot reproduce, so its
``NBVAL_CHECK_OUTPUT`` cells still run (an error fails the test) without their outputs being compared. The numbers
of the ``small`` run are checked by the chapter tests (tests/test_notebooks.py and the others) instead.
"""
from __future__ import annotations

import os
from pathlib import Path


def pytest_configure(config):
    """Under pytest-xdist (``make test`` runs two workers on CI's two cores), each worker and every notebook
    kernel it starts gets its share of the cores: two processes of two torch threads each on two cores
    would spend their time waiting on each other (``lib.core.notebook.setup`` reads ``OMP_NUM_THREADS``)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1 and not os.environ.get("OMP_NUM_THREADS"):
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(config, items):
    from tools.run_notebooks import shown_configs

    shown = shown_configs()
    for item in items:
        path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
        options = getattr(item, "options", None)
        if path.suffix == ".ipynb" and isinstance(options, dict) and shown.get(path.stem, "small") != "small":
            options["check"] = False

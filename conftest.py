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

# The tests train for real: a run read back from the run cache (lib.core.run_cache, on with LIB_RUN_CACHE=1 under
# `make book`) would make a determinism or a learning test pass without training. tests/test_run_cache.py turns
# it on in a scratch folder. Set here, before nbval starts a kernel, so the notebooks' kernels inherit it.
os.environ["LIB_RUN_CACHE"] = "0"


def pytest_collection_modifyitems(config, items):
    from tools.run_notebooks import shown_configs

    shown = shown_configs()
    for item in items:
        path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
        options = getattr(item, "options", None)
        if path.suffix == ".ipynb" and isinstance(options, dict) and shown.get(path.stem, "small") != "small":
            options["check"] = False

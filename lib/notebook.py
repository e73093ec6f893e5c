"""What every chapter does first and last: the run's environment, and its results file.

Why a module: the five chapters open with the same settings (the small config never touches the
Hugging Face hub; ``OMP_NUM_THREADS`` decides the torch threads on a shared machine; one figure style)
and end by writing ``metrics.json`` that the tests and the results page read. Written once here, a
chapter cannot drift from the others. See notebooks/sharelock.py, section "Results file".
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from lib.atomic import write_json

__all__ = ["setup", "write_metrics"]


def setup(config: str) -> float:
    """Prepare a chapter's run of ``config``; return its start time (``time.time()``).

    * ``HF_HUB_OFFLINE``: ``1`` for the small config (its models are local), ``0`` for the full one,
      unless the environment already says (a user's own setting wins);
    * torch threads: ``OMP_NUM_THREADS`` when set (CI, a shared machine), else every core;
    * seaborn's whitegrid theme for every figure.
    """
    import seaborn as sns
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1" if config == "small" else "0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    sns.set_theme(style="whitegrid", context="notebook")
    return time.time()


def write_metrics(output_dir: str | os.PathLike, metrics: Mapping) -> Path:
    """Write ``metrics`` to ``<output_dir>/metrics.json`` atomically and return the path.

    Numbers of any kind (numpy, torch scalars) become JSON floats. Atomic (written beside the target,
    then renamed): the tests and ``tools/run_notebooks.py`` never read half a file.
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    write_json(path, json.loads(json.dumps(metrics, default=float)))
    return path

"""Benchmark: how time and memory grow with the dataset, for precompute into the store and for training.

A reader of the book should see that the pipeline's cost is linear in the number of rows and that
memory does not blow up. For each size (1k to 100k rows of synthetic features of realistic width:
768-d image, 576-d text) two steps run, each in a **fresh subprocess** so that one size's memory
cannot hide in another's:

* **precompute**: ``FeatureStore.get_or_compute`` of both entries with a cheap synthetic compute
  function (seeded Gaussian rows), so what is timed is the store (fp16 conversion, checksums, atomic
  writes), not an encoder;
* **train**: open those entries, read them into resident float32 tensors and train the small-config
  ShareLock head (``lib.core.train.fit``) for one epoch (rows / batch steps).

Memory is the process's peak resident set size (``VmHWM`` in ``/proc/self/status``, which counts
NumPy, torch and everything else alike; Python's ``tracemalloc`` would miss torch's allocations)
minus the resident size just before the step began (after imports), so the figure is what the step
itself added. Training keeps every feature resident by design, so its
memory *should* grow as rows x (768 + 576) x 4 bytes; the report gives that size beside the measure.
A straight line fitted to each curve gives the cost per 1,000 rows, and a fit in log-log space
its exponent (1 = linear).

    .venv/bin/python -m bench.scaling --sizes 1000 3000 10000 30000 100000
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import _common

NAME = "scaling"
SIZES, QUICK_SIZES = (1000, 3000, 10_000, 30_000, 100_000), (500, 1000)
WIDTHS = {"image": 768, "text": 576}
HEAD = dict(hidden_dim=512, num_layers=4, dropout=0.2)  # the small config's head
BATCH = 256
TASKS = ("precompute", "train")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``). Not ``getrusage().ru_maxrss``: Linux carries that
    over ``fork`` + ``exec``, so a child would report its parent's peak (measured: the same ~1.9 GB at
    every size after the vision benchmark had run in the parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e3  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # no /proc: Linux kB, may include the parent


def _spec(kind: str, rows: int) -> dict:
    return {"kind": f"bench-{kind}", "rows": rows, "dim": WIDTHS[kind]}


def worker(task: str, rows: int, root: Path) -> dict:
    """One step at one size, in this (fresh) process; returns seconds and memory."""
    import torch

    from lib.core.store import FeatureStore

    store = FeatureStore(root)
    ids = [str(i) for i in range(rows)]
    if task == "train":
        from lib.core.config import HeadConfig, LossConfig, TrainSettings
        from lib.core.train import fit, seed_everything
        from lib.methods.sharelock import ShareLock

        import torch._dynamo  # noqa: F401  (torch.optim imports it on the first step: a one-off ~1 s, not a cost per row)
    before = _rss_mb()
    start = time.perf_counter()
    if task == "precompute":
        for kind, dim in WIDTHS.items():
            def compute(r, dim=dim):
                return np.random.default_rng(int(r[0])).standard_normal((len(r), dim), dtype=np.float32)

            store.get_or_compute(_spec(kind, rows), ids, compute, progress=False)
    else:
        data = {kind: store.open(_spec(kind, rows)).tensor(torch.float32) for kind in WIDTHS}
        seed_everything(0)
        method = ShareLock(WIDTHS["text"], WIDTHS["image"], HeadConfig(**HEAD), LossConfig())
        steps = max(1, rows // BATCH)
        fit(method, data, None, TrainSettings(steps=steps, batch_size=BATCH, warmup_steps=min(10, steps),
                                            eval_every=steps), progress=False)
    seconds = time.perf_counter() - start
    peak = _peak_rss_mb()
    return {"task": task, "rows": rows, "seconds": seconds, "rss_before_mb": before, "peak_rss_mb": peak,
            "peak_added_mb": max(0.0, peak - before)}


def run_worker(task: str, rows: int, root: Path, threads: int | None) -> dict:
    command = [sys.executable, "-m", "bench.scaling", "--worker", task, "--rows", str(rows), "--root", str(root)]
    if threads:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def fit_line(rows: list[int], values: list[float]) -> dict:
    """Least squares ``value = a + b * rows`` (b per 1,000 rows) and the log-log exponent."""
    x, y = np.asarray(rows, dtype=float), np.asarray(values, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    positive = y > 0
    exponent = float(np.polyfit(np.log(x[positive]), np.log(y[positive]), 1)[0]) if positive.sum() >= 2 else None
    return {"per_1000_rows": float(slope * 1000), "intercept": float(intercept), "loglog_exponent": exponent}


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="rows (default 1k..100k; --quick 500, 1k)")
    parser.add_argument("--worker", choices=TASKS, help=argparse_hidden())
    parser.add_argument("--rows", type=int, help=argparse_hidden())
    parser.add_argument("--root", help=argparse_hidden())
    args = parser.parse_args(argv)
    _common.setup_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args.worker, args.rows, Path(args.root))))
        return {}
    if args.device != "cpu":
        print("scaling measures host memory and the store on CPU; --device is ignored")
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    points = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        for rows in sizes:
            for task in TASKS:
                points.append(run_worker(task, rows, Path(tmp) / "store", args.threads))
                print(f"{task:>10} {rows:>7} rows: {points[-1]['seconds']:.2f} s, "
                      f"+{points[-1]['peak_added_mb']:.0f} MB peak")
    fits = {}
    for task in TASKS:
        mine = [p for p in points if p["task"] == task]
        rows = [p["rows"] for p in mine]
        fits[task] = {"seconds": fit_line(rows, [p["seconds"] for p in mine]),
                      "peak_added_mb": fit_line(rows, [p["peak_added_mb"] for p in mine])}
    report = {
        "benchmark": NAME,
        "machine": _common.machine_info("cpu"),
        "config": {"sizes": list(sizes), "widths": WIDTHS, "head": HEAD, "batch_size": BATCH,
                   "store_dtype": "float16", "epochs": 1, "quick": args.quick},
        "memory_measure": "peak RSS (VmHWM) of a fresh subprocess minus its RSS just before the step",
        "resident_feature_mb_per_1000_rows": 1000 * sum(WIDTHS.values()) * 4 / 1e6,
        "stored_feature_mb_per_1000_rows": 1000 * sum(WIDTHS.values()) * 2 / 1e6,
        "ratios": [],
        "points": points,
        "fits": fits,
    }
    _common.write_report(report, args.out)
    for task, fit in fits.items():
        print(f"{task}: {fit['seconds']['per_1000_rows']:.3g} s and {fit['peak_added_mb']['per_1000_rows']:.3g} MB "
              f"per 1,000 rows; time exponent {fit['seconds']['loglog_exponent']:.2f}")
    return report


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()

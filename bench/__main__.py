"""Run the book's benchmarks: ``python -m bench`` (all), ``--only NAME ...``, ``--quick`` (tiny sizes).

Each benchmark writes ``<out-dir>/<name>.json`` (default ``bench/results/``); then
``python -m bench.render`` turns those into ``book/performance.md``. Flags after ``--`` go to every
benchmark (e.g. ``python -m bench --only training -- --cases paper``). ``--device cuda`` runs the GPU
variant of each benchmark that has one (bf16 autocast, resident features).

Time on 2 CPU cores at default sizes: vision_features, store, image_shards, training and scaling together take
a few minutes; text_features (one caption at a time through an LLM), text_precision (three language models
in float32 and bfloat16, one of them again without the CPU's bfloat16 units) and facets (two LLMs, three
methods) take about 4, 3 and 25 minutes, so ``--skip-slow`` leaves them (and their committed JSON) alone.
"""
from __future__ import annotations

import argparse
import importlib
import time
from pathlib import Path

from bench import _common

BENCHMARKS = ("vision_features", "store", "image_shards", "training", "scaling", "text_features", "text_precision",
              "facets")
SLOW = ("text_features", "text_precision", "facets")


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=None)
    parser.add_argument("--skip-slow", action="store_true", help=f"leave out {', '.join(SLOW)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that each benchmark runs")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out-dir", default=str(_common.RESULTS_DIR))
    parser.add_argument("extra", nargs="*", help="flags passed to every benchmark (after --)")
    args = parser.parse_args(argv)
    names = args.only or [n for n in BENCHMARKS if not (args.skip_slow and n in SLOW)]
    seconds = {}
    for name in names:
        flags = ["--out", str(Path(args.out_dir) / f"{name}.json"), "--device", args.device, *args.extra]
        flags += ["--quick"] if args.quick else []
        flags += ["--threads", str(args.threads)] if args.threads else []
        print(f"== bench.{name} {' '.join(flags)}", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main(flags)
        seconds[name] = time.perf_counter() - start
        print(f"== bench.{name}: {seconds[name]:.0f} s", flush=True)
    return seconds


if __name__ == "__main__":
    main()

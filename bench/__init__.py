"""The book's benchmarks (issue 8, "speed is a feature"): each measures a fast path of ``lib`` against a
baseline in the same run and writes ``bench/results/<name>.json``; ``python -m bench`` runs them all and
``python -m bench.render`` turns the results into ``book/performance.md``."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the small config never touches the hub

"""FLAME against the text tower from scratch as the training set grows (the medium config), and the stuck-run
check. See notebooks/flame.py, section "The medium config: more concepts, longer descriptions, five languages".
"""
from __future__ import annotations

from chapters.flame.config import MediumConfig
from chapters.flame.experiments import MediumFeatures, run, run_key
from corpora.datasets import Benchmark
from lib.core import curves
from lib.core.results import Runs, stuck


def stuck_runs(runs: Runs, cfg: MediumConfig) -> list[dict]:
    """Runs whose best validation step is their first evaluation: they never improved and must not be reported."""
    return [r for r in runs if stuck(r, cfg.train.eval_every)]


def data_size_curve(cfg: MediumConfig, bench: Benchmark, feats: MediumFeatures, runs: Runs,
                    configs: dict | None = None) -> Runs:
    """FLAME (all K facets) and the text tower from scratch at each of ``curve_sizes`` nested training sizes, the
    first ``curve_seeds`` seeds (all when None), each with its recipe (``configs``,
    :func:`chapters.flame.choose_recipes`); rows of ``runs`` at the same size are reused, not retrained."""
    curve, configs = Runs(), configs or {}
    for size in cfg.curve_sizes:
        for kind, label in (("flame", "flame"), ("scratch", "scratch")):
            for seed in cfg.curve_run_seeds:
                done = [r for r in runs
                        if run_key(r, cfg) == label and r["seed"] == seed and r["train_pairs"] == size]
                curve.add(done[0] if done else run(configs.get(kind, cfg), bench, feats, kind, seed,
                                                   train_pairs=size)[0])
    return curve


CURVE = ({"method": "flame"}, {"method": "scratch"}, ("FLAME", "scratch"))  # the curve's comparison: A, B, names


def curve_frame(curve: Runs, metric: str):
    """One row per training size: FLAME and scratch mean ± sd and the rule's outcome (:func:`lib.core.curves.table`)."""
    return curves.table(curve, metric, *CURVE)


def curve_trend(curve: Runs, metric: str) -> str:
    """One sentence: FLAME − scratch in points at each training size (:func:`lib.core.curves.trend`)."""
    return curves.trend(curve, metric, *CURVE)

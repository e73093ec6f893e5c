"""ViTeRB's data-size curve: every language model trained again on the class names with nested shares of the
training images, so that the decoder-vs-encoder gap is read as the data grow.
See notebooks/viterb.py, section "More data: decoders against encoders as the training set grows".
"""
from __future__ import annotations

from chapters.viterb.config import Config
from chapters.viterb.experiments import ChapterFeatures, RunSpec, recipe_for, seed_benchmark, train_and_score
from corpora.class_splits import ClassBenchmark
from lib.core import curves
from lib.core.results import Runs

CURVE_KIND = "name"  # the curve's text type: Table 1's class-name column, the paper's headline (Llama-3 vs BERT)


def curve_specs(cfg: Config, n_train: int) -> list[RunSpec]:
    """The runs of the data-size curve below the whole training set: every text model on the class names of the
    first score dataset, at each of ``curve_fractions`` of its ``n_train`` training images, on the curve's seeds
    (``curve_run_seeds``; the whole set is the main grid's run, reused)."""
    if not cfg.curve_fractions:
        return []
    dataset, main = cfg.score_datasets[0], cfg.vision[0]
    return [RunSpec("curve", dataset, t, CURVE_KIND, main, seed, train_images=size)
            for size in curves.sizes(n_train, cfg.curve_fractions) if size < n_train
            for t in cfg.text for seed in cfg.curve_run_seeds]


def data_size_curve(cfg: Config, benches: dict[str, ClassBenchmark], feats: ChapterFeatures,
                    runs: Runs, chosen: dict | None = None) -> Runs:
    """Decoders against encoders as the training set grows (:func:`curve_specs`; the whole-set points are the main
    grid's runs on the same dataset and text type), each model with its recipe (``chosen``). ``curve_size`` is a
    point's x: the subset's size, or for the whole set the mean over the seeds' splits (``train_images`` keeps each
    run's own count)."""
    dataset = cfg.score_datasets[0]
    curve, chosen = Runs(), chosen or {}
    seeds = cfg.curve_run_seeds
    n_train = {seed: len(seed_benchmark(cfg, benches, dataset, seed).images("train")) for seed in seeds}
    whole = round(sum(n_train.values()) / len(n_train))  # a seed that draws its own split has its own count
    for spec in curve_specs(cfg, min(n_train.values())):
        bench = seed_benchmark(cfg, benches, dataset, spec.seed)
        curve.add(train_and_score(cfg, bench, feats, spec, train=recipe_for(cfg, chosen, spec)),
                  curve_size=spec.train_images)
    for row in runs.where(study="main", dataset=dataset, kind=CURVE_KIND):
        if row["seed"] in seeds:  # the same seeds at every size
            curve.add(row, curve_size=whole)
    return curve

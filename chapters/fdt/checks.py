"""The FDT chapter's checks: the data-size curve, stuck runs, every head against chance, and the measured
diagnosis of each claim that was not reproduced.
See notebooks/fdt.py, section "Checks: every head trained and is above chance".
"""
from __future__ import annotations

import dataclasses

from chapters.fdt.config import Config
from chapters.fdt.experiments import ChapterFeatures, train_and_evaluate
from corpora.datasets import Benchmark
from lib.core import curves
from lib.core.results import Claim, Runs, stuck, versus

CURVE = ({"head": "FDT"}, {"head": "pooled"}, ("FDT", "pooled"))  # the curve's comparison: A, B and their names


def data_size_curve(cfg: Config, bench: Benchmark, feats: ChapterFeatures, runs: Runs,
                    chosen: dict | None = None) -> Runs:
    """FDT head vs pooled head at each of ``cfg.curve_fractions`` of the training pairs, on the curve's seeds
    (``cfg.curve_run_seeds``; :func:`train_and_evaluate`, each head with its recipe ``chosen``); runs already in
    ``runs`` at the whole set are reused, not retrained."""
    total, curve, chosen = len(bench.train), Runs(), chosen or {}
    for fraction in cfg.curve_fractions:
        size = max(2, round(fraction * total))
        for head, kind in (("FDT", "fdt"), ("pooled", "pooled")):
            for seed in cfg.curve_run_seeds:
                done = [r for r in runs.where(head=head, seed=seed) if r["train_pairs"] == size]
                curve.add(done[0] if done else train_and_evaluate(
                    cfg, bench, feats, kind, seed, subset=curves.nested_subset(total, size),
                    train=chosen.get(kind))[0])
    return curve


def curve_frame(curve: Runs, metric: str):
    """One row per training-set size: FDT and pooled mean ± sd and the rule's outcome
    (:func:`lib.core.curves.table`)."""
    return curves.table(curve, metric, *CURVE)


def curve_trend(curve: Runs, metric: str) -> str:
    """One sentence: FDT − pooled in points at each training-set size (:func:`lib.core.curves.trend`)."""
    return curves.trend(curve, metric, *CURVE)


def stuck_runs(*runs: Runs) -> list[dict]:
    """Runs whose best validation step is their first evaluation: a head that never improved on what it knew
    after ``eval_every`` steps has not trained, and its numbers must not be read as its method's. A run in
    several groups (the curve reuses the whole-set runs) counts once."""
    rows = {(r["head"], r["seed"], r["train_pairs"]): r for group in runs for r in group}
    return [r for r in rows.values() if stuck(r)]


def above_chance(runs: Runs, labelled, heads) -> dict:
    """Each head against chance on ``labelled`` (the validation concepts): the rule's outcome, ``"a"`` when
    the head is clearly above chance (:func:`lib.core.results.versus`)."""
    chance = 1 / len(labelled.classnames)
    return {head: versus(runs.values(f"{labelled.name}/acc1", head=head), chance) for head in heads}


def diagnose(claims: list[Claim], runs: Runs, curve: Runs | None, metric: str) -> list[Claim]:
    """The claims with a measured diagnosis for each one not reproduced: the data-size curve for FDT vs
    pooled; the best steps (did both heads train?) and the active codes per item for sparsemax vs softmax
    and for FDT against chance."""
    def codes(head: str) -> str:
        s = runs.summary("active_codes/image", head=head)
        t = runs.summary("active_codes/text", head=head)
        return f"{s.mean:.0f} (image) / {t.mean:.0f} (caption) active codes per item" if s.mean is not None else ""

    def steps(head: str) -> str:
        return ", ".join(str(v) for v in runs.values("best_step", head=head))

    out = []
    for claim in claims:
        note = claim.diagnosis
        if claim.verdict == "not reproduced":
            if claim.id.startswith("fdt_beats_pooled") and curve is not None:  # the curve runs on the drawings
                on_photos = claim.id == "fdt_beats_pooled" and "Caltech" in claim.statement
                note = ("on the unseen drawn concepts, " if on_photos else "") + curve_trend(curve, metric)
            elif claim.id.startswith("sparsemax_beats_softmax"):
                note = (f"best steps: sparsemax {steps('FDT')}, softmax {steps('softmax')} (first evaluation: "
                        f"{', '.join(f'{v:.0f}' for v in runs.values('first_eval', head='FDT')[:1])}); "
                        f"sparsemax keeps {codes('FDT')}, softmax every code")
            elif claim.id == "fdt_above_chance":
                note = f"best steps of the FDT head: {steps('FDT')}; it keeps {codes('FDT')}"
        out.append(dataclasses.replace(claim, diagnosis=note))
    return out

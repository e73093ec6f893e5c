"""The Three Towers chapter (Kossen et al., NeurIPS 2023).

An image tower and a text tower trained from scratch, a frozen pretrained third tower h = linear(p(I)), four
heads and three contrastive terms (:class:`lib.methods.three_towers.ThreeTowers`). A reader opens
:mod:`.experiments` first; :mod:`.config` is the YAML's schema, :mod:`.concept_groups` the covered / not-covered
analysis, :mod:`.verdicts` the verdicts, :mod:`.figures` the diagram. See notebooks/three_towers.py, sections
"The three towers" and "What the comparisons say".
"""
from __future__ import annotations

from chapters.three_towers.concept_groups import (
    group_accuracy,
    group_diagnosis,
)
from chapters.three_towers.config import (
    NAME,
    Config,
    load_config,
)
from chapters.three_towers.experiments import (
    CURVE_METRIC,
    HOLDOUT_SEED,
    RETRIEVAL_R1,
    Inputs,
    ablations,
    alpha_sweep,
    benchmark,
    build,
    choose_recipes,
    data_size_curve,
    diagnosis_protocols,
    early_stopping_diagnosis,
    early_stopping_settings,
    evaluate,
    feature_plan,
    fixed_budget,
    held_out_rows,
    inputs,
    is_ceiling,
    stuck_runs,
    test_sets,
    train_and_evaluate,
    training_pairs,
)
from chapters.three_towers.figures import (
    diagram,
)
from chapters.three_towers.verdicts import (
    TABLE2,
    TABLE3,
    chance,
    chance_checks,
    claims,
    findings,
    shown_metrics,
)

__all__ = [
    "NAME", "Config", "load_config", "group_accuracy", "group_diagnosis", "RETRIEVAL_R1", "benchmark",
    "training_pairs", "feature_plan", "Inputs", "HOLDOUT_SEED", "held_out_rows", "inputs", "build", "is_ceiling",
    "test_sets", "evaluate", "fixed_budget", "early_stopping_settings", "train_and_evaluate", "choose_recipes",
    "diagnosis_protocols", "early_stopping_diagnosis", "stuck_runs", "CURVE_METRIC", "data_size_curve",
    "ablations", "alpha_sweep", "shown_metrics", "chance", "chance_checks", "TABLE2", "TABLE3", "claims",
    "findings", "diagram",
]

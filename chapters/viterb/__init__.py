"""The ViTeRB chapter: which language model's features align best with a frozen vision model, on *unseen* classes.

The benchmark of Ruthardt et al. (§4-5): each dataset's classes are split into seen and unseen; a ShareLock head
is trained on the seen classes' (image, class-text) pairs and scored on images of the unseen ones. A reader opens
:mod:`.experiments` first; :mod:`.config` is the YAML's schema, :mod:`.data_size` the curve, :mod:`.verdicts` the
verdicts. See notebooks/viterb.py, sections "Seen and unseen classes, as data" and "What reproduced, what did not".
"""
from __future__ import annotations

from chapters.viterb.config import (
    NAME,
    Config,
    TextKind,
    load_config,
)
from chapters.viterb.data_size import (
    CURVE_KIND,
    curve_specs,
    data_size_curve,
)
from chapters.viterb.experiments import (
    ChapterFeatures,
    RunSpec,
    own_text_classes,
    with_article,
    caltech_benchmark,
    caltech_texts,
    benchmark,
    choose_recipes,
    family,
    feature_plan,
    label,
    recipe_for,
    recipe_key,
    run_specs,
    same_as_name,
    seed_benchmark,
    short,
    stuck_runs,
    synonym_groups,
    texts_of,
    train_and_score,
    unseen_score,
)
from chapters.viterb.model_capability import (
    capability,
)
from chapters.viterb.verdicts import (
    PAPER_COLUMNS,
    PAPER_TABLE_1,
    STAND_IN,
    claims,
    findings,
    outcome,
    own_text_metric,
    paper_columns,
    paper_kind,
    paper_table,
    score_table,
)

__all__ = [
    "capability",
    "NAME", "TextKind", "Config", "load_config", "short", "label", "family", "benchmark", "RunSpec", "run_specs",
    "texts_of", "feature_plan", "ChapterFeatures", "unseen_score", "train_and_score", "choose_recipes", "recipe_key",
    "recipe_for",
    "stuck_runs", "same_as_name", "own_text_classes", "with_article", "caltech_benchmark", "caltech_texts",
    "synonym_groups", "seed_benchmark",
    "CURVE_KIND", "curve_specs", "data_size_curve", "PAPER_COLUMNS", "PAPER_TABLE_1", "STAND_IN", "paper_kind",
    "paper_columns", "own_text_metric", "paper_table", "score_table",
    "outcome", "claims", "findings",
]

"""The FDT chapter (Chen et al., CVPR 2023): a shared codebook, sparse code weights, embeddings as weighted sums.

Patch and token features matched against the codebook (:class:`lib.methods.fdt.FDTHead`), compared with a pooled
CLIP-style head on the same frozen patch and token features; in the full config the encoders train through the head
as in the paper (:mod:`.towers`). A reader opens :mod:`.experiments` first;
:mod:`.config` is the YAML's schema, :mod:`.checks` the curve and the stuck/chance checks, :mod:`.verdicts` the
verdicts, :mod:`.figures` the diagram. See notebooks/fdt.py, sections "The FDT head" and "What reproduced, what did
not".
"""
from __future__ import annotations

from chapters.fdt.checks import (
    CURVE,
    above_chance,
    curve_frame,
    curve_trend,
    data_size_curve,
    diagnose,
    stuck_runs,
)
from chapters.fdt.config import (
    NAME,
    PAPER_NUMBERS,
    Config,
    FDTHeadConfig,
    PooledHeadConfig,
    Variant,
    load_config,
)
from chapters.fdt.experiments import (
    ChapterFeatures,
    active_codes_at_init,
    benchmark,
    build_fdt,
    build_pooled,
    chapter_features,
    choose_recipes,
    feature_plan,
    grounding_examples,
    retrieval,
    run_all,
    train_and_evaluate,
    usage_rows,
    zero_shot_metrics,
    zero_shot_sets,
)
from chapters.fdt.figures import (
    method_diagram,
)
from chapters.fdt.verdicts import (
    claims,
    findings,
)

__all__ = [
    "NAME", "PAPER_NUMBERS", "FDTHeadConfig", "PooledHeadConfig", "Variant", "Config", "load_config", "benchmark",
    "zero_shot_sets", "feature_plan", "ChapterFeatures", "chapter_features", "build_fdt", "build_pooled",
    "zero_shot_metrics",
    "retrieval", "train_and_evaluate", "run_all", "choose_recipes", "active_codes_at_init", "usage_rows",
    "grounding_examples",
    "CURVE", "data_size_curve", "curve_frame", "curve_trend", "stuck_runs", "above_chance", "diagnose", "claims",
    "findings", "method_diagram",
]

"""The FLAME chapter (Cao, Wei and Ma, CVPR 2025): a frozen LLM read through K facet prompts in one pass.

An image-side MLP trained into the LLM's space (:class:`lib.methods.flame.Flame`) with Eq. 1 or the official
multi-positive sigmoid loss, against a ShareLock head on plain features of the same captions and a text tower
trained from scratch. The medium config is a :class:`MediumConfig`; every function takes either config. A reader
opens :mod:`.experiments` first; :mod:`.config` is the YAML's schema, :mod:`.data` what is read, :mod:`.verdicts` the
verdicts, :mod:`.figures` the facet mask and tables. See notebooks/flame.py, sections "Facet-decoupled attention"
and "What reproduced, what did not".
"""
from __future__ import annotations

from chapters.flame.config import (
    NAME,
    SUBSET_SEED,
    Config,
    MediumConfig,
    load_config,
)
from chapters.flame.data import (
    benchmark,
    label_sets,
    short,
    sizes,
    subsets,
    text_sets,
    tux_multilingual,
)
from chapters.flame.data_size import (
    CURVE,
    curve_frame,
    curve_trend,
    data_size_curve,
    stuck_runs,
)
from chapters.flame.experiments import (
    ChapterFeatures,
    MediumFeatures,
    chapter_features,
    choose_recipes,
    facet_similarity,
    feature_plan,
    main_setting,
    run,
    run_key,
    train_and_evaluate,
)
from chapters.flame.figures import (
    equivalence_table,
    facet_mask_figure,
    language_bars,
    speed_table,
)
from chapters.flame.verdicts import (
    METRICS,
    TIES,
    caltech_word_cover,
    claims,
    coincidences,
    facet_similarity_by_source,
    findings,
    main_runs,
    medium_findings,
    translation_match,
    tux_multilingual_claim,
)

__all__ = [
    "NAME", "Config", "load_config", "SUBSET_SEED", "MediumConfig", "short", "benchmark", "sizes", "label_sets",
    "text_sets", "subsets", "tux_multilingual", "feature_plan", "ChapterFeatures", "run_key", "train_and_evaluate",
    "chapter_features", "choose_recipes", "run", "main_setting", "facet_similarity", "MediumFeatures", "stuck_runs",
    "data_size_curve", "CURVE", "curve_frame", "curve_trend", "claims", "main_runs", "coincidences", "TIES",
    "METRICS", "findings", "facet_similarity_by_source", "translation_match", "tux_multilingual_claim",
    "medium_findings", "caltech_word_cover", "equivalence_table", "facet_mask_figure", "speed_table", "language_bars",
]

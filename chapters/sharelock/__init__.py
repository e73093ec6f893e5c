"""The ShareLock chapter (Ruthardt et al., *Do better language models have crisper vision?*).

Frozen DINOv2 image features, frozen decoder-LLM last-token text features, a 4-layer MLP on the text side
(:class:`lib.methods.sharelock.ShareLock`) trained with the CLIP loss at a fixed temperature, against LiT (a
pretrained text encoder tuned on the same locked image features). A reader opens :mod:`.experiments` first;
:mod:`.config` is the YAML's schema, :mod:`.verdicts` the verdicts, :mod:`.figures` the method diagram.
See notebooks/sharelock.py, sections "The data", "The projection head", "Training the head" and
"What reproduced, what did not".
"""
from __future__ import annotations

from chapters.sharelock.config import (
    NAME,
    Config,
    LiTConfig,
    load_config,
)
from chapters.sharelock.experiments import (
    HEAD_LABELS,
    HEADS,
    ChapterFeatures,
    benchmark,
    build,
    curve_frame,
    curve_texts,
    choose_recipes,
    data_size_curve,
    feature_plan,
    grid,
    held_out_groups,
    matched_rows,
    metric_labels,
    prompt_sets,
    recipe_key,
    seed_benchmark,
    setting_label,
    share_words,
    short,
    stuck_runs,
    style_diagnostics,
    train_and_evaluate,
    train_lit,
)
from chapters.sharelock.figures import (
    method_diagram,
)
from chapters.sharelock.verdicts import (
    claims,
    findings,
    head_comparison,
)

__all__ = [
    "NAME", "LiTConfig", "Config", "load_config", "benchmark", "seed_benchmark", "short", "metric_labels",
    "HEAD_LABELS", "setting_label", "prompt_sets", "feature_plan", "ChapterFeatures", "grid", "build",
    "train_and_evaluate", "choose_recipes", "recipe_key", "train_lit", "held_out_groups", "stuck_runs",
    "data_size_curve", "HEADS", "curve_frame", "style_diagnostics", "matched_rows", "share_words", "curve_texts",
    "claims", "findings", "head_comparison", "method_diagram",
]

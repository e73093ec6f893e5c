"""Accuracy on the concept groups ImageNet-1k names and on the others, and the diagnosis of a group claim.

Why: the paper credits the third tower with what its pretraining covered; the medium corpus's concepts split into
groups it covers and groups it does not. See notebooks/three_towers.py, section "What the comparisons say".
"""
from __future__ import annotations

import torch

from corpora.concept_groups import COVERED, NOT_COVERED, concept_groups
from lib.core import curves
from lib.core.results import Runs
from lib.methods import three_towers as tt
from lib.methods.three_towers import ThreeTowers


def group_accuracy(cfg, data, method: ThreeTowers, labelled) -> dict[str, float]:
    """Top-1 (over all classes of the set) of the images whose concept ImageNet-1k covers, and of those it does not
    (:data:`COVERED`, :data:`NOT_COVERED`); empty for a set without concept groups. ``cfg`` and ``data``: the
    chapter's ``Config`` and ``Inputs``."""
    groups = concept_groups(labelled)
    if groups is None:
        return {}
    from lib.core.evaluate import zero_shot_classifier

    method.eval()

    def encode_text(texts):
        tokens = tt.tokenize(data.tokenizer, texts, cfg.text_tower.context)
        return tt.embed_in_batches(method.embed_text, tokens["input_ids"], tokens["attention_mask"])

    images = data.test[labelled.name]
    classifier = zero_shot_classifier(encode_text, labelled.classnames, labelled.templates)
    image = tt.embed_in_batches(method.embed_image, images.get("pixels"), images.get("third"))
    hit = ((image @ classifier.T).argmax(1) == torch.as_tensor(labelled.labels)).float()
    out = {}
    for name, kept in (("covered", COVERED), ("not_covered", NOT_COVERED)):
        rows = torch.tensor([g in kept for g in groups])
        out[f"{labelled.name}/acc1_{name}"] = float(hit[rows].mean())
    return out


def group_diagnosis(runs: Runs, curve: Runs | None, headline: str) -> str | None:
    """Why a claim about the concept groups was not reproduced, measured: LiT − 3T where ImageNet-1k names the
    group and where it does not (the paper's mechanism predicts LiT's lead only in the first), and how the gap on
    the groups it does not name moves along the data-size curve."""
    gap = {name: runs.compare(f"{headline}/acc1_{name}", {"method": "lit"}, {"method": "3t"}).difference
           for name in ("covered", "not_covered")}
    parts = []
    if None not in gap.values():
        covered, not_covered = (round(100 * gap[k], 1) + 0.0 for k in ("covered", "not_covered"))  # no "-0.0"
        if not_covered > 0 and not_covered >= covered:
            reading = ("LiT leads where its labels do not cover the group, and by at least as much as where they do: "
                       "not the paper's mechanism (a locked tower limited by its labels)")
        elif not_covered > 0:
            reading = "LiT leads on both, by less where its labels do not cover the group"
        else:
            reading = "LiT does not lead where its labels do not cover the group"
        parts.append(f"LiT − 3T in points: {covered:+.1f} on the groups ImageNet-1k names, {not_covered:+.1f} on "
                     f"those it does not; {reading}")
    metric = f"{headline}/acc1_not_covered"
    if curve is not None and len(curve) and metric in curve.rows[0]:
        parts.append(curves.trend(curve, metric, {"method": "3t"}, {"method": "lit"}, ("3T", "LiT"),
                                  context="on the groups ImageNet-1k does not name"))
    return "; ".join(p for p in parts if p) or None

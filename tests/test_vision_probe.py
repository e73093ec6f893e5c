"""tools.vision_probe: the frozen-feature probe that checks the offline backbones on Caltech-101's photos."""
from __future__ import annotations

import torch

from tools import vision_probe


def test_the_probe_separates_separable_classes_and_not_shuffled_ones():
    generator = torch.Generator().manual_seed(0)
    centres = torch.randn(5, 16, generator=generator) * 3
    labels = torch.arange(5).repeat_interleave(20)
    features = centres[labels] + 0.3 * torch.randn(100, 16, generator=generator)
    fitting = torch.arange(100) % 20 < 10
    found = vision_probe.probe(features, labels, fitting, 5)
    assert found["linear_probe"] == 1.0 and found["nearest_class_mean"] == 1.0
    assert (found["fit_photos"], found["test_photos"]) == (50, 50) and found["l2"] in vision_probe.L2
    noise = torch.randn(100, 16, generator=generator)  # features that carry no class: near chance (20 %)
    assert vision_probe.probe(noise, labels, fitting, 5)["linear_probe"] < 0.5


def test_each_category_is_split_in_half_with_a_seed():
    keys, labels, fitting = vision_probe.split(6)
    assert len(keys) == 101 * 6 and sum(fitting) == 101 * 3
    assert vision_probe.split(6) == (keys, labels, fitting)
    per_class = {}
    for label, fit in zip(labels, fitting):
        per_class.setdefault(label, []).append(fit)
    assert all(sum(v) == 3 for v in per_class.values())

"""Training a contrastive method on classes that have several texts each (ViTeRB: "every text is a target").
See notebooks/viterb.py, section "Train on seen classes, score on unseen ones".
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["ClassTextPairs"]


class ClassTextPairs(nn.Module):
    """A method trained on classes that have several texts each: the paper's "every text is a target".

    At every step each image is paired with **one text of its class drawn at random** (seeded): every text becomes
    a target over training, while a class with many texts weighs no more than one with a single text. Training
    batches carry ``image`` and ``label``; a batch that carries ``text`` (validation) is used as is.
    """

    def __init__(self, method: nn.Module, text_features: torch.Tensor, owner: Sequence[int], n_classes: int,
                 seed: int) -> None:
        super().__init__()
        self.method = method
        owner = torch.as_tensor(owner)
        order = torch.argsort(owner, stable=True)
        counts = torch.bincount(owner, minlength=n_classes)
        self.register_buffer("table", text_features[order].float(), persistent=False)
        self.register_buffer("counts", counts, persistent=False)
        self.register_buffer("offsets", torch.cumsum(counts, 0) - counts, persistent=False)
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, labels: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One text feature per label, uniformly among that class's texts."""
        if bool((self.counts[labels] == 0).any()):
            raise ValueError("a class without texts cannot be a training target")
        u = torch.rand(len(labels), generator=generator or self.generator).to(labels.device)
        counts = self.counts[labels]
        pick = self.offsets[labels] + torch.minimum((u * counts).long(), counts - 1)
        return self.table[pick]

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        text = batch["text"] if "text" in batch else self.draw(batch["label"])
        return self.method.loss({"image": batch["image"], "text": text})

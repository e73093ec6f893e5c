"""Any frozen-feature method with an image tower trained from scratch in front of it.

Why: FLAME's paper trains a ViT-B/16 from scratch against its frozen LLM (Table 3, CC3M), and its CLIP baseline
trains one too; the book's small and medium analogues read frozen image features instead. Wrapping keeps one
implementation of each method's loss for both: the tower turns uint8 pixels into the "image features" the method
already reads, and the method's own image head (FLAME's projector) follows it. See notebooks/flame.py, section
"Paper, official code, this book".
"""
from __future__ import annotations

import torch
from torch import nn

from lib.nn.towers import ImageTowerConfig, build_image_tower, tower_input

__all__ = ["WithImageTower"]


class WithImageTower(nn.Module):
    """``method`` (``loss``, ``embed_image``, ``embed_text`` on features) read through an image tower built from
    ``tower`` with ``dim`` outputs: ``batch["image"]`` holds uint8 pixels ``(B, 3, H, W)``, mapped to [-1, 1] and,
    while training, augmented as Three Towers' towers are (``lib.nn.towers.augment``). ``chunk``: images per forward
    pass at test time (a whole test set at 224 px does not fit one pass)."""

    def __init__(self, method: nn.Module, tower: ImageTowerConfig, dim: int, *, augment: bool = True,
                 chunk: int = 256) -> None:
        super().__init__()
        self.method, self.tower = method, build_image_tower(tower, dim)
        self.augment, self.chunk = augment, chunk

    def features(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        return self.tower(tower_input(pixels_u8, self.tower, augmented=self.training and self.augment))

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.method.loss({**batch, "image": self.features(batch["image"])})

    @torch.no_grad()
    def embed_image(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.method.embed_image(self.features(pixels_u8[i:i + self.chunk]))
                          for i in range(0, len(pixels_u8), self.chunk)])

    def embed_text(self, text_features: torch.Tensor) -> torch.Tensor:
        return self.method.embed_text(text_features)

"""ShareLock as a trainable method: frozen image features, a head on frozen text features, CLIP loss.

Why this shape: ShareLock trains *only* a text-side MLP; the DINOv2 image feature is used as is (L2
normalised), so the head maps LLM states into the vision space; the LiT-style baseline swaps the MLP for one
linear map. See
``notebooks/sharelock.py``, sections "The projection head" and "Training the head".
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.config import HeadConfig, LossConfig
from lib.nn.heads import LinearHead, ShareLockHead
from lib.nn.losses import ClipLoss


class ShareLock(nn.Module):
    """Text head (``mlp`` = ShareLock, ``linear`` = LiT-style baseline) + identity image side."""

    def __init__(self, text_dim: int, image_dim: int, head: HeadConfig, loss: LossConfig, kind: str = "mlp"):
        super().__init__()
        if kind == "mlp":
            self.text_head = ShareLockHead(text_dim, image_dim, head.hidden_dim, head.num_layers, head.dropout)
        elif kind == "linear":
            self.text_head = LinearHead(text_dim, image_dim)
        else:
            raise ValueError(f"head kind {kind!r} is not one of ('mlp', 'linear')")
        self.kind = kind
        self.image_dim = image_dim
        self.criterion = ClipLoss(temperature=loss.temperature, learnable=loss.learnable)

    def embed_text(self, text_features: torch.Tensor) -> torch.Tensor:
        """The head's embedding of cached text features, which may sit on another device than the trained head
        (features stay on the host; ``fit`` moves the head to the GPU): they follow the head."""
        weight = next(self.text_head.parameters(), None)
        if weight is None:
            return self.text_head(text_features.to(torch.float32))
        return self.text_head(text_features.to(device=weight.device, dtype=weight.dtype))

    def embed_image(self, image_features: torch.Tensor) -> torch.Tensor:
        if image_features.shape[-1] != self.image_dim:
            raise ValueError(
                f"ShareLock was built for image features of width {self.image_dim}, got {image_features.shape[-1]}: "
                "the head belongs to another vision model"
            )
        return F.normalize(image_features.to(torch.float32), dim=-1)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.criterion(self.embed_image(batch["image"]), self.embed_text(batch["text"]))

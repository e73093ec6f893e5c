"""Image and text towers trained from scratch: the ``f`` and ``g`` of a CLIP-style model.

Why a building block: CLIP, LiT's text side and Three Towers all train an image tower on pixels and a
text tower on word pieces, from random weights. The towers here are deliberately small so the small config
trains on a CPU; the full config swaps in a ``timm`` architecture built with ``pretrained=False`` and a deeper
transformer. Every tower returns *raw* embeddings; the method that uses them decides where to L2-normalise. See
notebooks/three_towers.py, section "The three towers".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import nn

from lib.core.encoders import pool

__all__ = ["ImageTowerConfig", "TextTowerConfig", "ConvTower", "TimmTower", "TextTower", "BagTower",
           "build_image_tower", "build_text_tower"]


@dataclass(frozen=True)
class ImageTowerConfig:
    """The image tower: ``convnet`` (channels of its stride-2 stages) or a ``timm`` architecture by name,
    fed ``image_size`` pixels."""

    kind: Literal["convnet", "timm"] = "convnet"
    widths: tuple[int, ...] = (32, 64, 128, 256)
    timm_name: str | None = None  # timm: an architecture name, always built with pretrained=False
    image_size: int = 32

    def __post_init__(self) -> None:  # ValueErrors become one-line ConfigErrors in lib.core.config.build
        if self.kind == "timm" and not self.timm_name:
            raise ValueError("image_tower.kind 'timm' needs image_tower.timm_name (e.g. vit_base_patch16_224)")
        if self.image_size < 8 or not self.widths or any(w < 1 for w in self.widths):
            raise ValueError(f"image_tower: image_size >= 8 and positive widths needed, got {self.image_size}, "
                             f"{list(self.widths)}")


@dataclass(frozen=True)
class TextTowerConfig:
    """The text tower: a ``transformer`` or a ``bag`` of word pieces over a Hugging Face tokenizer's
    vocabulary (only the vocabulary is used, never the tokenizer model's weights)."""

    tokenizer: str  # a hub id or an offline/... name
    kind: Literal["transformer", "bag"] = "transformer"
    width: int = 128
    depth: int = 2
    heads: int = 4
    context: int = 32

    def __post_init__(self) -> None:
        if self.kind == "transformer" and self.width % self.heads:
            raise ValueError(f"text_tower.width ({self.width}) must be divisible by text_tower.heads ({self.heads})")


class ConvTower(nn.Module):
    """Stride-2 conv stages (conv 3x3, BatchNorm, ReLU), global average pool, linear to the embedding."""

    def __init__(self, widths: Sequence[int], embed_dim: int):
        super().__init__()
        layers, channels = [], 3
        for width in widths:
            layers += [nn.Conv2d(channels, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width),
                       nn.ReLU(inplace=True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.proj = nn.Linear(channels, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.features(images).mean(dim=(2, 3)))


class TimmTower(nn.Module):
    """Any timm architecture, randomly initialised (``pretrained=False``), with a linear map to the embedding."""

    def __init__(self, name: str, embed_dim: int, image_size: int):
        super().__init__()
        import timm

        kwargs = {"img_size": image_size} if "vit" in name else {}
        self.body = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
        self.proj = nn.Linear(self.body.num_features, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.body(images))


class TextTower(nn.Module):
    """Token + position embeddings, a pre-norm transformer encoder, mean over real tokens, linear."""

    def __init__(self, vocab_size: int, cfg: TextTowerConfig, embed_dim: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.width)
        self.positions = nn.Parameter(torch.randn(cfg.context, cfg.width) * 0.01)
        layer = nn.TransformerEncoderLayer(cfg.width, cfg.heads, 4 * cfg.width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.width)
        self.proj = nn.Linear(cfg.width, embed_dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] > self.positions.shape[0]:
            raise ValueError(
                f"text tower: {input_ids.shape[1]} tokens exceed its context of {self.positions.shape[0]}; "
                "tokenize with the same context (lib.methods.three_towers.tokenize)"
            )
        x = self.tokens(input_ids) + self.positions[: input_ids.shape[1]]
        x = self.norm(self.encoder(x, src_key_padding_mask=attention_mask == 0))
        return self.proj(pool(x, attention_mask, "mean"))


class BagTower(nn.Module):
    """The mean of the caption's token embeddings, LayerNorm, an MLP to the embedding.

    Why offer it: on short captions a transformer has little to gain over a bag of word pieces and costs far more;
    a chapter says which one ran.
    """

    def __init__(self, vocab_size: int, cfg: TextTowerConfig, embed_dim: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.width)
        self.norm = nn.LayerNorm(cfg.width)
        self.proj = nn.Sequential(nn.Linear(cfg.width, 2 * cfg.width), nn.GELU(), nn.Linear(2 * cfg.width, embed_dim))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(pool(self.tokens(input_ids), attention_mask, "mean")))


def build_text_tower(cfg: TextTowerConfig, vocab_size: int, embed_dim: int) -> nn.Module:
    return (TextTower if cfg.kind == "transformer" else BagTower)(vocab_size, cfg, embed_dim)


def build_image_tower(cfg: ImageTowerConfig, embed_dim: int) -> nn.Module:
    if cfg.kind == "convnet":
        return ConvTower(cfg.widths, embed_dim)
    return TimmTower(cfg.timm_name, embed_dim, cfg.image_size)

"""Image and text towers trained from scratch: the ``f`` and ``g`` of a CLIP-style model.

Why a building block: CLIP, LiT's text side and Three Towers all train an image tower on pixels and a
text tower on word pieces, from random weights. The towers here are deliberately small so the small config
trains on a CPU; the full configs build the papers' towers from ``open_clip``'s model configs (``ViT-B-16``'s
vision transformer, CLIP's causal text transformer), randomly initialised, with gradient checkpointing when the
pre-flight's memory estimate needs it. Every tower returns *raw* embeddings; the method that uses them decides
where to L2-normalise. See notebooks/three_towers.py, section "The three towers".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.encoders import pool

__all__ = ["ImageTowerConfig", "TextTowerConfig", "ConvTower", "TimmTower", "OpenClipImageTower", "TextTower",
           "BagTower", "OpenClipTextTower", "build_image_tower", "build_text_tower", "normalise_pixels", "augment",
           "tower_input"]

PIXEL_MEAN, PIXEL_STD = 0.5, 0.5  # towers trained from scratch: pixels mapped to [-1, 1]


def normalise_pixels(batch: torch.Tensor) -> torch.Tensor:
    return (batch.float() / 255.0 - PIXEL_MEAN) / PIXEL_STD


def augment(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random scale (0.8-1.0), shift (up to 10 %) and horizontal flip, per image.

    Why: a tower trained from scratch on a few thousand drawings memorises them quickly; from-scratch CLIP training
    augments too. Border padding repeats the edge (the white page for emoji).
    """
    n = images.shape[0]
    scale = torch.empty(n).uniform_(0.8, 1.0, generator=generator)
    shift = torch.empty(n, 2).uniform_(-0.1, 0.1, generator=generator)
    flip = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = scale * flip
    theta[:, 1, 1] = scale
    theta[:, :, 2] = shift
    grid = F.affine_grid(theta.to(images), list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, padding_mode="border", align_corners=False)


def tower_input(pixels_u8: torch.Tensor, tower: nn.Module, *, augmented: bool = False) -> torch.Tensor:
    """What every tower trained from scratch reads: uint8 pixels ``(N, 3, H, W)`` moved to the tower's device
    (training batches may be streamed on the host), mapped to [-1, 1] and, while training, augmented.

    One place for the four towers that read pixels (FLAME's and FDT's image towers, Three Towers' f and its
    two-tower export), so that they cannot drift apart in scaling or augmentation."""
    if pixels_u8.dtype != torch.uint8 or pixels_u8.ndim != 4:
        raise ValueError(f"an image tower reads uint8 pixels (N, 3, H, W), got a {tuple(pixels_u8.shape)} "
                         f"{pixels_u8.dtype} tensor: pass decoded images (lib.data.images), not cached image features")
    images = normalise_pixels(pixels_u8.to(next(tower.parameters()).device))
    return augment(images) if augmented else images


@dataclass(frozen=True)
class ImageTowerConfig:
    """The image tower: ``convnet`` (channels of its stride-2 stages), a ``timm`` architecture by name, or an
    ``open_clip`` model config's vision tower (``open_clip_model``; ``vit_width``/``vit_layers`` shrink it for a
    rehearsal), fed ``image_size`` pixels."""

    kind: Literal["convnet", "timm", "open_clip"] = "convnet"
    widths: tuple[int, ...] = (32, 64, 128, 256)
    timm_name: str | None = None  # timm: an architecture name, always built with pretrained=False
    image_size: int = 32
    open_clip_model: str | None = None  # open_clip: a model config name (open_clip.list_models()), e.g. ViT-B-16
    vit_width: int | None = None  # open_clip: override the config's width / layers (None: the config's)
    vit_layers: int | None = None
    grad_checkpointing: bool = False  # recompute activations in the backward pass (timm and open_clip towers)

    def __post_init__(self) -> None:  # ValueErrors become one-line ConfigErrors in lib.core.config.build
        if self.kind == "timm" and not self.timm_name:
            raise ValueError("image_tower.kind 'timm' needs image_tower.timm_name (e.g. vit_base_patch16_224)")
        if self.kind == "open_clip" and not self.open_clip_model:
            raise ValueError("image_tower.kind 'open_clip' needs image_tower.open_clip_model (e.g. ViT-B-16)")
        if self.image_size < 8 or not self.widths or any(w < 1 for w in self.widths):
            raise ValueError(f"image_tower: image_size >= 8 and positive widths needed, got {self.image_size}, "
                             f"{list(self.widths)}")


@dataclass(frozen=True)
class TextTowerConfig:
    """The text tower over a Hugging Face tokenizer's vocabulary (only the vocabulary is used, never the tokenizer
    model's weights): a ``transformer`` (bidirectional, mean-pooled), a ``bag`` of word pieces, or ``open_clip``'s
    text transformer (CLIP's: causal, read at the end-of-text token)."""

    tokenizer: str  # a hub id or an offline/... name
    kind: Literal["transformer", "bag", "open_clip"] = "transformer"
    width: int = 128
    depth: int = 2
    heads: int = 4
    context: int = 32
    grad_checkpointing: bool = False  # open_clip: recompute activations in the backward pass

    def __post_init__(self) -> None:
        if self.kind in ("transformer", "open_clip") and self.width % self.heads:
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

    def __init__(self, name: str, embed_dim: int, image_size: int, grad_checkpointing: bool = False):
        super().__init__()
        import timm

        kwargs = {"img_size": image_size} if "vit" in name else {}
        self.body = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
        self.body.set_grad_checkpointing(grad_checkpointing)
        self.proj = nn.Linear(self.body.num_features, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.body(images))


class OpenClipImageTower(nn.Module):
    """open_clip's vision tower of one of its model configs (``ViT-B-16``, ``ViT-B-32``, ...) at ``image_size``,
    randomly initialised, with its own projection to ``embed_dim``: the image encoder the papers train from scratch,
    named as a researcher would name it to open_clip."""

    def __init__(self, model: str, embed_dim: int, image_size: int, width: int | None = None,
                 layers: int | None = None, grad_checkpointing: bool = False):
        super().__init__()
        import open_clip
        from open_clip.model import CLIPVisionCfg, _build_vision_tower

        config = open_clip.get_model_config(model)
        if config is None:
            raise ValueError(f"open_clip has no model config {model!r}; open_clip.list_models() names them")
        vision = {**config["vision_cfg"], "image_size": image_size}
        vision.update({k: v for k, v in (("width", width), ("layers", layers)) if v is not None})
        self.body = _build_vision_tower(embed_dim, CLIPVisionCfg(**vision))
        self.body.set_grad_checkpointing(grad_checkpointing)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images)


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


class OpenClipTextTower(nn.Module):
    """open_clip's text transformer (CLIP's: token and position embeddings, causal attention, a final LayerNorm)
    at the config's width, depth, heads and context over the tokenizer's vocabulary, read at the end-of-text token
    ``eos_id`` as CLIP reads its EOT token; the causal mask makes the padding after it irrelevant."""

    def __init__(self, vocab_size: int, cfg: TextTowerConfig, embed_dim: int, eos_id: int | None):
        super().__init__()
        from open_clip.model import CLIPTextCfg, _build_text_tower

        if eos_id is None:
            raise ValueError("text_tower.kind 'open_clip' reads the end-of-text token, and this tokenizer has none "
                             "(no sep or eos token): use kind 'transformer', or a tokenizer that ends every text")
        self.eos_id = int(eos_id)
        self.body = _build_text_tower(embed_dim, CLIPTextCfg(
            context_length=cfg.context, vocab_size=vocab_size, width=cfg.width, heads=cfg.heads, layers=cfg.depth,
            pool_type="eos", eos_id=self.eos_id))
        self.body.set_grad_checkpointing(cfg.grad_checkpointing)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if not bool((input_ids == self.eos_id).any(dim=1).all()):
            raise ValueError(f"a text has no end-of-text token (id {self.eos_id}): tokenize with the tower's "
                             "tokenizer, which appends it (lib.methods.three_towers.tokenize)")
        return self.body(input_ids)


def build_text_tower(cfg: TextTowerConfig, vocab_size: int, embed_dim: int, eos_id: int | None = None) -> nn.Module:
    """The tower of ``cfg.kind``; ``eos_id`` (the tokenizer's end-of-text id) is read by the ``open_clip`` kind."""
    if cfg.kind == "open_clip":
        return OpenClipTextTower(vocab_size, cfg, embed_dim, eos_id)
    return (TextTower if cfg.kind == "transformer" else BagTower)(vocab_size, cfg, embed_dim)


def build_image_tower(cfg: ImageTowerConfig, embed_dim: int) -> nn.Module:
    if cfg.kind == "convnet":
        return ConvTower(cfg.widths, embed_dim)
    if cfg.kind == "open_clip":
        return OpenClipImageTower(cfg.open_clip_model, embed_dim, cfg.image_size, cfg.vit_width, cfg.vit_layers,
                                  cfg.grad_checkpointing)
    return TimmTower(cfg.timm_name, embed_dim, cfg.image_size, cfg.grad_checkpointing)

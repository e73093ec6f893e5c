"""Three Towers (Kossen et al. 2023): contrastive training of two towers with a frozen third tower.

Why this module exists: the paper has no official code, so this file is the reference
implementation; every equation of the paper is quoted beside the line that implements it, and the
chapter (``notebooks/three_towers.py``) walks through it section by section.

The pieces:

* ``f``: the image tower, trained from scratch on pixels (:class:`ConvTower`, or any ``timm``
  architecture built with ``pretrained=False`` in the full config);
* ``g``: the text tower, trained from scratch on tokens (:class:`TextTower`, a pre-norm transformer);
* ``h = linear(p(I))``: the third tower, where ``p`` is a frozen pretrained image model whose
  features come from the store (``lib.core.features.image_features``) and only the linear map trains;
* four heads ``f_h, g_h, h_f, h_g``, each ``normalize(linear(x))`` (:class:`Head`), which let the
  main towers align with ``h`` without being forced into ``h``'s space;
* the loss ``(L_f<->g + L_fh<->hf + L_gh<->hg) / 3``, each a symmetric InfoNCE with one shared
  learned temperature (:class:`ThreeTowers`).

At test time the heads and ``h`` are dropped: :meth:`ThreeTowers.export` returns the two towers
alone (:class:`TwoTowerModel`). The baselines of the paper are variants of the same class:
``scratch`` (f and g, no third tower) and ``lit`` (the image side is the locked pretrained model,
here its cached features + one trainable linear map; g trains).

See notebooks/three_towers.py, sections "The three towers" and "The loss, equation by equation".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lib.core.config import DataConfig, LossConfig, StoreConfig, TrainSettings, VisionModelConfig
from lib.core.encoders import pool
from lib.nn.losses import ClipLoss

VARIANTS = ("scratch", "lit", "3t")
TERMS = ("fg", "fh", "gh")
PIXEL_MEAN, PIXEL_STD = 0.5, 0.5  # towers trained from scratch: pixels mapped to [-1, 1]


# --------------------------------------------------------------------------------------------
# Configuration (validated by lib.core.config; see notebooks/configs/three_towers.yaml)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageTowerConfig:
    kind: Literal["convnet", "timm"] = "convnet"
    widths: tuple[int, ...] = (32, 64, 128, 256)  # convnet: channels of its stride-2 stages
    timm_name: str | None = None  # timm: an architecture name, always built with pretrained=False
    image_size: int = 32


@dataclass(frozen=True)
class TextTowerConfig:
    tokenizer: str  # a Hugging Face tokenizer (hub id or offline/...): only its vocabulary is used
    kind: Literal["transformer", "bag"] = "transformer"
    width: int = 128
    depth: int = 2
    heads: int = 4
    context: int = 32


@dataclass(frozen=True)
class ThreeTowersConfig:
    data: DataConfig
    third: VisionModelConfig  # p: the frozen pretrained image model behind the third tower
    image_tower: ImageTowerConfig
    text_tower: TextTowerConfig
    embed_dim: int = 128
    train_styles: tuple[Literal["google", "twitter"], ...] = ("google",)
    loss: LossConfig = field(default_factory=lambda: LossConfig(temperature=0.07, learnable=True))
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    weights: tuple[float, ...] = (0.5, 2.0)  # the loss-weight ablation (w = 1 is the main run)
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)  # headless 3T: alpha * h + (1 - alpha) * f
    augment: bool = True
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if self.embed_dim <= 0:
            raise ValueError(f"embed_dim must be a positive integer, got {self.embed_dim}")
        if any(not 0.0 <= a <= 1.0 for a in self.alphas):
            raise ValueError(f"alphas must lie in [0, 1] (a convex combination), got {list(self.alphas)}")
        if any(w < 0 for w in self.weights):
            raise ValueError(f"weights must be >= 0, got {list(self.weights)}")
        if not self.train_styles:
            raise ValueError("train_styles must name at least one drawing style")
        if self.image_tower.kind == "timm" and not self.image_tower.timm_name:
            raise ValueError("image_tower.kind 'timm' needs image_tower.timm_name (e.g. vit_base_patch16_224)")
        if self.text_tower.kind == "transformer" and self.text_tower.width % self.text_tower.heads:
            raise ValueError(
                f"text_tower.width ({self.text_tower.width}) must be divisible by text_tower.heads "
                f"({self.text_tower.heads})"
            )


def load_config(name: str, overrides: dict | None = None) -> ThreeTowersConfig:
    from lib.core import config

    return config.load("three_towers", name, ThreeTowersConfig, overrides)


# --------------------------------------------------------------------------------------------
# Inputs: pixels and tokens as resident tensors (the towers train on them, not on features)
# --------------------------------------------------------------------------------------------
def pixels(load_image, count: int, size: int) -> torch.Tensor:
    """``(N, 3, size, size)`` uint8 pixels of ``load_image(0..count-1)``, transparency on white.

    uint8 keeps 2,670 emoji at 32 px in 8 MB; :func:`normalise_pixels` maps them to floats per batch.
    """
    from PIL import Image

    from lib.core.encoders import to_rgb

    out = np.empty((count, size, size, 3), dtype=np.uint8)
    for i in range(count):
        image = to_rgb(load_image(i))
        out[i] = np.asarray(image.resize((size, size), Image.BICUBIC), dtype=np.uint8)
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def normalise_pixels(batch: torch.Tensor) -> torch.Tensor:
    return (batch.float() / 255.0 - PIXEL_MEAN) / PIXEL_STD


def load_tokenizer(name: str):
    """A Hugging Face tokenizer; ``offline/...`` names resolve to the converted local folders."""
    from transformers import AutoTokenizer

    from lib.core.models import resolve

    return AutoTokenizer.from_pretrained(resolve(name, "transformers").load_path)


def tokenize(tokenizer, texts: Sequence[str], context: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` padded to ``context`` (texts longer than that are cut)."""
    encoded = tokenizer(list(texts), padding="max_length", truncation=True, max_length=context, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def augment(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random scale (0.8-1.0), shift (up to 10 %) and horizontal flip, per image.

    Why: a tower trained from scratch on ~1,300 drawings memorises them within a few hundred steps;
    cheap geometric augmentation is what from-scratch CLIP-style training does too (a random resized
    crop). Border padding repeats the edge, which is the white page for emoji.
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


# --------------------------------------------------------------------------------------------
# The towers
# --------------------------------------------------------------------------------------------
class ConvTower(nn.Module):
    """f: stride-2 conv stages (conv 3x3, BatchNorm, ReLU), global average pool, linear to the embedding.

    Small on purpose: on 2 CPU cores a training step must take tens of milliseconds (the chapter
    trains 15 models); the full config swaps in a timm architecture (:class:`TimmTower`).
    """

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
    """f in the full config: any timm architecture, randomly initialised (3T trains f from scratch)."""

    def __init__(self, name: str, embed_dim: int, image_size: int):
        super().__init__()
        import timm

        kwargs = {"img_size": image_size} if "vit" in name else {}
        self.body = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
        self.proj = nn.Linear(self.body.num_features, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.body(images))


class TextTower(nn.Module):
    """g: token + position embeddings, a pre-norm transformer encoder, mean over real tokens, linear."""

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
    """g, cheapest form: the mean of the caption's token embeddings, LayerNorm, an MLP to the embedding.

    Why offer it: on ~1,300 captions of 3-12 tokens a transformer has little to gain over a bag of
    word pieces and costs most of the training step on 2 CPU cores; the chapter says which one ran.
    """

    def __init__(self, vocab_size: int, cfg: TextTowerConfig, embed_dim: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.width)
        self.norm = nn.LayerNorm(cfg.width)
        self.proj = nn.Sequential(nn.Linear(cfg.width, 2 * cfg.width), nn.GELU(), nn.Linear(2 * cfg.width, embed_dim))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(pool(self.tokens(input_ids), attention_mask, "mean")))


class Head(nn.Module):
    """One of f_h, g_h, h_f, h_g: ``normalize(linear(x))`` (paper §3)."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(x), dim=-1)


def build_text_tower(cfg: TextTowerConfig, vocab_size: int, embed_dim: int) -> nn.Module:
    return (TextTower if cfg.kind == "transformer" else BagTower)(vocab_size, cfg, embed_dim)


def build_image_tower(cfg: ImageTowerConfig, embed_dim: int) -> nn.Module:
    if cfg.kind == "convnet":
        return ConvTower(cfg.widths, embed_dim)
    return TimmTower(cfg.timm_name, embed_dim, cfg.image_size)


# --------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------
class ThreeTowers(nn.Module):
    """Scratch, LiT or 3T (with heads, or headless) as one trainable method for ``lib.core.train.fit``.

    A batch holds ``pixels`` (uint8), ``input_ids``, ``attention_mask`` and ``third`` (the frozen
    features p(I) from the store). ``weight`` is the paper's loss weight w on the two third-tower
    terms; ``terms`` keeps a subset of ``("fg", "fh", "gh")`` (the leave-one-out ablation);
    ``headless`` drops the four heads and aligns f, g and h directly, so that at test time the image
    embedding can be ``alpha * h + (1 - alpha) * f`` (:meth:`embed_image`).
    """

    def __init__(self, variant: str, *, third_dim: int, vocab_size: int, image_tower: ImageTowerConfig,
                 text_tower: TextTowerConfig, embed_dim: int, loss: LossConfig, weight: float = 1.0,
                 terms: Sequence[str] = TERMS, headless: bool = False, augment: bool = True):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
        unknown = set(terms) - set(TERMS)
        if unknown or not terms:
            raise ValueError(f"terms {list(terms)} must be a non-empty subset of {TERMS}")
        self.variant, self.weight, self.terms = variant, float(weight), tuple(terms)
        self.headless, self.augment, self.alpha = headless, augment, 0.0
        if variant != "lit":
            self.f = build_image_tower(image_tower, embed_dim)
        self.g = build_text_tower(text_tower, vocab_size, embed_dim)
        if variant != "scratch":
            self.h = nn.Linear(third_dim, embed_dim)  # the third tower: frozen p(I), a trainable linear map
        if variant == "3t" and not headless:
            self.f_h, self.g_h, self.h_f, self.h_g = (Head(embed_dim) for _ in range(4))
        # One shared temperature for every term (paper §3); learnable, init 0.07, scale clamped at 100.
        self.criterion = ClipLoss(temperature=loss.temperature, learnable=loss.learnable)

    # -- the three towers' raw outputs (before normalisation) --
    def tower_f(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        images = normalise_pixels(pixels_u8)
        if self.training and self.augment:
            images = augment(images)
        return self.f(images)

    def tower_g(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.g(input_ids, attention_mask)

    def tower_h(self, third: torch.Tensor) -> torch.Tensor:
        # .detach(): p is frozen; nothing flows back into the cached features (tested).
        return self.h(third.detach().float())

    def term_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each contrastive term of the variant, unweighted (the chapter plots them separately)."""
        text = self.tower_g(batch["input_ids"], batch["attention_mask"])
        if self.variant == "scratch":
            return {"fg": self.criterion(F.normalize(self.tower_f(batch["pixels"]), dim=-1), F.normalize(text, dim=-1))}
        third = self.tower_h(batch["third"])
        if self.variant == "lit":
            return {"hg": self.criterion(F.normalize(third, dim=-1), F.normalize(text, dim=-1))}
        image = self.tower_f(batch["pixels"])
        out = {}
        if "fg" in self.terms:  # L_f<->g: the usual image-text contrastive term
            out["fg"] = self.criterion(F.normalize(image, dim=-1), F.normalize(text, dim=-1))
        if self.headless:  # f, g and h meet in one space
            if "fh" in self.terms:
                out["fh"] = self.criterion(F.normalize(image, dim=-1), F.normalize(third, dim=-1))
            if "gh" in self.terms:
                out["gh"] = self.criterion(F.normalize(text, dim=-1), F.normalize(third, dim=-1))
            return out
        if "fh" in self.terms:  # L_fh<->hf: f's head against h's head for f
            out["fh"] = self.criterion(self.f_h(image), self.h_f(third))
        if "gh" in self.terms:  # L_gh<->hg: g's head against h's head for g
            out["gh"] = self.criterion(self.g_h(text), self.h_g(third))
        return out

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Paper §3: ``L = (L_f<->g + L_fh<->hf + L_gh<->hg) / 3``; with ``w``: ``(L_fg + w (L_fh + L_gh)) / 3``."""
        terms = self.term_losses(batch)
        if self.variant != "3t":
            return next(iter(terms.values()))
        total = sum(value * (1.0 if name == "fg" else self.weight) for name, value in terms.items())
        return total / 3

    # -- test time: heads and h are dropped (except LiT, whose image side *is* h) --
    @torch.no_grad()
    def embed_image(self, pixels_u8: torch.Tensor | None, third: torch.Tensor | None) -> torch.Tensor:
        if self.variant == "lit":
            return F.normalize(self.tower_h(third), dim=-1)
        image = F.normalize(self.tower_f(pixels_u8), dim=-1)
        if self.headless and self.alpha > 0:  # the convex combination alpha * h + (1 - alpha) * f
            mixed = self.alpha * F.normalize(self.tower_h(third), dim=-1) + (1 - self.alpha) * image
            return F.normalize(mixed, dim=-1)
        return image

    @torch.no_grad()
    def embed_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.tower_g(input_ids, attention_mask), dim=-1)

    def export(self) -> "TwoTowerModel":
        """The model 3T ships: f and g only (heads and h discarded, paper §3). Not for LiT or alpha > 0."""
        if self.variant == "lit" or (self.headless and self.alpha > 0):
            raise ValueError("this variant needs the third tower at test time; export is for scratch and 3T")
        import copy

        return TwoTowerModel(copy.deepcopy(self.f), copy.deepcopy(self.g))


class TwoTowerModel(nn.Module):
    """f and g alone, CLIP-like: ``encode_image(uint8 pixels)``, ``encode_text(ids, mask)``."""

    def __init__(self, f: nn.Module, g: nn.Module):
        super().__init__()
        self.f, self.g = f, g
        self.eval()

    @torch.no_grad()
    def encode_image(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.f(normalise_pixels(pixels_u8)), dim=-1)

    @torch.no_grad()
    def encode_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.g(input_ids, attention_mask), dim=-1)


# --------------------------------------------------------------------------------------------
# Evaluation on resident tensors
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def embed_in_batches(fn, *tensors: torch.Tensor | None, batch_size: int = 512) -> torch.Tensor:
    n = next(t for t in tensors if t is not None).shape[0]
    parts = [fn(*(None if t is None else t[i : i + batch_size] for t in tensors)) for i in range(0, n, batch_size)]
    return torch.cat(parts)


@torch.no_grad()
def zero_shot(method: ThreeTowers, images: dict[str, torch.Tensor | None], labelled, tokenizer,
              context: int) -> dict[str, float]:
    """acc1 / acc5 / mean per-class recall on one labelled set, CLIP's prompt ensembling (lib.core.evaluate)."""
    from lib.core.evaluate import classification_metrics, zero_shot_classifier

    method.eval()

    def encode_text(texts: list[str]) -> torch.Tensor:
        tokens = tokenize(tokenizer, texts, context)
        return embed_in_batches(method.embed_text, tokens["input_ids"], tokens["attention_mask"])

    classifier = zero_shot_classifier(encode_text, labelled.classnames, labelled.templates)
    image = embed_in_batches(method.embed_image, images["pixels"], images.get("third"))
    return classification_metrics(image, classifier, torch.as_tensor(labelled.labels))


@torch.no_grad()
def retrieval(method: ThreeTowers, images: dict[str, torch.Tensor | None], captions: dict[str, torch.Tensor]):
    from lib.core.evaluate import retrieval_metrics

    method.eval()
    image = embed_in_batches(method.embed_image, images["pixels"], images.get("third"))
    text = embed_in_batches(method.embed_text, captions["input_ids"], captions["attention_mask"])
    return retrieval_metrics(image, text, torch.arange(len(image)))


# --------------------------------------------------------------------------------------------
# Data: what a chapter run trains and tests on, as resident tensors
# --------------------------------------------------------------------------------------------
def training_pairs(cfg: ThreeTowersConfig, bench) -> list:
    """The training image-caption sets: every drawing style of ``train_styles`` (emoji), or the pairs."""
    if cfg.data.corpus != "emoji":
        return [bench.train]
    from lib.data.datasets import emoji_pairs

    return [emoji_pairs("train", style, cfg.data.captions, cfg.data.limit) for style in cfg.train_styles]


def tensors(images, cfg: ThreeTowersConfig, store, tokenizer, *, with_captions: bool = True) -> dict[str, torch.Tensor]:
    """``pixels`` (uint8), the frozen third-tower features ``third`` (from the store) and, for
    image-caption pairs, the tokenised captions: one dict that ``lib.core.train.fit`` slices into batches."""
    from lib.core import features

    out = {"pixels": pixels(images.load_image, len(images), cfg.image_tower.image_size)}
    out["third"] = features.image_features(store, cfg.third, images.load_image, images.ids, source=images.source,
                                           device=cfg.device).tensor()
    if with_captions:
        out.update(tokenize(tokenizer, images.captions, cfg.text_tower.context))
    return out


def concat(parts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


def build_method(cfg: ThreeTowersConfig, variant: str, *, third_dim: int, vocab_size: int, **options) -> ThreeTowers:
    """A method from the config; ``options``: weight, terms, headless (the chapter's variants)."""
    return ThreeTowers(variant, third_dim=third_dim, vocab_size=vocab_size, image_tower=cfg.image_tower,
                       text_tower=cfg.text_tower, embed_dim=cfg.embed_dim, loss=cfg.loss, augment=cfg.augment,
                       **options)

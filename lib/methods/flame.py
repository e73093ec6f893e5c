"""FLAME as a trainable method on cached features: an image MLP into the frozen LLM's space, two losses.

Why this shape: FLAME keeps the LLM frozen and puts *no* head on the text side; the facet embeddings
(``lib.core.facets``) are the targets, and the image side learns to land among them. In the paper a ViT-B/16
is trained from scratch and then a 2-layer MLP maps it into the LLM's hidden width; in this book the
image tower is a frozen, cached feature, so only the MLP trains (say so when comparing numbers).
See notebooks/flame.py, sections "The image projector and the two losses" and
"Two losses: Eq. 1 vs the official multi-positive sigmoid".

* :class:`FlameProjector`: ``Linear -> GELU -> Linear -> LayerNorm``, L2-normalised (official
  ``_build_mm_projector``, hidden width ``max(out_dim, 4096)``).
* :func:`facet_clip_loss` / :class:`FacetClipLoss`: the paper's Eq. 1, one CLIP InfoNCE per facet,
  summed over facets, learnable temperature (init 0.07).
* :func:`multi_positive_sigmoid_loss` / :class:`MultiPositiveSigmoidLoss`: what the official code
  trains with: SigLIP's pairwise sigmoid loss where every image has P positive texts (6 of its 11
  cached embeddings), ``logits = scale * cos + bias`` with scale 1/0.1 and bias -10 at init.
* :class:`Flame`: projector + one of the losses, with ``loss(batch)`` for ``lib.core.train.fit``.
* :class:`FlameConfig` / :func:`load_config`: the chapter's validated config; :func:`cldr_labels`: the
  emoji corpus's CLDR labels in other locales (the multilingual test).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.config import (
    DataConfig, HeadConfig, LossConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig,
)
from lib.core.facets import FacetConfig
from lib.nn.losses import ClipLoss, clip_loss
from lib.methods.three_towers import TextTowerConfig

__all__ = [
    "FlameProjector", "facet_clip_loss", "FacetClipLoss", "multi_positive_sigmoid_loss",
    "MultiPositiveSigmoidLoss", "Flame", "LOSSES", "FlameConfig", "load_config", "cldr_labels",
]

LOSSES = ("facet_infonce", "mp_sigmoid")


class FlameProjector(nn.Module):
    """FLAME's image-side MLP: cached image feature -> the LLM's hidden width, L2-normalised.

    Official code (``src/open_clip/model.py``, ``_build_mm_projector`` with ``mlp_depth=2``):
    ``Linear(width, max(projector_dim, 4096)) -> GELU -> Linear(., projector_dim) -> LayerNorm``, with
    ``projector_dim`` the LLM width (5120 for Mistral-Nemo); the embedding is normalised before the
    loss. Difference: the official MLP runs on every ViT token and the tokens are then averaged
    (``pool_type: avg``); here it runs on one pooled, cached feature — MLP(mean) is not mean(MLP).
    See notebooks/flame.py, section "The image projector and the two losses".
    """

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.hidden_dim = int(hidden_dim) if hidden_dim is not None else max(self.out_dim, 4096)
        self.net = nn.Sequential(
            nn.Linear(self.in_dim, self.hidden_dim),
            nn.GELU(),
            nn.Linear(self.hidden_dim, self.out_dim),
            nn.LayerNorm(self.out_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_dim:
            raise ValueError(
                f"FlameProjector expects image features of width {self.in_dim}, got {x.shape[-1]}: "
                "it was built for another vision model"
            )
        return F.normalize(self.net(x.float()), dim=-1)

    def extra_repr(self) -> str:
        return f"in_dim={self.in_dim}, hidden_dim={self.hidden_dim}, out_dim={self.out_dim}"


def _check_facets(image_emb: torch.Tensor, text_emb: torch.Tensor, name: str) -> None:
    if image_emb.ndim != 2 or text_emb.ndim != 3:
        raise ValueError(
            f"{name} expects image (N, D) and text (N, K, D) embeddings, got {tuple(image_emb.shape)} and "
            f"{tuple(text_emb.shape)}"
        )
    if text_emb.shape[0] != image_emb.shape[0] or text_emb.shape[2] != image_emb.shape[1]:
        raise ValueError(
            f"{name}: text {tuple(text_emb.shape)} does not match image {tuple(image_emb.shape)} "
            "(need the same N rows and width D)"
        )


def facet_clip_loss(image_emb: torch.Tensor, text_emb: torch.Tensor, logit_scale: float | torch.Tensor) -> torch.Tensor:
    """FLAME's Eq. 1: ``sum_k CLIP(image, text[:, k])`` — one symmetric InfoNCE per facet, summed.

    ``image_emb`` ``(N, D)``, ``text_emb`` ``(N, K, D)``, both L2-normalised; row i's facets are the
    positives of image i *for that facet's loss only*: other captions' embeddings of the same facet
    are the negatives. Summing (not averaging) follows the paper; with Adam a mean over K would only
    change the effective temperature gradient scale, not the minimiser. See notebooks/flame.py, section "Two losses: Eq. 1 vs the official multi-positive sigmoid".
    """
    _check_facets(image_emb, text_emb, "facet_clip_loss")
    return sum(clip_loss(image_emb, text_emb[:, k], logit_scale) for k in range(text_emb.shape[1]))


class FacetClipLoss(ClipLoss):
    """:func:`facet_clip_loss` with CLIP's temperature handling (learnable by default, init 0.07,
    scale clamped at 100; see :class:`lib.nn.losses.ClipLoss`)."""

    def __init__(self, temperature: float = 0.07, learnable: bool = True, max_scale: float = 100.0) -> None:
        super().__init__(temperature=temperature, learnable=learnable, max_scale=max_scale)

    def forward(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
        return facet_clip_loss(image_emb, text_emb, self.scale)


def multi_positive_sigmoid_loss(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: float | torch.Tensor,
    logit_bias: float | torch.Tensor,
) -> torch.Tensor:
    """The official code's ``MultiPositiveSigmoidLoss``: pairwise sigmoid loss with P positives per image.

    ``text_emb`` ``(N, P, D)``: the P embeddings of image i (facets, prompts, caption variants). All
    N x N*P image-text pairs are binary problems: ``z = scale * <v_i, t_j> + bias``, label ``y = +1`` if
    text j belongs to image i, else ``-1``; the loss is ``-sum log sigmoid(y z) / (N * P)`` — divided by
    the number of *texts*, as in the official code. With P = 1 this is exactly SigLIP (open_clip's
    ``SigLipLoss``, which divides by N images). See notebooks/flame.py, section "Two losses: Eq. 1 vs the official multi-positive sigmoid".
    """
    _check_facets(image_emb, text_emb, "multi_positive_sigmoid_loss")
    n, p, d = text_emb.shape
    logits = logit_scale * (image_emb @ text_emb.reshape(n * p, d).T) + logit_bias  # (N, N*P), image-major
    owner = torch.arange(n * p, device=logits.device) // p
    labels = torch.where(owner[None, :] == torch.arange(n, device=logits.device)[:, None], 1.0, -1.0)
    return -F.logsigmoid(labels.to(logits.dtype) * logits).sum() / (n * p)


class MultiPositiveSigmoidLoss(ClipLoss):
    """:func:`multi_positive_sigmoid_loss` with a learnable scale and bias.

    Official init (``src/training/main.py`` with ``--mp-sigmoid``, as for SigLIP): ``logit_scale =
    log(10)`` (temperature 0.1) used as ``exp``, ``logit_bias = -10``. The scale (and its clamp at
    ``max_scale`` = 100 in the forward pass) is :class:`lib.nn.losses.ClipLoss`'s; only the bias is added.
    """

    def __init__(self, temperature: float = 0.1, bias: float = -10.0, learnable: bool = True,
                 max_scale: float = 100.0) -> None:
        super().__init__(temperature=temperature, learnable=learnable, max_scale=max_scale)
        bias_t = torch.tensor(float(bias), dtype=torch.float32)
        if learnable:
            self.bias = nn.Parameter(bias_t)
        else:
            self.register_buffer("bias", bias_t)

    def forward(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
        return multi_positive_sigmoid_loss(image_emb, text_emb, self.scale, self.bias)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature:.4g}, bias={float(self.bias.detach()):.4g}"


class Flame(nn.Module):
    """FLAME on cached features: ``batch["image"]`` ``(B, Di)``, ``batch["text"]`` ``(B, K, Dt)`` facets.

    ``loss="facet_infonce"`` (paper) or ``"mp_sigmoid"`` (official code). ``positives``: with the
    sigmoid loss, how many of the K embeddings of each image are drawn at random per training batch
    (official: 6 of 11); ``None`` uses all K. The text side has no trainable part: facet embeddings
    are only L2-normalised; a caption's single embedding (retrieval, zero-shot) is the mean of its raw
    facet states, renormalised, as the official ``encode_text(infer=True)``. ``embed_text`` /
    ``embed_image`` make it usable with ``lib.methods.sharelock.zero_shot_metrics`` and ``retrieval``.
    """

    def __init__(self, image_dim: int, text_dim: int, *, loss: str = "facet_infonce", hidden_dim: int | None = None,
                 temperature: float | None = None, learnable: bool = True, bias: float = -10.0,
                 positives: int | None = None) -> None:
        super().__init__()
        if loss not in LOSSES:
            raise ValueError(f"loss {loss!r} is not one of {LOSSES}")
        if positives is not None and (loss != "mp_sigmoid" or positives < 1):
            raise ValueError("positives (a number >= 1) applies to the 'mp_sigmoid' loss only")
        self.kind, self.positives = loss, positives
        self.image_head = FlameProjector(image_dim, text_dim, hidden_dim)
        self.text_dim = int(text_dim)
        if loss == "facet_infonce":
            self.criterion = FacetClipLoss(0.07 if temperature is None else temperature, learnable=learnable)
        else:
            self.criterion = MultiPositiveSigmoidLoss(0.1 if temperature is None else temperature, bias, learnable)

    def embed_image(self, image_features: torch.Tensor) -> torch.Tensor:
        return self.image_head(image_features)

    def embed_text(self, text_features: torch.Tensor) -> torch.Tensor:
        """``(N, D)`` text embeddings from ``(N, D)`` or ``(N, K, D)`` features (mean over facets), L2-normalised.
        During training (``loss``) every facet is kept apart; the validation loss uses all K facets."""
        if text_features.shape[-1] != self.text_dim:
            raise ValueError(f"Flame was built for text width {self.text_dim}, got {text_features.shape[-1]}")
        if text_features.ndim == 3:
            text_features = text_features.float().mean(dim=1)
        return F.normalize(text_features.float(), dim=-1)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        text = batch["text"]
        if text.ndim == 2:  # one embedding per image: K = 1
            text = text[:, None]
        text = F.normalize(text.float(), dim=-1)
        if self.positives is not None and self.training and self.positives < text.shape[1]:
            draw = torch.rand(text.shape[0], text.shape[1], device=text.device).argsort(dim=1)[:, : self.positives]
            text = text.gather(1, draw[..., None].expand(-1, -1, text.shape[2]))
        return self.criterion(self.embed_image(batch["image"]), text)


# --------------------------------------------------------------------------------------------
# Configuration of the FLAME chapter (validated by lib.core.config; see notebooks/configs/flame.yaml)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FlameConfig:
    """``notebooks/configs/flame.yaml``, validated field by field on load (``lib.core.config``).

    ``text`` is the frozen LLM read through FLAME's prompt (its ``facets`` are the K of the main
    run); ``facet_counts`` are the prompt ablation (the first k facets, sliced from the K cached ones:
    with reset positions a facet's embedding does not depend on the others). ``baselines`` are the
    ShareLock heads on plain last-token / mean features (the first must be the same LLM as ``text``);
    ``scratch`` is a CLIP-style text tower trained from scratch against the frozen image features
    (``lib.methods.three_towers``' ``lit`` variant). ``val_limit`` / ``retrieval_limit`` keep the first N
    validation / unseen concepts (the LLM is the cost of the small config). ``locales``: CLDR labels
    in other languages for the multilingual retrieval test (emoji corpus only).
    """

    data: DataConfig
    vision: VisionModelConfig
    text: FacetConfig
    baselines: tuple[TextModelConfig, ...]
    scratch: TextTowerConfig
    scratch_embed_dim: int = 128
    projector_hidden: int | None = None  # None: the official max(LLM width, 4096)
    loss: Literal["facet_infonce", "mp_sigmoid"] = "facet_infonce"
    temperature: float | None = None  # None: 0.07 (facet_infonce) / 0.1 (mp_sigmoid)
    positives: int | None = None  # mp_sigmoid: positives drawn per image (official 6 of 11); None = all K
    compare_losses: bool = True
    facet_counts: tuple[int, ...] = (1,)
    head: HeadConfig = field(default_factory=HeadConfig)  # the ShareLock baseline's text head
    sharelock_loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    val_limit: int | None = None
    retrieval_limit: int | None = None
    locales: tuple[str, ...] = ()
    locale_limit: int | None = None
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        k = len(self.text.facets)
        if any(not 1 <= c <= k for c in self.facet_counts):
            raise ValueError(f"facet_counts {list(self.facet_counts)} must lie in 1..{k} (the facets of `text`)")
        if not self.baselines:
            raise ValueError("baselines must name at least one text model (the first: the same LLM as `text`)")
        if self.positives is not None and self.positives > k:
            raise ValueError(f"positives ({self.positives}) cannot exceed the {k} facets")
        for name in ("val_limit", "retrieval_limit", "locale_limit", "projector_hidden", "scratch_embed_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or null, got {value}")


def load_config(name: str, overrides: dict | None = None) -> FlameConfig:
    """``small`` / ``full`` of ``notebooks/configs/flame.yaml`` (or a YAML path), validated."""
    from lib.core import config as configs

    return configs.load("flame", name, FlameConfig, overrides)


def cldr_labels(split: str, locale: str, limit: int | None = None) -> list[str]:
    """The CLDR labels of one emoji split in ``locale`` (emojibase-data, unpacked with the corpus by
    ``lib.data.emoji``), in the split's concept order; the first ``limit`` concepts. A concept without a
    label in that locale is an error rather than a silent gap (every base emoji has one in the 12
    locales of ``lib.data.emoji.LOCALES``). See notebooks/flame.py, section "Multilingual zero-shot"."""
    from lib.data import emoji

    if locale not in emoji.LOCALES:
        raise ValueError(f"locale {locale!r} is not unpacked; the corpus has {emoji.LOCALES}")
    concepts = emoji.split_concepts(split)[:limit]
    missing = [c.label for c in concepts if locale not in c.names]
    if missing:
        raise ValueError(f"{len(missing)} {split} concepts have no {locale!r} label (e.g. {missing[0]!r})")
    return [c.names[locale] for c in concepts]

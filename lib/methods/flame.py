"""FLAME as a trainable method on cached features: an image MLP into the frozen LLM's space, two losses.

Why this shape: FLAME keeps the LLM frozen and puts *no* head on the text side; the facet embeddings
(``lib.core.facets``) are the targets. The paper trains a ViT-B/16 and a 2-layer MLP; here the image feature is
frozen and cached, so only the MLP trains (say so when comparing numbers).
See notebooks/flame.py, sections "The image projector and the two losses" and
"Two losses: Eq. 1 vs the official multi-positive sigmoid".
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lib.nn.losses import FacetClipLoss, MultiPositiveSigmoidLoss

__all__ = ["FlameProjector", "Flame", "LOSSES", "SHORT_TEXT_FACET", "OFFICIAL_TEMPLATE", "official_caption"]

LOSSES = ("facet_infonce", "mp_sigmoid")
SHORT_TEXT_FACET = "this image description"  # paper §4.1: the one prompt for short texts (first scene-level one)
# The official code's single-prompt template (MIV-XJTU/FLAME @ 4d2b9a9, src/open_clip/model.py L221, after
# its "_" -> " " substitution): no "Detailed", a space before ":", "." and ",". Its captions get a final "."
# (official_caption), so the LLM reads `Image description : "<caption>." . After ...`.
OFFICIAL_TEMPLATE = 'Image description : "{caption}" . After thinking step by step , {facet} means in just one word:"'


def official_caption(text: str) -> str:
    """A caption as the official code puts it into its template (``multiprompteol_embeddings.py`` L46-50):
    a "." appended unless it ends in ``. ? " '``, double quotes turned into single ones, a final "?" into "."."""
    text = text.strip()
    if text and text[-1] not in ".?\"'":
        text += "."
    text = text.replace('"', "'")
    return text[:-1] + "." if text.endswith("?") else text


class FlameProjector(nn.Module):
    """FLAME's image-side MLP: cached image feature -> the LLM's hidden width, L2-normalised.

    ``Linear(in, max(out, 4096)) -> GELU -> Linear(., out) -> LayerNorm`` as the official ``_build_mm_projector``;
    it runs on one pooled, cached feature, not on every ViT token before averaging (MLP(mean) is not mean(MLP)).
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


class Flame(nn.Module):
    """FLAME on cached features: ``batch["image"]`` ``(B, Di)``, ``batch["text"]`` ``(B, K, Dt)`` facets.

    ``loss="facet_infonce"`` (paper) or ``"mp_sigmoid"`` (official code). ``positives``: with the sigmoid loss, how
    many of the K embeddings per image are drawn per batch (official: 6 of 11; ``None``: all K). The text side is
    only L2-normalised; a caption's single embedding is the renormalised mean of its facet states, as the official
    ``encode_text(infer=True)``. ``embed_text`` / ``embed_image`` serve ``lib.core.evaluate``.
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

"""Contrastive losses: every loss of the book, in one module (as open_clip's ``loss.py``).

:func:`clip_loss` / :class:`ClipLoss` is CLIP's symmetric InfoNCE (ShareLock, Three Towers, FDT): each image must
pick its caption among the batch's N and each caption its image, so the other N-1 items are the negatives and
batch size matters. :class:`FacetClipLoss` is FLAME's Eq. 1; :class:`MultiPositiveSigmoidLoss` is the sigmoid
loss FLAME's official code trains with. See notebooks/sharelock.py, section "Training the head".

Convention: ``logit_scale`` is the *scale* 1/tau (e.g. 1/0.07 = 14.29), not its logarithm, as in
open_clip's ``ClipLoss``. Under several processes :class:`ClipLoss` gathers every rank's embeddings, so each loss
sees the global batch's negatives (book/scale_out.md).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.distributed import gather_with_grad

__all__ = ["clip_loss", "ClipLoss", "facet_clip_loss", "FacetClipLoss", "multi_positive_sigmoid_loss",
           "MultiPositiveSigmoidLoss"]


def clip_loss(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: float | torch.Tensor,
) -> torch.Tensor:
    """Symmetric InfoNCE of CLIP (Radford et al. 2021, Figure 3).

    ``logits = logit_scale * image_emb @ text_emb.T``; row i's correct column is i; the loss is
    ``(CE(logits, arange) + CE(logits.T, arange)) / 2``. Inputs are L2-normalised already; ``logit_scale`` is 1/tau,
    a float or a 0-d tensor. Equal to open_clip's ``ClipLoss`` and to ShareLock's loss.
    """
    if image_emb.ndim != 2 or text_emb.ndim != 2:
        raise ValueError(
            f"clip_loss expects 2-d (batch, dim) embeddings, got {tuple(image_emb.shape)} and "
            f"{tuple(text_emb.shape)}"
        )
    if image_emb.shape != text_emb.shape:
        raise ValueError(
            f"clip_loss needs one text per image and a shared width, got image {tuple(image_emb.shape)} "
            f"and text {tuple(text_emb.shape)}"
        )
    logits = logit_scale * (image_emb @ text_emb.T)
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


class ClipLoss(nn.Module):
    """CLIP loss with a fixed or learnable temperature.

    ShareLock keeps tau **fixed** at 0.07 (``log_scale`` is then a buffer); CLIP learns it. A learnable scale is
    the parameter ``log_scale`` (init log(1/tau)), used as ``exp(log_scale)`` clamped to ``max_scale`` = 100 in the
    forward pass (open_clip clamps the parameter after each step instead; the loss is the same, and no hook is
    needed). Under ``torch.distributed`` (W > 1) the embeddings of all ranks are gathered with gradient, so the
    loss is over the global batch (book/scale_out.md). See notebooks/sharelock.py, section "Training the head".
    """

    def __init__(self, temperature: float = 0.07, learnable: bool = False, max_scale: float = 100.0,
                 log_scale_bounds: tuple[float, float] | None = None) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if max_scale <= 0:
            raise ValueError(f"max_scale must be > 0, got {max_scale}")
        if log_scale_bounds is not None and not (len(log_scale_bounds) == 2
                                                 and log_scale_bounds[0] <= log_scale_bounds[1]):
            raise ValueError(f"log_scale_bounds must be (low, high) with low <= high, got {log_scale_bounds!r}")
        self.learnable = bool(learnable)
        self.max_scale = float(max_scale)
        self.log_scale_bounds = None if log_scale_bounds is None else tuple(map(float, log_scale_bounds))
        init = torch.tensor(math.log(1.0 / temperature), dtype=torch.float32)
        if self.learnable:
            self.log_scale = nn.Parameter(init)
        else:
            self.register_buffer("log_scale", init)

    @property
    def scale(self) -> torch.Tensor:
        """The logit scale 1/tau actually used: ``min(exp(log_scale), max_scale)`` (0-d tensor).

        With ``log_scale_bounds=(lo, hi)`` the *parameter* is first clamped in place to ``[lo, hi]``, as FDT's official
        code does around every optimiser step, so gradients still flow at the bound.
        """
        if self.log_scale_bounds is not None:
            with torch.no_grad():
                self.log_scale.clamp_(*self.log_scale_bounds)
        return self.log_scale.exp().clamp(max=self.max_scale)

    @property
    def temperature(self) -> float:
        """tau = 1/scale, as a Python float (for logging)."""
        return float(1.0 / self.scale.detach())

    def forward(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
        return clip_loss(gather_with_grad(image_emb), gather_with_grad(text_emb), self.scale)

    def extra_repr(self) -> str:
        bounds = f", log_scale_bounds={self.log_scale_bounds}" if self.log_scale_bounds else ""
        return f"temperature={self.temperature:.4g}, learnable={self.learnable}, max_scale={self.max_scale}{bounds}"


# --- FLAME (Cao et al.): several prompted text embeddings per image ----------------------------------------
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
    are the negatives. Summing (not averaging) follows the paper. See notebooks/flame.py, section
    "Two losses: Eq. 1 vs the official multi-positive sigmoid".
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

    ``text_emb`` ``(N, P, D)``: the P embeddings of image i. Every image-text pair is a binary problem,
    ``z = scale * <v_i, t_j> + bias`` with ``y = +1`` if text j belongs to image i, else ``-1``; the loss is
    ``-sum log sigmoid(y z) / (N * P)`` (divided by the texts, as the official code). P = 1 is SigLIP.
    See notebooks/flame.py, section "Two losses: Eq. 1 vs the official
    multi-positive sigmoid".
    """
    _check_facets(image_emb, text_emb, "multi_positive_sigmoid_loss")
    n, p, d = text_emb.shape
    logits = logit_scale * (image_emb @ text_emb.reshape(n * p, d).T) + logit_bias  # (N, N*P), image-major
    owner = torch.arange(n * p, device=logits.device) // p
    labels = torch.where(owner[None, :] == torch.arange(n, device=logits.device)[:, None], 1.0, -1.0)
    return -F.logsigmoid(labels.to(logits.dtype) * logits).sum() / (n * p)


class MultiPositiveSigmoidLoss(ClipLoss):
    """:func:`multi_positive_sigmoid_loss` with a learnable scale and bias.

    Official init (as for SigLIP): temperature 0.1, ``logit_bias = -10``. The scale is :class:`ClipLoss`'s.
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

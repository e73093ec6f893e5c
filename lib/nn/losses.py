"""Contrastive losses: every loss of the book, in one module (as open_clip's ``loss.py``).

* :func:`clip_loss` / :class:`ClipLoss`: CLIP's symmetric InfoNCE (ShareLock, Three Towers' terms, FDT);
* :func:`facet_clip_loss` / :class:`FacetClipLoss`: FLAME's Eq. 1, one InfoNCE per prompt facet, summed;
* :func:`multi_positive_sigmoid_loss` / :class:`MultiPositiveSigmoidLoss`: what FLAME's official code trains
  with, SigLIP's sigmoid loss with several positives per image.

The CLIP loss (symmetric InfoNCE) treats a batch of N image-text pairs as two N-way classification
problems: each image must pick its own caption among the N captions, and each caption its own image
among the N images. The other N-1 items of the batch are the negatives, which is why batch size
matters so much for contrastive learning (and why ``lib.core.train`` reports how many negatives each loss
really sees). See notebooks/sharelock.py, section "Training the head".

Convention: ``logit_scale`` is the *scale* 1/tau (e.g. 1/0.07 = 14.29), not its logarithm, as in
open_clip's ``ClipLoss`` and HF's ``CLIPModel`` after ``.exp()``.

Several processes (``torchrun``, ``lib.core.train.fit`` under DDP): :class:`ClipLoss` gathers every rank's
embeddings first (``lib.core.distributed.gather_with_grad``), so each loss sees the *global* batch's
negatives, as open_clip's ``ClipLoss(gather_with_grad=True, local_loss=False)``. See book/scale_out.md.
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

    ``logits = logit_scale * image_emb @ text_emb.T``; row i's correct column is i;
    the loss is ``(CE(logits, arange) + CE(logits.T, arange)) / 2``.

    Inputs are expected to be L2-normalised already (the heads do it), so ``image_emb @ text_emb.T``
    are cosine similarities. ``logit_scale`` is 1/tau, a float or a 0-d tensor (a learnable one
    receives gradients). Equal to ``open_clip.loss.ClipLoss()(image_emb, text_emb, logit_scale)``
    and to ShareLock's loss (HF ``clip_loss`` on ``exp(2.6592) * image @ text.T``, i.e. tau = 0.07).
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

    ShareLock keeps tau **fixed** at 0.07 (the official code hard-codes ``exp(2.6592)``, the log of
    1/0.07); CLIP learns it. A learnable scale is parameterised as ``log_scale`` (init log(1/tau)) and
    used as ``exp(log_scale)`` clamped to ``max_scale`` = 100, the open_clip/CLIP convention that
    stops the temperature from collapsing. Fixed: ``log_scale`` is a buffer (moves with ``.to()``,
    saved in the state_dict, never optimised). See notebooks/sharelock.py, section "Training the head".

    Note that open_clip clamps the *parameter* in place after each optimiser step
    (``logit_scale.clamp_(0, log(100))``) whereas here the clamp is applied in the forward pass, so
    no training-loop hook is needed; the loss value is the same. Beyond the clamp, no gradient
    reaches ``log_scale`` (as with open_clip, whose clamped parameter also stops moving upwards).

    Under ``torch.distributed`` (world size W > 1) the forward pass gathers the W ranks' embeddings with
    gradient and returns the loss over the full gathered batch, identical on every rank; with DDP's
    gradient average this reproduces the single-process gradient exactly (why: ``lib.core.distributed``'s
    docstring; checked by tests/test_distributed.py). Single process: no gather, nothing changes.
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

        With ``log_scale_bounds=(lo, hi)`` the *parameter* is first clamped in place to ``[lo, hi]``, as FDT's
        official code clamps its log scale to [3, 6] around every optimiser step (``train_solver.py``): the
        clamped value is then a point where gradients flow, unlike a clamp inside the graph.
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
    are the negatives. Summing (not averaging) follows the paper; with Adam a mean over K would only
    change the effective temperature gradient scale, not the minimiser. See notebooks/flame.py, section
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

    ``text_emb`` ``(N, P, D)``: the P embeddings of image i (facets, prompts, caption variants). All
    N x N*P image-text pairs are binary problems: ``z = scale * <v_i, t_j> + bias``, label ``y = +1`` if
    text j belongs to image i, else ``-1``; the loss is ``-sum log sigmoid(y z) / (N * P)`` — divided by
    the number of *texts*, as in the official code. With P = 1 this is exactly SigLIP (open_clip's
    ``SigLipLoss``, which divides by N images). See notebooks/flame.py, section "Two losses: Eq. 1 vs the official
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

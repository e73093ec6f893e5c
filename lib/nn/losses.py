"""Contrastive losses.

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

__all__ = ["clip_loss", "ClipLoss"]


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

    def __init__(self, temperature: float = 0.07, learnable: bool = False, max_scale: float = 100.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if max_scale <= 0:
            raise ValueError(f"max_scale must be > 0, got {max_scale}")
        self.learnable = bool(learnable)
        self.max_scale = float(max_scale)
        init = torch.tensor(math.log(1.0 / temperature), dtype=torch.float32)
        if self.learnable:
            self.log_scale = nn.Parameter(init)
        else:
            self.register_buffer("log_scale", init)

    @property
    def scale(self) -> torch.Tensor:
        """The logit scale 1/tau actually used: ``min(exp(log_scale), max_scale)`` (0-d tensor)."""
        return self.log_scale.exp().clamp(max=self.max_scale)

    @property
    def temperature(self) -> float:
        """tau = 1/scale, as a Python float (for logging)."""
        return float(1.0 / self.scale.detach())

    def forward(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
        return clip_loss(gather_with_grad(image_emb), gather_with_grad(text_emb), self.scale)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature:.4g}, learnable={self.learnable}, max_scale={self.max_scale}"

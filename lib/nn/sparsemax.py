"""Sparsemax: a softmax that can give exact zeros.

Why FDT needs it: an item is described by a handful of codebook entries, not by all of them, and softmax never
outputs 0. Sparsemax (Martins & Astudillo 2016) is the Euclidean projection onto the simplex,
``max(z_i - tau(z), 0)``; ``-inf`` scores get weight 0 and gradient 0. FDT's official code gives NaN there, and
its custom ``backward`` is never called (autograd's derivative of its forward is the same Jacobian).
See notebooks/fdt.py, section "Sparsemax".
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["sparsemax", "sparsemax_threshold", "Sparsemax"]


def sparsemax_threshold(z: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``tau`` and the support size ``k`` of sparsemax along ``dim`` (both keep ``dim`` with size 1): the support
    is the largest k with ``1 + k z_(k) > sum_{j<=k} z_(j)`` over the sorted scores, and ``tau`` puts the kept
    weights' sum at 1."""
    n = z.shape[dim]
    sorted_z, _ = torch.sort(z, dim=dim, descending=True)
    cumsum = sorted_z.cumsum(dim)
    shape = [1] * z.ndim
    shape[dim] = n
    ks = torch.arange(1, n + 1, device=z.device, dtype=z.dtype).view(shape)
    # -inf entries sort last: 1 + k * (-inf) = -inf is never > cumsum, so they are never in the support.
    support = (1 + ks * sorted_z) > cumsum
    k = support.sum(dim=dim, keepdim=True)  # the support is a prefix of the sorted scores
    tau = (cumsum.gather(dim, k - 1) - 1) / k.to(z.dtype)
    return tau, k


class _SparsemaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, dim: int) -> torch.Tensor:
        # Shifting by the max changes nothing mathematically and keeps cumsum well conditioned.
        shift = z.amax(dim=dim, keepdim=True)
        if not torch.isfinite(shift).all():
            raise ValueError("sparsemax needs at least one finite score in every slice (a row of only -inf "
                             "is all padding) and no +inf or nan")
        z = z - shift
        tau, _ = sparsemax_threshold(z, dim)
        out = torch.clamp(z - tau, min=0)
        ctx.save_for_backward(out)
        ctx.dim = dim
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (out,) = ctx.saved_tensors
        dim = ctx.dim
        support = out > 0
        g = torch.where(support, grad_out, torch.zeros_like(grad_out))
        mean = g.sum(dim=dim, keepdim=True) / support.sum(dim=dim, keepdim=True).to(g.dtype)
        return torch.where(support, grad_out - mean, torch.zeros_like(grad_out)), None


def sparsemax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax of ``z`` along ``dim`` (Martins & Astudillo 2016): non-negative, sums to 1, often sparse.

    Same values as ``entmax.sparsemax(z, dim)``; exact backward (custom autograd Function, checked with
    ``torch.autograd.gradcheck``). ``-inf`` scores get weight 0. See notebooks/fdt.py, section "Sparsemax".
    """
    if not z.is_floating_point():
        raise TypeError(f"sparsemax needs a floating-point tensor, got {z.dtype}")
    if z.ndim == 0:
        raise ValueError("sparsemax needs at least one dimension")
    return _SparsemaxFunction.apply(z, dim % z.ndim)


class Sparsemax(nn.Module):
    """:func:`sparsemax` as a module (drop-in for ``nn.Softmax(dim)``)."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return sparsemax(z, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"

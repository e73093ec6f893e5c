"""Trainable heads that map frozen features into a shared, L2-normalised embedding space.

Why heads at all: in ShareLock and LiT both encoders are frozen, so the only thing that can align images with
text is a small module on one tower's features: ShareLock's MLP (:class:`ShareLockHead`) or one linear map
(:class:`LinearHead`, the LiT-style baseline). The output is L2-normalised for cosine similarity; see
notebooks/sharelock.py, section "The projection head".
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ShareLockHead", "LinearHead"]


def _check_width(module_name: str, x: torch.Tensor, in_dim: int) -> None:
    """Fail early with an explanation instead of a bare shape error deep inside a matmul.

    The usual cause: a head built for one model's features fed another's (Gemma's 640-wide vs MiniLM's 384)."""
    if x.ndim < 1 or x.shape[-1] != in_dim:
        got = x.shape[-1] if x.ndim >= 1 else "a scalar"
        raise ValueError(
            f"{module_name} expects features of width {in_dim}, got {got}: the head was built for "
            f"another text model; rebuild it with in_dim={got}"
        )


class ShareLockHead(nn.Module):
    """ShareLock's projection MLP: ``num_layers`` Linear layers, ``BatchNorm1d -> ReLU -> Dropout``
    after every Linear but the last, L2-normalised output.

    The paper's head is 4 layers, hidden 4096, on frozen Llama-3-8B features; the image side has no head.
    Same layer order as the official code (github.com/JonaRuthardt/ShareLock, ``sharelock/models/projection.py``);
    differences: ``dropout`` is an argument (official: hard-coded 0.2), ``F.normalize`` adds an epsilon (an
    all-zero output gives zeros, not NaN), and ``out_dim`` is always explicit (official: the vision width).
    ``num_layers=0`` is the official "no head" (identity + L2 normalisation; ``out_dim == in_dim``). Input:
    ``(batch, in_dim)``, more than one row in training mode (BatchNorm). See notebooks/sharelock.py, section
    "The projection head".
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dim: int = 4096,
        num_layers: int = 4,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        if num_layers == 0 and out_dim != in_dim:
            raise ValueError(
                f"num_layers=0 is the identity (plus L2 normalisation), so out_dim must equal in_dim; "
                f"got in_dim={in_dim}, out_dim={out_dim}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_dim = int(in_dim)
        self.out_dim = int(out_dim)
        self.hidden_dim = int(hidden_dim)
        self.num_layers = int(num_layers)
        self.dropout = float(dropout)

        layers: list[nn.Module] = []
        width = self.in_dim
        for _ in range(self.num_layers - 1):
            layers += [
                nn.Linear(width, self.hidden_dim),
                nn.BatchNorm1d(self.hidden_dim),
                nn.ReLU(),
                nn.Dropout(self.dropout),
            ]
            width = self.hidden_dim
        if self.num_layers >= 1:
            layers.append(nn.Linear(width, self.out_dim))
        self.net = nn.Sequential(*layers)  # an empty Sequential is the identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(type(self).__name__, x, self.in_dim)
        return F.normalize(self.net(x), dim=-1)

    def extra_repr(self) -> str:
        return (
            f"in_dim={self.in_dim}, out_dim={self.out_dim}, hidden_dim={self.hidden_dim}, "
            f"num_layers={self.num_layers}, dropout={self.dropout}"
        )


class LinearHead(nn.Module):
    """One linear map followed by L2 normalisation: the LiT-style baseline.

    On frozen features LiT's final projection is all there is to train, so this head asks how much of ShareLock's
    gain comes from the depth of its MLP. See
    notebooks/sharelock.py, section "What the comparisons say".
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        self.in_dim = int(in_dim)
        self.out_dim = int(out_dim)
        self.proj = nn.Linear(self.in_dim, self.out_dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(type(self).__name__, x, self.in_dim)
        return F.normalize(self.proj(x), dim=-1)

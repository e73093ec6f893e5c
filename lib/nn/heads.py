"""Trainable heads that map frozen features into a shared, L2-normalised embedding space.

Why heads at all: in ShareLock and LiT both encoders are frozen, so the only thing that can align
images with text is a small module on top of one tower's features. The output is L2-normalised
because the CLIP loss and zero-shot classification compare embeddings by cosine similarity; see
notebooks/sharelock.py, section "The projection head".

* :class:`ShareLockHead`: the MLP that ShareLock puts on the (frozen) LLM text features.
* :class:`LinearHead`: one linear map, the LiT-style baseline ("is depth needed at all?").
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ShareLockHead", "LinearHead"]


def _check_width(module_name: str, x: torch.Tensor, in_dim: int) -> None:
    """Fail early with an explanation instead of a bare shape error deep inside a matmul.

    The usual cause is a head trained for one text/vision model being fed features of another
    (e.g. a head built for Gemma's 640-wide states receiving MiniLM's 384-wide ones).
    """
    if x.ndim < 1 or x.shape[-1] != in_dim:
        got = x.shape[-1] if x.ndim >= 1 else "a scalar"
        raise ValueError(
            f"{module_name} expects features of width {in_dim}, got {got}: the head was built for "
            f"another text model; rebuild it with in_dim={got}"
        )


class ShareLockHead(nn.Module):
    """ShareLock's projection MLP: ``num_layers`` Linear layers, ``BatchNorm1d -> ReLU -> Dropout``
    after every Linear but the last, L2-normalised output.

    Paper (Ruthardt et al., "Do better language models have crisper vision?", section 3): a 4-layer
    MLP with hidden width 4096 on the frozen Llama-3-8B last-token features; the image side has no
    head (the frozen DINOv2 feature is only L2-normalised). See notebooks/sharelock.py, section
    "The projection head".

    Checked against the official code (``sharelock/models/projection.py``, ``configs/default_config.yaml``
    of github.com/JonaRuthardt/ShareLock): the layer order is the same, ``Linear -> BatchNorm1d ->
    ReLU -> Dropout(0.2)`` for each of the first ``num_layers - 1`` layers, then a final ``Linear``
    without normalisation or activation, then division by the L2 norm. Differences, all minor:

    * the official dropout rate is hard-coded to 0.2; here it is the ``dropout`` argument (default 0.2);
    * the official code normalises with ``x / x.norm(dim=1)``; here ``F.normalize(x, dim=-1)``,
      which adds an epsilon so an all-zero output gives zeros instead of NaN;
    * the official output width ("embedding space") equals the vision feature width whenever the
      vision projector has 0 layers (its default), e.g. 1024 for DINOv2 ViT-L/14, even though the
      config also names ``embedding_space_dim: 768``; here ``out_dim`` is always explicit.

    ``num_layers=0`` gives the official "no head" case: identity followed by L2 normalisation (the
    image side of ShareLock); it needs ``out_dim == in_dim``. Weights use PyTorch's default
    initialisation, as the official code does.

    Input: ``(batch, in_dim)``. BatchNorm1d needs more than one row per batch in training mode.
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

    LiT (Zhai et al. 2022) locks the image tower and trains the text side; its towers end in a
    linear projection into the shared space. On frozen features that projection is all there is to
    train, so this head asks how much of ShareLock's gain comes from the depth of its MLP. See
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

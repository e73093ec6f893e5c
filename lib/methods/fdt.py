"""FDT: images and texts described by one shared, learned codebook ("Finite Discrete Tokens").

Chen et al., CVPR 2023: both sides are rewritten in one vocabulary of learnable codes (a code's relevance is its
best match over an item's projected patches or tokens; the weights are their sparsemax; the embedding is
``normalize(w @ C)``). Here the features come from frozen encoders; only the projectors, the codebook and the
logit scale train. Every difference of the official code from the paper is an option (``OFFICIAL`` / ``PAPER``).
See notebooks/fdt.py, sections "The FDT head" and "What the official code does, measured". Every difference,
listed: notebooks/fdt.py, section "Paper, official code, this book".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.encoders import pool as pool_tokens
from lib.core.sequences import trim_padding
from lib.nn.losses import ClipLoss
from lib.nn.sparsemax import sparsemax

__all__ = [
    "PROJECTORS", "WEIGHTINGS", "PADDINGS", "PAPER", "OFFICIAL", "OFFICIAL_LOG_SCALE_BOUNDS", "make_projector",
    "relevance", "code_weights", "CodeWeights", "FDTHead", "PooledHead", "codebook_usage", "embed_sequences",
    "collect_codes", "weight_encoder", "token_code_scores",
]

PROJECTORS = ("fc_gelu", "ln_mlp")
WEIGHTINGS = ("sparsemax", "softmax")
PADDINGS = ("mask", "zero")
OFFICIAL_LOG_SCALE_BOUNDS = (3.0, 6.0)  # train_solver.py L339-340, L355-356: logit_scale.data.clamp_(3, 6)
PAPER = dict(projector="fc_gelu", scaled_dot=False, temperature=1.0, padding="mask", log_scale_bounds=None)
OFFICIAL = dict(projector="ln_mlp", scaled_dot=True, temperature=1000.0, padding="zero",
                log_scale_bounds=OFFICIAL_LOG_SCALE_BOUNDS)
# The largest B x T x K logit tensor built at once: relevance() cuts a bigger batch into row chunks (the
# max over tokens is per row, so the result is the same). 2**28 floats = 1 GB in float32.
MAX_LOGITS = 1 << 28


def make_projector(kind: str, in_dim: int, out_dim: int) -> nn.Sequential:
    """FDT's per-modality query projector: ``fc_gelu`` (paper) or ``ln_mlp`` (official code's ``q_map``)."""
    if kind == "fc_gelu":
        return nn.Sequential(nn.Linear(in_dim, out_dim), nn.GELU())
    if kind == "ln_mlp":
        return nn.Sequential(nn.LayerNorm(in_dim), nn.Linear(in_dim, out_dim), nn.GELU(),
                             nn.LayerNorm(out_dim), nn.Linear(out_dim, out_dim))
    raise ValueError(f"projector {kind!r} is not one of {PROJECTORS}")


def _check(name: str, seq: torch.Tensor, mask: torch.Tensor | None, width: int) -> torch.Tensor:
    """Validate ``(B, T, width)`` + ``(B, T)`` bool mask; return the mask (all True when None)."""
    if seq.ndim != 3 or seq.shape[-1] != width:
        raise ValueError(f"{name} expects (batch, tokens, {width}) sequence features, got {tuple(seq.shape)}: "
                         "the head was built for another encoder, or pooled features were passed")
    if mask is None:
        return torch.ones(seq.shape[:2], dtype=torch.bool, device=seq.device)
    if mask.shape != seq.shape[:2]:
        raise ValueError(f"{name}: mask {tuple(mask.shape)} does not match the sequence {tuple(seq.shape[:2])}")
    mask = mask.to(device=seq.device, dtype=torch.bool)
    if not mask.any(dim=1).all():
        raise ValueError(f"{name}: some rows have no real token (mask all False)")
    return mask


def relevance(queries: torch.Tensor, codebook: torch.Tensor, mask: torch.Tensor, *, padding: str = "mask",
              scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``r[b, i] = max_j scale * <q[b, j], c_i>`` and the maximising token ``j`` for every code.

    ``padding="mask"``: padded tokens never win. ``padding="zero"`` (official code): their logits are multiplied
    by 0, so they join the max at 0. The logits are built at most :data:`MAX_LOGITS` floats at a time.
    """
    if padding not in PADDINGS:
        raise ValueError(f"padding {padding!r} is not one of {PADDINGS}")
    b, t = queries.shape[:2]
    rows = max(1, MAX_LOGITS // max(1, t * codebook.shape[0]))
    if b > rows:
        parts = [relevance(queries[i:i + rows], codebook, mask[i:i + rows], padding=padding, scale=scale)
                 for i in range(0, b, rows)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    logits = (queries @ codebook.T) * scale  # (B, T, K)
    if padding == "mask":
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    else:
        logits = logits * mask.unsqueeze(-1).to(logits.dtype)
    r, index = logits.max(dim=1)
    return r, index


def code_weights(r: torch.Tensor, weighting: str = "sparsemax") -> torch.Tensor:
    """``sparsemax(r)`` or ``softmax(r)`` over the codes, computed in float32 whatever ``r``'s dtype.

    Why: a sparsemax in bfloat16 over 16,384 codes misplaces its threshold, so the weights miss a sum of 1 by up
    to a few percent; in float32 they are a distribution whatever the precision of the products before.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting {weighting!r} is not one of {WEIGHTINGS}")
    with torch.autocast(device_type=r.device.type, enabled=False):
        r = r.float()
        return sparsemax(r, dim=-1) if weighting == "sparsemax" else torch.softmax(r, dim=-1)


@dataclass
class CodeWeights:
    """What an FDT encoder did for a batch, for analysis (codebook usage, which patch/word fires a code).

    ``weights``, ``relevance``, ``argmax`` (the token index, padding included, that matched each code best): all
    (B, K); ``embedding`` (B, d) = ``normalize(weights @ codebook)``.
    """

    weights: torch.Tensor
    relevance: torch.Tensor
    argmax: torch.Tensor
    embedding: torch.Tensor

    def active(self) -> torch.Tensor:
        """Number of codes with non-zero weight in each row."""
        return (self.weights > 0).sum(dim=1)


class FDTHead(nn.Module):
    """Shared codebook + one projector per modality + CLIP loss with a learnable clamped scale.

    ``weighting``: ``sparsemax`` (FDT) or ``softmax`` (ablation), over ``relevance * (1/sqrt(code_dim) if
    scaled_dot) / temperature``. ``log_scale_bounds``: the official ``(3, 6)`` clamp of the log logit scale, or
    None. ``padding``: ``"mask"`` (excluded, the paper) or ``"zero"`` (official code). Inputs are ``(B, T, dim)``
    sequences with ``(B, T)`` bool masks (True = real token). See notebooks/fdt.py, section "The FDT head".
    """

    def __init__(self, image_dim: int, text_dim: int, num_codes: int = 16384, code_dim: int = 512, *,
                 projector: str = "fc_gelu", weighting: str = "sparsemax", temperature: float = 1.0,
                 scaled_dot: bool = False, padding: str = "mask", init_temperature: float = 0.07,
                 max_scale: float = 100.0, codebook_std: float = 1.0,
                 log_scale_bounds: tuple[float, float] | None = None) -> None:
        super().__init__()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting {weighting!r} is not one of {WEIGHTINGS}")
        if padding not in PADDINGS:
            raise ValueError(f"padding {padding!r} is not one of {PADDINGS}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.image_dim, self.text_dim = int(image_dim), int(text_dim)
        self.num_codes, self.code_dim = int(num_codes), int(code_dim)
        self.projector_kind, self.weighting, self.padding = projector, weighting, padding
        self.temperature, self.scaled_dot = float(temperature), bool(scaled_dot)
        self.codebook = nn.Parameter(torch.randn(self.num_codes, self.code_dim) * codebook_std)
        self.image_projector = make_projector(projector, self.image_dim, self.code_dim)
        self.text_projector = make_projector(projector, self.text_dim, self.code_dim)
        self.criterion = ClipLoss(temperature=init_temperature, learnable=True, max_scale=max_scale,
                                  log_scale_bounds=log_scale_bounds)

    @property
    def scale(self) -> float:
        """The factor applied to every dot product before the max: ``1/sqrt(d)`` (if scaled) ``/ temperature``."""
        return (1.0 / math.sqrt(self.code_dim) if self.scaled_dot else 1.0) / self.temperature

    def codes(self, modality: str, seq: torch.Tensor, mask: torch.Tensor | None = None) -> CodeWeights:
        """Relevance, weights, per-code argmax token and embedding of a batch of one modality."""
        if modality not in ("image", "text"):
            raise ValueError(f"modality {modality!r} is not 'image' or 'text'")
        width = self.image_dim if modality == "image" else self.text_dim
        seq = seq.to(device=self.codebook.device, dtype=self.codebook.dtype)
        mask = _check(f"FDTHead ({modality})", seq, mask, width)
        projector = self.image_projector if modality == "image" else self.text_projector
        r, index = relevance(projector(seq), self.codebook, mask, padding=self.padding, scale=self.scale)
        r = r.float()
        weights = code_weights(r, self.weighting)
        # The weights are float32 (code_weights); the embedding is in the codebook's own dtype, so a float64 or a
        # bfloat16 head works without autocast (under autocast the product is cast as every other one).
        return CodeWeights(weights, r, index, F.normalize(weights.to(self.codebook.dtype) @ self.codebook, dim=-1))

    def encode_image(self, seq: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """L2-normalised FDT embeddings ``(B, code_dim)`` of patch sequences."""
        return self.codes("image", seq, mask).embedding

    def encode_text(self, seq: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """L2-normalised FDT embeddings ``(B, code_dim)`` of token sequences."""
        return self.codes("text", seq, mask).embedding

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Symmetric InfoNCE of a batch ``{"image", "image_mask"?, "text", "text_mask"?}`` (lib.core.train.fit)."""
        return _pair_loss(self, batch)

    def param_groups(self, weight_decay: float = 0.1) -> list[dict]:
        """AdamW groups as the official config: decay on the codebook and Linear weights; none on LayerNorm,
        biases and the logit scale."""
        return _param_groups(self, weight_decay)

    def extra_repr(self) -> str:
        return (f"codes={self.num_codes}x{self.code_dim}, projector={self.projector_kind}, weighting={self.weighting}, "
                f"temperature={self.temperature:g}, scaled_dot={self.scaled_dot}, padding={self.padding}")


class PooledHead(nn.Module):
    """Baseline (CLIP-style on frozen features): pool each sequence, one linear projection per modality.

    Pooling per modality: ``mean`` over real tokens, or ``first`` (the CLS token; right-padded sequences
    start with a real token). Same inputs, loss (``log_scale_bounds`` included) and ``encode_*`` interface as
    :class:`FDTHead`, so the two differ only in the codebook bottleneck. See notebooks/fdt.py, section
    "Baseline: pooled features".
    """

    def __init__(self, image_dim: int, text_dim: int, embed_dim: int = 512, *, image_pool: str = "mean",
                 text_pool: str = "mean", init_temperature: float = 0.07, max_scale: float = 100.0,
                 log_scale_bounds: tuple[float, float] | None = None) -> None:
        super().__init__()
        for pool in (image_pool, text_pool):
            if pool not in ("mean", "first"):
                raise ValueError(f"pooling {pool!r} is not one of ('mean', 'first')")
        self.image_dim, self.text_dim, self.embed_dim = int(image_dim), int(text_dim), int(embed_dim)
        self.image_pool, self.text_pool = image_pool, text_pool
        self.image_proj = nn.Linear(self.image_dim, self.embed_dim)
        self.text_proj = nn.Linear(self.text_dim, self.embed_dim)
        self.criterion = ClipLoss(temperature=init_temperature, learnable=True, max_scale=max_scale,
                                  log_scale_bounds=log_scale_bounds)

    def _encode(self, name, seq, mask, width, pool, proj) -> torch.Tensor:
        seq = seq.to(device=proj.weight.device, dtype=proj.weight.dtype)
        mask = _check(f"PooledHead ({name})", seq, mask, width)
        pooled = pool_tokens(seq, mask, "mean") if pool == "mean" else seq[:, 0]
        return F.normalize(proj(pooled), dim=-1)

    def encode_image(self, seq: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self._encode("image", seq, mask, self.image_dim, self.image_pool, self.image_proj)

    def encode_text(self, seq: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self._encode("text", seq, mask, self.text_dim, self.text_pool, self.text_proj)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return _pair_loss(self, batch)

    def param_groups(self, weight_decay: float = 0.1) -> list[dict]:
        return _param_groups(self, weight_decay)


def _trim(seq: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Cut a batch sliced from globally padded tensors down to its own longest item (saves B x T x K work)."""
    if mask is None:
        return seq, None
    return trim_padding(seq, mask.bool())


def _pair_loss(head, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    missing = {"image", "text"} - set(batch)
    if missing:
        raise KeyError(f"the batch lacks {sorted(missing)}: pass sequences as 'image'/'text' and masks as "
                       "'image_mask'/'text_mask' (lib.core.sequences.SequenceFeatures.padded())")
    image = head.encode_image(*_trim(batch["image"], batch.get("image_mask")))
    text = head.encode_text(*_trim(batch["text"], batch.get("text_mask")))
    return head.criterion(image, text)


def _param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Matrices (codebook, Linear weights) decay; vectors and scalars (LayerNorm, biases, log scale) do not."""
    params = [p for p in module.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def codebook_usage(weights: torch.Tensor) -> torch.Tensor:
    """For each code, the fraction of items (rows of ``weights``) that give it a non-zero weight."""
    return (weights > 0).float().mean(dim=0)


@torch.no_grad()
def embed_sequences(encode, seqs, *, batch_size: int = 256, device: str | torch.device = "cpu") -> torch.Tensor:
    """``encode(x, mask)`` over a :class:`lib.core.sequences.SequenceFeatures` in batches -> ``(N, d)`` on CPU.

    E.g. ``embed_sequences(head.encode_text, prompt_seqs)``; call ``head.eval()`` first."""
    out = [encode(x, mask).float().cpu() for _, x, mask in seqs.batches(batch_size, device=device)]
    return torch.cat(out) if out else torch.empty(0)


@torch.no_grad()
def collect_codes(head: FDTHead, modality: str, seqs, *, batch_size: int = 256,
                  device: str | torch.device = "cpu") -> CodeWeights:
    """:meth:`FDTHead.codes` over a whole :class:`lib.core.sequences.SequenceFeatures`, on CPU.

    ``argmax`` indexes each item's own tokens. Holds ``N x num_codes`` floats three times: for test sets.
    See notebooks/fdt.py,
    section "Codebook usage".
    """
    head.eval()
    parts = [head.codes(modality, x, mask) for _, x, mask in seqs.batches(batch_size, device=device)]
    return CodeWeights(*(torch.cat([getattr(p, f).float().cpu() if f != "argmax" else p.argmax.cpu() for p in parts])
                         for f in ("weights", "relevance", "argmax", "embedding")))


def weight_encoder(head: FDTHead, modality: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``encode(x, mask)`` that returns the L2-normalised code **weights** ``(B, num_codes)`` instead of the
    embedding: the paper's test of grounding, "weights as features" (Table 8: zero-shot average 32.4 with
    sparsemax, 5.2 with softmax)."""
    return lambda x, mask: F.normalize(head.codes(modality, x, mask).weights, dim=-1)


@torch.no_grad()
def token_code_scores(head: FDTHead, modality: str, seq: torch.Tensor, mask: torch.Tensor | None,
                      codes: torch.Tensor | list[int]) -> torch.Tensor:
    """How strongly each token matches each of ``codes``: ``scale * <q_j, c_i>``, ``(B, T, len(codes))``; padding NaN.

    The paper's qualitative figure; see notebooks/fdt.py,
    section "Which patches and words share a code"."""
    width = head.image_dim if modality == "image" else head.text_dim
    seq = seq.to(device=head.codebook.device, dtype=head.codebook.dtype)
    mask = _check(f"token_code_scores ({modality})", seq, mask, width)
    projector = head.image_projector if modality == "image" else head.text_projector
    codes = torch.as_tensor(codes, dtype=torch.long, device=head.codebook.device)
    scores = projector(seq) @ head.codebook[codes].T * head.scale
    return scores.float().masked_fill(~mask.unsqueeze(-1), float("nan"))

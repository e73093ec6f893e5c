"""FDT: images and texts described by one shared, learned codebook ("Finite Discrete Tokens").

Chen et al., CVPR 2023, *Revisiting Multimodal Representation in Contrastive Learning: From Patch and
Token Embeddings to Finite Discrete Tokens*. Instead of comparing a pooled image vector with a pooled
text vector, both sides are rewritten in the same vocabulary of ``K`` learnable codes ``C (K x d)``:

1. a per-modality projector maps every patch / token feature ``x_j`` to a query ``q_j``;
2. the relevance of code ``i`` is its best match over the patches / tokens, ``r_i = max_j <q_j, c_i>``
   (the paper's Eqs. 4 and 6; padding tokens excluded);
3. the weights are ``w = sparsemax(r)`` (Eq. 8; softmax, Eqs. 5 and 7, is the paper's ablation), so an
   item can use only some of the codes;
4. the embedding is ``normalize(w @ C)`` (Eqs. 9 and 10), trained with CLIP's symmetric InfoNCE and a
   learnable logit scale.

See notebooks/fdt.py, sections "The FDT head" and "What the official code does, measured". In this book
the patch and token features come from frozen encoders (``lib.core.features.image_tokens`` /
``text_tokens``); only the projectors, the codebook and the logit scale are trained.

Official code (github.com/yuxiaochen1103/FDT at ``ccf69830``, ``prototype/model/clip_fdt.py``,
``Query_model``; ``example/clip_fdt/config_cc3m.yaml`` and ``train_solver.py``) versus the paper, all
selectable here (``OFFICIAL`` / ``PAPER`` below collect them):

* image queries: the code queries the **patch tokens only** (``dense_feat = x[:, 1:, :]``,
  ``visual_transformer.py`` L72: no CLS token, before ``ln_post``); the text side queries every token;
* projector: paper "a fully-connected layer with GELU activation" (``"fc_gelu"``); code
  LayerNorm-Linear-GELU-LayerNorm-Linear (``"ln_mlp"``, ``q_map`` L47-53);
* the dot products are divided by ``sqrt(d)`` (L84) and then by a temperature of 1000 (L98; config
  ``sd_temperature: 1000``; its "decay" has weight 1, so it never changes); neither is in the paper;
* padding: the code multiplies the padded tokens' logits by 0 instead of excluding them, so padding
  contributes a logit of exactly 0 to the max: a code whose best real token scores below 0 gets
  relevance 0 in a padded caption but a negative relevance in an unpadded one (``padding="zero"``);
* the log logit scale is clamped to [3, 6] around every optimiser step (``train_solver.py`` L339-340,
  L355-356) and the scale ``exp(p)`` capped at 100 in the forward (``clip_fdt.py`` L307): an effective
  scale in [e^3 = 20.1, 100]; the paper gives no value or clamp for its temperature
  (``log_scale_bounds``, :class:`lib.nn.losses.ClipLoss`);
* the loss averages the two InfoNCE directions (``loss.py`` L44-46), the paper's Eq. 11 sums them (a
  factor 2 on the loss and its gradients, which Adam's updates hardly see: they are invariant to a
  constant gradient scale up to ``eps``);
* codebook initialised ``randn`` (std 1), weight decay 0.1 on it (LayerNorm, biases, logit scale 0).

Precision: the relevance is cast to float32 before the sparsemax/softmax. Under bf16 autocast the
matrix products run in bfloat16, and a sparsemax computed in bfloat16 over 16,384 codes has a cumulative
sum whose rounding (spacing 0.125 at 16) moves its threshold: the weights then miss a sum of 1 by up
to a few percent. In float32 they are a proper distribution whatever the precision of the products before.
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

    ``padding="mask"``: padded tokens are set to ``-inf`` before the max (they never win).
    ``padding="zero"``: their logits are multiplied by 0 (official code), so they take part in the max
    with a logit of 0 and the returned index may point at a padded token.
    The ``B x T x K`` logits exist one chunk of rows at a time (at most :data:`MAX_LOGITS` floats: a
    training batch of 4,096 x 256 patches x 16,384 codes would be 69 GB in float32 at once); autograd keeps
    only the queries, the codebook and the argmax indices, so the backward pass is chunked the same way.
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

    Under bf16 autocast the relevance comes out of a bfloat16 matrix product; a sparsemax in bfloat16 over
    16,384 codes sums its sorted scores with a spacing of 0.125 near 16 and misplaces its threshold, so
    the weights miss a sum of 1 by up to a few percent. The cast (and autocast switched off for this step) keeps
    the weights a distribution and equal to those of a float32 relevance.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting {weighting!r} is not one of {WEIGHTINGS}")
    with torch.autocast(device_type=r.device.type, enabled=False):
        r = r.float()
        return sparsemax(r, dim=-1) if weighting == "sparsemax" else torch.softmax(r, dim=-1)


@dataclass
class CodeWeights:
    """What an FDT encoder did for a batch, for analysis (codebook usage, which patch/word fires a code).

    ``weights`` (B, K): sparsemax/softmax of ``relevance`` (B, K); ``argmax`` (B, K): the token index
    (into the batch's sequence, padding included) whose query matched each code best; ``embedding``
    (B, d): ``normalize(weights @ codebook)``.
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

    ``num_codes x code_dim`` is 16,384 x 512 in the paper. ``weighting``: ``sparsemax`` (FDT) or
    ``softmax`` (ablation); both see ``relevance * (1/sqrt(code_dim) if scaled_dot) / temperature``, cast
    to float32 (:func:`code_weights`). ``log_scale_bounds``: the official ``(3, 6)`` clamp of the log logit
    scale (:class:`lib.nn.losses.ClipLoss`), or None (the paper states none).
    ``padding``: ``"mask"`` (padding excluded, as the paper's max over tokens means) or ``"zero"``
    (official code). ``temperature`` is a plain attribute, so a schedule may change it during training.
    Inputs are ``(B, T, dim)`` sequences with ``(B, T)`` bool masks (True = real token); see
    :mod:`lib.core.sequences`. ``loss(batch)`` makes it a method for ``lib.core.train.fit``. See notebooks/fdt.py,
    section "The FDT head".
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

    For evaluation (zero-shot prompts, retrieval): e.g. ``embed_sequences(head.encode_text, prompt_seqs)``.
    Call ``head.eval()`` first.
    """
    out = [encode(x, mask).float().cpu() for _, x, mask in seqs.batches(batch_size, device=device)]
    return torch.cat(out) if out else torch.empty(0)


@torch.no_grad()
def collect_codes(head: FDTHead, modality: str, seqs, *, batch_size: int = 256,
                  device: str | torch.device = "cpu") -> CodeWeights:
    """:meth:`FDTHead.codes` over a whole :class:`lib.core.sequences.SequenceFeatures`, on CPU.

    ``argmax`` indexes each item's own tokens (padding is at the end of every row). The result holds
    ``N x num_codes`` floats three times: fine for test sets, not for 15M pairs. See notebooks/fdt.py,
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
    """How strongly each token matches each of ``codes``: ``scale * <q_j, c_i>``, ``(B, T, len(codes))``.

    The max over ``j`` of these scores is the code's relevance; padded tokens are NaN. This is the
    paper's qualitative figure (which patches and which words fire the same code); see notebooks/fdt.py,
    section "Which patches and words share a code".
    """
    width = head.image_dim if modality == "image" else head.text_dim
    seq = seq.to(device=head.codebook.device, dtype=head.codebook.dtype)
    mask = _check(f"token_code_scores ({modality})", seq, mask, width)
    projector = head.image_projector if modality == "image" else head.text_projector
    codes = torch.as_tensor(codes, dtype=torch.long, device=head.codebook.device)
    scores = projector(seq) @ head.codebook[codes].T * head.scale
    return scores.float().masked_fill(~mask.unsqueeze(-1), float("nan"))

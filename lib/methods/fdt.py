"""FDT: images and texts described by one shared, learned codebook ("Finite Discrete Tokens").

Chen et al., CVPR 2023, "Revisiting Multimodal Representation in Contrastive Learning: From Patch and
Token Embeddings to Finite Discrete Tokens". Instead of comparing a pooled image vector with a pooled
text vector, both sides are rewritten in the same vocabulary of ``K`` learnable codes ``C (K x d)``:

1. a per-modality projector maps every patch / token feature ``x_j`` to a query ``q_j``;
2. the relevance of code ``i`` is its best match over the patches / tokens, ``r_i = max_j <q_j, c_i>``
   (padding tokens excluded);
3. the weights are ``w = sparsemax(r)`` (softmax is the paper's ablation: weights used as features,
   32.4 vs 5.2 zero-shot), so an item uses only a few codes;
4. the embedding is ``normalize(w @ C)``, trained with the symmetric InfoNCE of CLIP and a learnable,
   clamped logit scale.

See notebooks/fdt.py, sections "The FDT head" and "What the official code does, measured". In a frozen-feature
book the patch and token features come from frozen encoders through :mod:`lib.core.sequences`; only the
projectors, the codebook and the logit scale are trained.

Official code (github.com/yuxiaochen1103/FDT, ``prototype/model/clip_fdt.py``, ``Query_model``) versus
the paper, all selectable here (``OFFICIAL`` / ``PAPER`` below collect them):

* projector: paper FC + GELU (``"fc_gelu"``); code LayerNorm-Linear-GELU-LayerNorm-Linear (``"ln_mlp"``);
* the dot products are divided by ``sqrt(d)`` and then by a temperature of 1000 (config
  ``sd_temperature: 1000``; its "decay" has weight 1, so it never changes);
* padding: the code multiplies the padded tokens' logits by 0 instead of excluding them, so padding
  contributes a logit of exactly 0 to the max: a code whose best real token scores below 0 gets
  relevance 0 in a padded caption but a negative relevance in an unpadded one (``padding="zero"``);
* codebook initialised ``randn`` (std 1), weight decay 0.1 on it (LayerNorm, biases, logit scale 0);
  logit scale ``exp(p)`` with ``p`` initialised at log(1/0.07) and clamped at 100.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.encoders import pool as pool_tokens
from lib.nn.losses import ClipLoss
from lib.nn.sparsemax import sparsemax

__all__ = [
    "PROJECTORS", "WEIGHTINGS", "PADDINGS", "PAPER", "OFFICIAL", "make_projector", "relevance",
    "CodeWeights", "FDTHead", "PooledHead", "codebook_usage", "embed_sequences",
]

PROJECTORS = ("fc_gelu", "ln_mlp")
WEIGHTINGS = ("sparsemax", "softmax")
PADDINGS = ("mask", "zero")
PAPER = dict(projector="fc_gelu", scaled_dot=False, temperature=1.0, padding="mask")
OFFICIAL = dict(projector="ln_mlp", scaled_dot=True, temperature=1000.0, padding="zero")


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
    Memory is ``B x T x K`` floats (a batch of 256 x 65 patches x 16,384 codes is 1.1 GB in float32).
    """
    if padding not in PADDINGS:
        raise ValueError(f"padding {padding!r} is not one of {PADDINGS}")
    logits = (queries @ codebook.T) * scale  # (B, T, K)
    if padding == "mask":
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    else:
        logits = logits * mask.unsqueeze(-1).to(logits.dtype)
    r, index = logits.max(dim=1)
    return r, index


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
    ``softmax`` (ablation); both see ``relevance * (1/sqrt(code_dim) if scaled_dot) / temperature``.
    ``padding``: ``"mask"`` (padding excluded, as the paper's max over tokens means) or ``"zero"``
    (official code). ``temperature`` is a plain attribute, so a schedule may change it during training.
    Inputs are ``(B, T, dim)`` sequences with ``(B, T)`` bool masks (True = real token); see
    :mod:`lib.core.sequences`. ``loss(batch)`` makes it a method for ``lib.core.train.fit``. See notebooks/fdt.py,
    section "The FDT head".
    """

    def __init__(self, image_dim: int, text_dim: int, num_codes: int = 16384, code_dim: int = 512, *,
                 projector: str = "fc_gelu", weighting: str = "sparsemax", temperature: float = 1.0,
                 scaled_dot: bool = False, padding: str = "mask", init_temperature: float = 0.07,
                 max_scale: float = 100.0, codebook_std: float = 1.0) -> None:
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
        self.criterion = ClipLoss(temperature=init_temperature, learnable=True, max_scale=max_scale)

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
        weights = sparsemax(r, dim=-1) if self.weighting == "sparsemax" else torch.softmax(r, dim=-1)
        return CodeWeights(weights, r, index, F.normalize(weights @ self.codebook, dim=-1))

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
    start with a real token). Same inputs, loss and ``encode_*`` interface as :class:`FDTHead`, so the two
    differ only in the codebook bottleneck. See notebooks/fdt.py, section "Baseline: pooled features".
    """

    def __init__(self, image_dim: int, text_dim: int, embed_dim: int = 512, *, image_pool: str = "mean",
                 text_pool: str = "mean", init_temperature: float = 0.07, max_scale: float = 100.0) -> None:
        super().__init__()
        for pool in (image_pool, text_pool):
            if pool not in ("mean", "first"):
                raise ValueError(f"pooling {pool!r} is not one of ('mean', 'first')")
        self.image_dim, self.text_dim, self.embed_dim = int(image_dim), int(text_dim), int(embed_dim)
        self.image_pool, self.text_pool = image_pool, text_pool
        self.image_proj = nn.Linear(self.image_dim, self.embed_dim)
        self.text_proj = nn.Linear(self.text_dim, self.embed_dim)
        self.criterion = ClipLoss(temperature=init_temperature, learnable=True, max_scale=max_scale)

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
    from lib.core.sequences import trim_padding

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



# ------------------------------------------------------------------------------------------ the chapter
# Config schema and evaluation helpers of notebooks/fdt.py (validated with lib.core.config, like lib.chapters.viterb).
from dataclasses import field  # noqa: E402
from typing import Callable, Literal  # noqa: E402

from lib.core.config import DataConfig, StoreConfig, TextModelConfig, TrainSettings, VisionModelConfig  # noqa: E402

__all__ += ["FDTHeadConfig", "PooledHeadConfig", "Variant", "FDTConfig", "load_config", "build_fdt", "build_pooled",
            "collect_codes", "weight_encoder", "zero_shot_metrics", "retrieval", "token_code_scores"]


@dataclass(frozen=True)
class FDTHeadConfig:
    """The FDT head's settings; the field names are :class:`FDTHead`'s keyword arguments."""

    num_codes: int = 16384
    code_dim: int = 512
    projector: Literal["fc_gelu", "ln_mlp"] = "ln_mlp"
    weighting: Literal["sparsemax", "softmax"] = "sparsemax"
    temperature: float = 1000.0
    scaled_dot: bool = True
    padding: Literal["mask", "zero"] = "mask"
    init_temperature: float = 0.07
    max_scale: float = 100.0
    codebook_std: float = 1.0

    def __post_init__(self) -> None:
        for name in ("num_codes", "code_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.codebook_std <= 0 or self.max_scale <= 0:
            raise ValueError("codebook_std and max_scale must be positive numbers")


@dataclass(frozen=True)
class PooledHeadConfig:
    """The pooled baseline (:class:`PooledHead`): one linear map per modality on pooled tokens."""

    embed_dim: int = 512
    image_pool: Literal["mean", "first"] = "first"
    text_pool: Literal["mean", "first"] = "mean"
    init_temperature: float = 0.07
    max_scale: float = 100.0


@dataclass(frozen=True)
class Variant:
    """An FDT ablation: the main head with the named fields changed, trained on the first ``seeds`` seeds."""

    name: str
    seeds: int = 1
    projector: Literal["fc_gelu", "ln_mlp"] | None = None
    weighting: Literal["sparsemax", "softmax"] | None = None
    temperature: float | None = None
    scaled_dot: bool | None = None
    padding: Literal["mask", "zero"] | None = None

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"variant {self.name!r}: seeds must be >= 1, got {self.seeds}")
        if not self.changes():
            raise ValueError(f"variant {self.name!r} changes nothing: name at least one FDT head field")

    def changes(self) -> dict:
        """The head fields this variant sets (those not left null)."""
        return {k: v for k, v in (("projector", self.projector), ("weighting", self.weighting),
                                  ("temperature", self.temperature), ("scaled_dot", self.scaled_dot),
                                  ("padding", self.padding)) if v is not None}


@dataclass(frozen=True)
class FDTConfig:
    """``notebooks/configs/fdt.yaml``, validated field by field on load (``lib.core.config``)."""

    data: DataConfig
    vision: VisionModelConfig
    text: TextModelConfig
    fdt: FDTHeadConfig = field(default_factory=FDTHeadConfig)
    baseline: PooledHeadConfig = field(default_factory=PooledHeadConfig)
    variants: tuple[Variant, ...] = ()
    image_tokens: Literal["all", "patches"] = "all"  # "all": DINOv2's CLS first, then the patch grid
    train: TrainSettings = field(default_factory=TrainSettings)
    store: StoreConfig = field(default_factory=StoreConfig)
    eval_batch_size: int = 256
    device: str = "cpu"
    seeds: tuple[int, ...] = (0,)


def load_config(name: str, overrides: dict | None = None) -> FDTConfig:
    """``small`` / ``full`` of ``notebooks/configs/fdt.yaml`` (or a YAML path), validated."""
    from lib.core import config as configs

    return configs.load("fdt", name, FDTConfig, overrides)


def build_fdt(cfg: FDTHeadConfig, image_dim: int, text_dim: int, **changes) -> FDTHead:
    """An :class:`FDTHead` from its config, with ``changes`` (e.g. ``Variant.changes()``) applied."""
    import dataclasses

    return FDTHead(image_dim, text_dim, **{**dataclasses.asdict(cfg), **changes})


def build_pooled(cfg: PooledHeadConfig, image_dim: int, text_dim: int) -> PooledHead:
    import dataclasses

    return PooledHead(image_dim, text_dim, **dataclasses.asdict(cfg))


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
    embedding: the paper's "weights as features" test of grounding (sparsemax 32.4 vs softmax 5.2)."""
    return lambda x, mask: F.normalize(head.codes(modality, x, mask).weights, dim=-1)


@torch.no_grad()
def zero_shot_metrics(encode_image, encode_text, image_seqs, prompt_seqs, labelled, *, batch_size: int = 256,
                      device: str | torch.device = "cpu") -> dict[str, float]:
    """acc@1, acc@5, mean per-class recall of a zero-shot classifier built from ``prompt_seqs``.

    ``prompt_seqs`` holds the token features of ``lib.methods.sharelock.prompts(labelled)`` (class-major: every
    template of class 0, then class 1, ...); ``encode_*(x, mask)`` are a head's encoders (or
    :func:`weight_encoder`). Prototypes follow CLIP (``lib.core.evaluate.zero_shot_classifier``).
    """
    from lib.core.evaluate import classification_metrics, zero_shot_classifier

    texts = [t.replace("{c}", c) for c in labelled.classnames for t in labelled.templates]
    if len(prompt_seqs) != len(texts):
        raise ValueError(f"{len(prompt_seqs)} prompt sequences for {len(texts)} prompts of {labelled.name}: "
                         "compute them from lib.methods.sharelock.prompts(labelled)")
    prompt_emb = embed_sequences(encode_text, prompt_seqs, batch_size=batch_size, device=device)
    row = {text: i for i, text in enumerate(texts)}
    classifier = zero_shot_classifier(lambda batch: prompt_emb[[row[t] for t in batch]], labelled.classnames,
                                      labelled.templates)
    image_emb = embed_sequences(encode_image, image_seqs, batch_size=batch_size, device=device)
    return classification_metrics(image_emb, classifier, torch.as_tensor(labelled.labels))


@torch.no_grad()
def retrieval(encode_image, encode_text, image_seqs, caption_seqs, *, batch_size: int = 256,
              device: str | torch.device = "cpu") -> dict[str, float]:
    """Image <-> caption R@1/5/10, one caption per image (row i pairs with row i)."""
    from lib.core.evaluate import retrieval_metrics

    image_emb = embed_sequences(encode_image, image_seqs, batch_size=batch_size, device=device)
    text_emb = embed_sequences(encode_text, caption_seqs, batch_size=batch_size, device=device)
    return retrieval_metrics(image_emb, text_emb, torch.arange(len(image_emb)))


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
    return scores.masked_fill(~mask.unsqueeze(-1), float("nan"))

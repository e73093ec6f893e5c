"""LiT, ShareLock's baseline: the image tower locked, a *pretrained* text encoder tuned end to end.

It differs from ShareLock in the text side only (the paper, §6.1: pretrained BERT weights): an encoder and a
linear projection train against the same locked image feature. Input: token ids, right-padded with the pad id
(:func:`token_ids`). See notebooks/sharelock.py, section "The LiT
baseline".
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.config import LossConfig
from lib.core.encoders import pool
from lib.nn.losses import ClipLoss

__all__ = ["LiT", "token_ids"]


def token_ids(tokenizer, texts: Sequence[str], max_length: int = 77) -> torch.Tensor:
    """``(N, L)`` int64 token ids of ``texts``, right-padded with the tokenizer's pad id to the longest text.

    Refused for a tokenizer whose pad id is also a real token of the texts (decoders that pad with their end token),
    since the mask is read from the ids."""
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token: LiT reads its attention mask from the padded ids")
    tokenizer.padding_side = "right"
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"].bool()
    if bool((ids[mask] == tokenizer.pad_token_id).any()):
        raise ValueError(f"the tokenizer's pad id {tokenizer.pad_token_id} is also a real token of these texts; "
                         "LiT needs an encoder whose pad token is its own")
    return ids.to(torch.int64)


class LiT(nn.Module):
    """Locked image features (L2-normalised, no head) against a trained text encoder + linear projection.

    ``text_model``: a ``transformers`` encoder (``AutoModel``), trained with everything else. ``pooling``: how its
    token states become one vector (``mean`` for sentence-transformers models, ``cls`` for BERT). ``chunk``: rows per
    forward pass outside training (a zero-shot set's prompts). ``bucket``: rows per encoder call (:meth:`_encode`)."""

    def __init__(self, text_model: nn.Module, image_dim: int, loss: LossConfig, *, pooling: str = "mean",
                 pad_id: int = 0, chunk: int = 512, bucket: int = 64) -> None:
        super().__init__()
        self.text_model, self.projection = text_model, nn.Linear(int(text_model.config.hidden_size), int(image_dim))
        self.image_dim, self.pooling, self.pad_id, self.chunk = int(image_dim), pooling, int(pad_id), int(chunk)
        self.bucket = int(bucket)
        self.criterion = ClipLoss(temperature=loss.temperature, learnable=loss.learnable)

    def _encode(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of right-padded ids, shortest first in groups of ``bucket``, each cut to its longest text: names are
        ~4.5 word pieces but a batch's longest ~14, so one call computes mostly padding (2.4x slower, measured).
        Masked attention makes the result the one-call result up to rounding (tests/test_lit.py)."""
        mask = ids != self.pad_id
        lengths = (mask * torch.arange(1, ids.shape[1] + 1, device=ids.device)).amax(1).clamp(min=1)
        order, parts = torch.argsort(lengths, stable=True), []
        for rows in order.split(self.bucket):
            part_ids, part_mask = ids[rows, :int(lengths[rows].max())], mask[rows, :int(lengths[rows].max())]
            hidden = self.text_model(input_ids=part_ids, attention_mask=part_mask.long()).last_hidden_state
            parts.append(pool(hidden, part_mask, self.pooling))
        return F.normalize(self.projection(torch.cat(parts)[torch.argsort(order)]).float(), dim=-1)

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dtype not in (torch.int64, torch.int32) or ids.ndim != 2:
            raise ValueError(f"LiT reads token ids (N, L) of an integer dtype (lib.methods.lit.token_ids), got a "
                             f"{tuple(ids.shape)} {ids.dtype} tensor: cached text features belong to a head, not LiT")
        ids = ids.to(self.projection.weight.device)
        if self.training or len(ids) <= self.chunk:
            return self._encode(ids)
        return torch.cat([self._encode(ids[i:i + self.chunk]) for i in range(0, len(ids), self.chunk)])

    def embed_image(self, image_features: torch.Tensor) -> torch.Tensor:
        if image_features.shape[-1] != self.image_dim:
            raise ValueError(f"LiT was built for image features of width {self.image_dim}, got "
                             f"{image_features.shape[-1]}: the projection belongs to another vision model")
        return F.normalize(image_features.to(torch.float32), dim=-1)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.criterion(self.embed_image(batch["image"]), self.embed_text(batch["text"]))

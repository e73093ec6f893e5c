"""A trained frozen-feature model as a CLIP-like object (``encode_image``, ``encode_text``, tokenizer).

Why: CLIP_benchmark and open_clip zero-shot scripts need only these three, so they evaluate a ShareLock model
unchanged. See ``notebooks/sharelock.py``, section
"Using the trained model".
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from lib.core.encoders import TextEncoder, VisionEncoder, pool, to_rgb


class FrozenFeatureCLIP(nn.Module):
    def __init__(self, vision: VisionEncoder, text: TextEncoder, method: nn.Module):
        super().__init__()
        self.vision, self.text, self.method = vision, text, method
        self.method.eval()
        from torchvision.transforms import Compose

        # What CLIP_benchmark calls ``transform``: the same RGB flattening as ``VisionEncoder.encode``.
        self.preprocess = Compose([to_rgb, vision.transform])

    def tokenizer(self, texts: str | Sequence[str]):
        """Tokenised, padded texts (a ``BatchEncoding``: has ``.to(device)``, as CLIP_benchmark expects)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        return self.text.tokenizer(
            texts, padding=True, truncation=True, max_length=self.text.max_length, return_tensors="pt"
        )

    @torch.no_grad()
    def encode_image(self, images: torch.Tensor, normalize: bool = True) -> torch.Tensor:
        weight = next(self.vision.model.parameters())  # inputs follow the encoder, wherever the caller made them
        features = self.vision._forward(images.to(device=weight.device, dtype=weight.dtype)).float()
        embedded = self.method.embed_image(features)
        return F.normalize(embedded, dim=-1) if normalize else embedded

    @torch.no_grad()
    def encode_text(self, tokens, normalize: bool = True) -> torch.Tensor:
        layer = self.text.layer
        device = next(self.text.model.parameters()).device
        tokens = {name: value.to(device) for name, value in tokens.items()}
        outputs = self.text.model(**tokens, output_hidden_states=layer != -1)
        hidden = outputs.last_hidden_state if layer == -1 else outputs.hidden_states[layer]
        features = pool(hidden, tokens["attention_mask"], self.text.pooling).float()
        embedded = self.method.embed_text(features)
        return F.normalize(embedded, dim=-1) if normalize else embedded

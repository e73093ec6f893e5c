"""FDT as the paper trains it: the image and text encoders learn through the codebook, from random weights.

Chen et al. (CVPR 2023), App. A: "We train ViT-B/32 based models", input 224 x 224, at most 77 language tokens, the
patch and token features of the encoders' last layer projected into the FDT space. The book's small and medium
configs read frozen, cached token sequences instead (:class:`lib.methods.fdt.FDTHead` alone); here open_clip's own
model config (``ViT-B-32``: a 12-layer ViT at width 768 and CLIP's 12-layer text transformer at width 512) is built
with token outputs, randomly initialised, in front of the same head, so one implementation of FDT serves both. The
image side reads the **patch tokens only**, as the official code (``x[:, 1:, :]``); the text side reads every real
token (the attention mask ends at the end-of-text token). The baseline, "CLIP", is the same towers read the CLIP
way: open_clip's pooled and projected outputs (the class token, the end-of-text token) under the same loss. See
notebooks/fdt.py, section "Paper, official code, this book".
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lib.nn.losses import ClipLoss
from lib.nn.towers import ImageTowerConfig, TextTowerConfig, tower_input

__all__ = ["SequenceTowers", "EndToEndFDT"]


class SequenceTowers(nn.Module):
    """open_clip's vision and text transformers of ``image.open_clip_model``, randomly initialised, returning token
    sequences with masks (and, for the CLIP baseline, their pooled embeddings). ``image.vit_width`` /
    ``vit_layers`` and ``text.width`` / ``depth`` / ``heads`` / ``context`` override the model config's (a
    rehearsal at tiny width); ``text.tokenizer``'s vocabulary and ``eos_id`` replace CLIP's BPE."""

    def __init__(self, image: ImageTowerConfig, text: TextTowerConfig, vocab_size: int, eos_id: int) -> None:
        super().__init__()
        import open_clip
        from open_clip.model import CLIPTextCfg, CLIPVisionCfg, _build_text_tower, _build_vision_tower

        if image.kind != "open_clip" or text.kind != "open_clip":
            raise ValueError("FDT's towers are open_clip's: set image_tower.kind and text_tower.kind to 'open_clip' "
                             f"(got {image.kind!r} and {text.kind!r})")
        config = open_clip.get_model_config(image.open_clip_model)
        if config is None:
            raise ValueError(f"open_clip has no model config {image.open_clip_model!r}; open_clip.list_models() "
                             "names them")
        vision = {**config["vision_cfg"], "image_size": image.image_size, "output_tokens": True}
        vision.update({k: v for k, v in (("width", image.vit_width), ("layers", image.vit_layers)) if v is not None})
        words = {**config["text_cfg"], "vocab_size": vocab_size, "context_length": text.context, "width": text.width,
                 "heads": text.heads, "layers": text.depth, "pool_type": "eos", "eos_id": int(eos_id),
                 "output_tokens": True}
        self.visual = _build_vision_tower(config["embed_dim"], CLIPVisionCfg(**vision))
        self.text = _build_text_tower(config["embed_dim"], CLIPTextCfg(**words))
        self.visual.set_grad_checkpointing(image.grad_checkpointing)
        self.text.set_grad_checkpointing(text.grad_checkpointing)
        self.eos_id, self.context = int(eos_id), text.context
        self.image_width, self.text_width = vision["width"], text.width

    def image(self, pixels_u8: torch.Tensor, augmented: bool = False):
        """``(pooled (B, embed), patch tokens (B, P, width), mask (B, P))`` of uint8 pixels."""
        pooled, tokens = self.visual(tower_input(pixels_u8, self.visual, augmented=augmented))
        return pooled, tokens, torch.ones(tokens.shape[:2], dtype=torch.bool, device=tokens.device)

    def words(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """``(pooled (B, embed), token states (B, T, width), mask (B, T))``: the mask keeps the real tokens, the
        end-of-text token included; with the causal attention the padding after it changes nothing before it."""
        if input_ids.shape[1] > self.context:
            raise ValueError(f"{input_ids.shape[1]} tokens exceed the text tower's context of {self.context}: "
                             "tokenize with the same context (lib.methods.three_towers.tokenize)")
        if not bool((input_ids == self.eos_id).any(dim=1).all()):
            raise ValueError(f"a text has no end-of-text token (id {self.eos_id}): tokenize with the tower's "
                             "tokenizer, which appends it (lib.methods.three_towers.tokenize)")
        device, short = next(self.text.parameters()).device, self.context - input_ids.shape[1]
        if short:  # open_clip's causal mask is built for the whole context
            input_ids, attention_mask = F.pad(input_ids, (0, short)), F.pad(attention_mask, (0, short))
        pooled, tokens = self.text(input_ids.to(device))
        return pooled, tokens, attention_mask.to(device=device, dtype=torch.bool)


class EndToEndFDT(nn.Module):
    """FDT (``head``: a :class:`lib.methods.fdt.FDTHead`, or any head with its ``encode_image`` / ``encode_text``
    over token sequences and masks, ``criterion``, ``image_dim`` and ``text_dim``, reading the towers' token
    sequences) or the CLIP baseline (``head=None``: the towers' pooled embeddings) trained end to end from uint8
    pixels and token ids, the batch of
    :func:`lib.core.train.fit` being ``{"pixels", "input_ids", "attention_mask"}``. ``augment``: Three Towers'
    random crop and flip while training (the paper uses DeCLIP's augmentation); ``chunk``: items per forward pass
    at test time."""

    def __init__(self, towers: SequenceTowers, head: nn.Module | None = None, *, init_temperature: float = 0.07,
                 log_scale_bounds: tuple[float, float] | None = None, augment: bool = True, chunk: int = 256) -> None:
        super().__init__()
        self.towers, self.head, self.augment, self.chunk = towers, head, augment, chunk
        if head is not None and (head.image_dim, head.text_dim) != (towers.image_width, towers.text_width):
            raise ValueError(f"the FDT head reads ({head.image_dim}, {head.text_dim})-wide tokens, the towers give "
                             f"({towers.image_width}, {towers.text_width}): build the head for the towers' widths")
        self.criterion = head.criterion if head is not None else ClipLoss(
            temperature=init_temperature, learnable=True, log_scale_bounds=log_scale_bounds)

    def _image(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        pooled, tokens, mask = self.towers.image(pixels_u8, augmented=self.training and self.augment)
        return F.normalize(pooled, dim=-1) if self.head is None else self.head.encode_image(tokens, mask)

    def _text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pooled, tokens, mask = self.towers.words(input_ids, attention_mask)
        return F.normalize(pooled, dim=-1) if self.head is None else self.head.encode_text(tokens, mask)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.criterion(self._image(batch["pixels"]), self._text(batch["input_ids"], batch["attention_mask"]))

    @torch.no_grad()
    def embed_image(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._image(pixels_u8[i:i + self.chunk]) for i in range(0, len(pixels_u8), self.chunk)])

    @torch.no_grad()
    def embed_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([self._text(input_ids[i:i + self.chunk], attention_mask[i:i + self.chunk])
                          for i in range(0, len(input_ids), self.chunk)])

    def param_groups(self, weight_decay: float = 0.1) -> list[dict]:
        """AdamW groups as open_clip and the official FDT code: decay on matrices (the codebook included), none on
        norms, biases, embeddings' scalars and the logit scale (every parameter of fewer than two dimensions)."""
        decay = [p for p in self.parameters() if p.requires_grad and p.ndim >= 2]
        rest = [p for p in self.parameters() if p.requires_grad and p.ndim < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

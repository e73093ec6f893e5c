"""Three Towers (Kossen et al., NeurIPS 2023): contrastive training of two towers with a frozen third tower.

Why this module exists: the paper has no official code, so this file is the reference implementation, each
equation beside the line that implements it. The baselines (``scratch``, ``lit``) and the ablations (loss
weight, leave-one-out, ``headless``) are options of :class:`ThreeTowers`; at test time only ``f`` and ``g``
remain (:meth:`ThreeTowers.export`).
See notebooks/three_towers.py, sections "The three towers" and "The loss, equation by equation".
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lib.core.config import LossConfig
from lib.nn.losses import ClipLoss
from lib.nn.towers import (
    BagTower, ConvTower, ImageTowerConfig, TextTower, TextTowerConfig, TimmTower, augment, build_image_tower,
    build_text_tower, normalise_pixels, tower_input,
)

__all__ = [
    "VARIANTS", "TERMS", "ImageTowerConfig", "TextTowerConfig", "ConvTower", "TimmTower", "TextTower", "BagTower",
    "build_image_tower", "build_text_tower", "Head", "ThreeTowers", "TwoTowerModel", "pixels", "normalise_pixels",
    "augment", "load_tokenizer", "CompactVocabulary", "end_of_text_id", "tokenize", "embed_in_batches", "zero_shot",
    "retrieval",
]

VARIANTS = ("scratch", "lit", "3t")
TERMS = ("fg", "fh", "gh")


# --------------------------------------------------------------------------------------------
# Inputs: pixels and tokens as resident tensors (the towers train on them, not on features)
# --------------------------------------------------------------------------------------------
def pixels(load_image, count: int, size: int) -> torch.Tensor:
    """``(N, 3, size, size)`` uint8 pixels of ``load_image(0..count-1)``, transparency on white.

    uint8 keeps 2,670 emoji at 32 px in 8 MB; :func:`normalise_pixels` maps them to floats per batch.
    """
    from PIL import Image

    from lib.core.encoders import to_rgb

    out = np.empty((count, size, size, 3), dtype=np.uint8)
    for i in range(count):
        image = to_rgb(load_image(i))
        out[i] = np.asarray(image.resize((size, size), Image.BICUBIC), dtype=np.uint8)
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def load_tokenizer(name: str):
    """A Hugging Face tokenizer; ``offline/...`` names resolve to the converted local folders."""
    from transformers import AutoTokenizer

    from lib.core.models import resolve

    return AutoTokenizer.from_pretrained(resolve(name, "transformers").load_path)


class CompactVocabulary:
    """A tokenizer whose ids are renumbered to the word pieces that occur in ``texts`` (and the special tokens).

    Why: AdamW decays every embedding row at every step, also those of pieces a run never reads; the model is
    the same up to never-trained rows. A piece outside ``texts`` maps to the unknown token."""

    def __init__(self, tokenizer, texts: Sequence[str]):
        seen = {i for ids in tokenizer(list(texts))["input_ids"] for i in ids}
        self.base = tokenizer
        self.kept = torch.tensor(sorted(seen | set(tokenizer.all_special_ids)))
        unknown = (int((self.kept == tokenizer.unk_token_id).nonzero()[0, 0])
                   if tokenizer.unk_token_id is not None else 0)
        self.lookup = torch.full((len(tokenizer),), unknown, dtype=torch.long)
        self.lookup[self.kept] = torch.arange(len(self.kept))
        self._padded: dict[tuple, dict[str, torch.Tensor]] = {}

    def padded(self, texts: Sequence[str], context: int) -> dict[str, torch.Tensor]:
        """:func:`tokenize`'s result, memoised for the zero-shot prompts, which every evaluation reads again."""
        key = (context, tuple(texts))
        if key not in self._padded:
            self._padded[key] = tokenize(self, texts, context)
        return self._padded[key]

    @property
    def vocab_size(self) -> int:
        return len(self.kept)

    def __call__(self, texts, **kwargs):
        encoded = self.base(texts, **kwargs)
        ids = encoded["input_ids"]
        encoded["input_ids"] = self.lookup[ids] if isinstance(ids, torch.Tensor) else \
            [self.lookup[torch.as_tensor(row, dtype=torch.long)].tolist() for row in ids]
        return encoded

    def decode(self, ids, **kwargs) -> str:
        return self.base.decode(self.kept[torch.as_tensor(ids, dtype=torch.long)].tolist(), **kwargs)


def end_of_text_id(tokenizer) -> int | None:
    """The id that ends every tokenised text (BERT's [SEP], else the eos token), in ``tokenizer``'s numbering
    (renumbered by a :class:`CompactVocabulary`): where CLIP's text transformer is read."""
    base = getattr(tokenizer, "base", tokenizer)
    found = base.sep_token_id if base.sep_token_id is not None else base.eos_token_id
    if found is None:
        return None
    return int(tokenizer.lookup[found]) if isinstance(tokenizer, CompactVocabulary) else int(found)


def tokenize(tokenizer, texts: Sequence[str], context: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` padded to ``context`` (texts longer than that are cut)."""
    encoded = tokenizer(list(texts), padding="max_length", truncation=True, max_length=context, return_tensors="pt")
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


# --------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------
class Head(nn.Module):
    """One of f_h, g_h, h_f, h_g: ``NL(x) = norm(linear(x))`` with ``linear: R^D -> R^D`` (paper §3)."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(x), dim=-1)


class ThreeTowers(nn.Module):
    """Scratch, LiT or 3T (with heads, or headless) as one trainable method for ``lib.core.train.fit``.

    A batch holds ``pixels`` (uint8), ``input_ids``, ``attention_mask`` and ``third`` (frozen p(I)). ``weight``: the
    loss weight w on the third-tower terms; ``terms``: a subset of ``("fg", "fh", "gh")`` (leave-one-out);
    ``headless``: no heads, so the test-time image embedding can be ``alpha * h + (1 - alpha) * f``.
    """

    def __init__(self, variant: str, *, third_dim: int, vocab_size: int, image_tower: ImageTowerConfig,
                 text_tower: TextTowerConfig, embed_dim: int, loss: LossConfig, weight: float = 1.0,
                 terms: Sequence[str] = TERMS, headless: bool = False, augment: bool = True,
                 eos_id: int | None = None):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
        unknown = set(terms) - set(TERMS)
        if unknown or not terms or len(set(terms)) != len(terms):
            raise ValueError(f"terms {list(terms)} must be a non-empty subset of {TERMS}")
        if weight < 0:
            raise ValueError(f"the loss weight w must be >= 0, got {weight}")
        self.variant, self.weight, self.terms = variant, float(weight), tuple(t for t in TERMS if t in terms)
        self.headless, self.augment, self.alpha = headless, augment, 0.0
        if variant != "lit":
            self.f = build_image_tower(image_tower, embed_dim)
        self.g = build_text_tower(text_tower, vocab_size, embed_dim, eos_id)  # eos_id: read by open_clip's tower
        if variant != "scratch":
            self.h = nn.Linear(third_dim, embed_dim)  # h(I) = linear(p(I)), linear: R^P -> R^D
        if variant == "3t" and not headless:
            self.f_h, self.g_h, self.h_f, self.h_g = (Head(embed_dim) for _ in range(4))
        # "All loss terms share a global temperature" (paper §3): learnable, init 0.07, scale clamped at 100.
        self.criterion = ClipLoss(temperature=loss.temperature, learnable=loss.learnable)

    # -- the three towers --
    def tower_f(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        """f(I), L2-normalised (paper §2: ||f(I)||_2 = 1)."""
        return F.normalize(self.f(tower_input(pixels_u8, self.f, augmented=self.training and self.augment)), dim=-1)

    def tower_g(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """g(T), L2-normalised (paper §2: ||g(T)||_2 = 1)."""
        return F.normalize(self.g(input_ids, attention_mask), dim=-1)

    def tower_h(self, third: torch.Tensor) -> torch.Tensor:
        """h(I) = linear(p(I)), not normalised (the paper normalises it only after a head, NL(h(I)))."""
        return self.h(third.detach().float())  # .detach(): p is frozen; nothing flows into the cached features

    def term_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each contrastive term of the variant, unweighted (the chapter plots them separately)."""
        text = self.tower_g(batch["input_ids"], batch["attention_mask"])
        if self.variant == "scratch":
            return {"fg": self.criterion(self.tower_f(batch["pixels"]), text)}
        third = self.tower_h(batch["third"])
        if self.variant == "lit":
            return {"hg": self.criterion(F.normalize(third, dim=-1), text)}
        image = self.tower_f(batch["pixels"])
        out = {}
        if "fg" in self.terms:  # L_f<->g (Eq. 1): the usual image-text term
            out["fg"] = self.criterion(image, text)
        if self.headless:  # heads fixed to identity (App. A.10): f, g and h meet in one space
            if "fh" in self.terms:
                out["fh"] = self.criterion(image, F.normalize(third, dim=-1))
            if "gh" in self.terms:
                out["gh"] = self.criterion(text, F.normalize(third, dim=-1))
            return out
        if "fh" in self.terms:  # L_fh<->hf: f_h(I) = NL(f(I)) against h_f(I) = NL(h(I))
            out["fh"] = self.criterion(self.f_h(image), self.h_f(third))
        if "gh" in self.terms:  # L_gh<->hg: g_h(T) = NL(g(T)) against h_g(I) = NL(h(I))
            out["gh"] = self.criterion(self.g_h(text), self.h_g(third))
        return out

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 4: ``(L_f<->g + L_fh<->hf + L_gh<->hg) / 3``.

        With the loss weight (§4.6, 'Loss weights'): ``(L_f<->g + w (L_fh<->hf + L_gh<->hg)) / 3``. Leaving
        one term out (App. A.11) averages the two that remain: ``(L_a + L_b) / 2``. In general: the
        weighted sum of the kept terms divided by their number.
        """
        terms = self.term_losses(batch)
        if self.variant != "3t":
            return next(iter(terms.values()))
        total = sum(value * (1.0 if name == "fg" else self.weight) for name, value in terms.items())
        return total / len(terms)

    def formula(self) -> str:
        """The loss this method optimises, as text (kept terms and weight read from the method)."""
        if self.variant != "3t":
            return "L = L(f↔g)" if self.variant == "scratch" else "L = L(h↔g)"
        symbols = {"fg": "L(f↔g)", "fh": "L(f_h↔h_f)", "gh": "L(g_h↔h_g)"}
        if self.headless:
            symbols.update(fh="L(f↔h)", gh="L(g↔h)")
        parts = [symbols[t] if t == "fg" or self.weight == 1 else f"{self.weight:g}·{symbols[t]}" for t in self.terms]
        return f"L = ({' + '.join(parts)}) / {len(parts)}"

    def parameter_counts(self) -> dict[str, tuple[int, int]]:
        """(trainable, frozen) parameter counts of each tower, head and the temperature (``criterion``)."""
        names = [n for n in ("f", "g", "h", "f_h", "g_h", "h_f", "h_g", "criterion") if hasattr(self, n)]
        return {n: (sum(p.numel() for p in getattr(self, n).parameters() if p.requires_grad),
                    sum(p.numel() for p in getattr(self, n).parameters() if not p.requires_grad)) for n in names}

    # -- test time: heads and h are dropped (except for LiT, whose image side *is* h) --
    @torch.no_grad()
    def embed_image(self, pixels_u8: torch.Tensor | None, third: torch.Tensor | None) -> torch.Tensor:
        if self.variant == "lit":
            return F.normalize(self.tower_h(third), dim=-1)
        image = self.tower_f(pixels_u8)
        if self.headless and self.alpha > 0:  # the convex combination alpha * h + (1 - alpha) * f (§4.5)
            mixed = self.alpha * F.normalize(self.tower_h(third), dim=-1) + (1 - self.alpha) * image
            return F.normalize(mixed, dim=-1)
        return image

    @torch.no_grad()
    def embed_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.tower_g(input_ids, attention_mask)

    def export(self) -> "TwoTowerModel":
        """What 3T ships: f and g only ("After training, the third tower is discarded", §3)."""
        if self.variant == "lit" or (self.headless and self.alpha > 0):
            raise ValueError("this variant needs the third tower at test time; export is for scratch and 3T")
        return TwoTowerModel(copy.deepcopy(self.f), copy.deepcopy(self.g))


class TwoTowerModel(nn.Module):
    """f and g alone, CLIP-like: ``encode_image(uint8 pixels)``, ``encode_text(ids, mask)``."""

    def __init__(self, f: nn.Module, g: nn.Module):
        super().__init__()
        self.f, self.g = f, g
        self.eval()

    @torch.no_grad()
    def encode_image(self, pixels_u8: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.f(tower_input(pixels_u8, self.f)), dim=-1)

    @torch.no_grad()
    def encode_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.g(input_ids, attention_mask), dim=-1)


# --------------------------------------------------------------------------------------------
# Evaluation on resident tensors (pixels, tokens and the third tower's cached features)
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def embed_in_batches(fn, *tensors: torch.Tensor | None, batch_size: int = 512) -> torch.Tensor:
    """``fn`` over ``batch_size`` rows at a time of every tensor (``None`` passes through), concatenated."""
    n = next(t for t in tensors if t is not None).shape[0]
    parts = [fn(*(None if t is None else t[i : i + batch_size] for t in tensors)) for i in range(0, n, batch_size)]
    return torch.cat(parts)


@torch.no_grad()
def zero_shot(method: ThreeTowers, images: dict[str, torch.Tensor | None], labelled, tokenizer,
              context: int) -> dict[str, float]:
    """acc1 / acc5 / mean per-class recall on one labelled set, with CLIP's prompt ensembling.

    ``images`` holds ``pixels`` and/or ``third`` (what the variant's :meth:`ThreeTowers.embed_image` reads);
    the prompts are tokenised here (the text tower reads tokens, not cached features).
    """
    from lib.core.evaluate import classification_metrics, zero_shot_classifier

    method.eval()

    def encode_text(texts: list[str]) -> torch.Tensor:
        tokens = tokenizer.padded(texts, context) if isinstance(tokenizer, CompactVocabulary) \
            else tokenize(tokenizer, texts, context)
        return embed_in_batches(method.embed_text, tokens["input_ids"], tokens["attention_mask"])

    classifier = zero_shot_classifier(encode_text, labelled.classnames, labelled.templates)
    image = embed_in_batches(method.embed_image, images.get("pixels"), images.get("third"))
    labels = torch.as_tensor(labelled.labels)
    return classification_metrics(image, classifier, labels, getattr(labelled, "groups", None))


@torch.no_grad()
def retrieval(method: ThreeTowers, images: dict[str, torch.Tensor | None],
              captions: dict[str, torch.Tensor]) -> dict[str, float]:
    """Image <-> caption R@1/5/10 with one caption per image (row i pairs with row i)."""
    from lib.core.evaluate import retrieval_metrics

    method.eval()
    image = embed_in_batches(method.embed_image, images.get("pixels"), images.get("third"))
    text = embed_in_batches(method.embed_text, captions["input_ids"], captions["attention_mask"])
    return retrieval_metrics(image, text, torch.arange(len(image)))

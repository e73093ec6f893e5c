"""Frozen encoders: text and images in, one feature vector per input out.

Why a wrapper at all: what a "text feature" is depends on choices papers state in one line and code hides in
many (which layer, which token, which padding side). Each choice is named here and becomes part of the
feature-store key (``cache_spec``).
See ``notebooks/sharelock.py``, section "The frozen encoders and the frozen-feature pipeline".
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from tqdm.auto import tqdm

import lib  # noqa: F401  (torchvision fix before timm/open_clip)
from lib.core import paths
from lib.core.models import resolve
from lib.core.precision import resolve_dtype

try:  # transformers' per-load "Loading weights" bars would clutter every notebook that loads a model
    from transformers.utils import logging as _hf_logging

    _hf_logging.disable_progress_bar()
except ImportError:  # pragma: no cover
    pass

POOLINGS = ("last_token", "mean", "cls")
VISION_BACKENDS = ("eager", "onnx")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class EncoderInputError(ValueError):
    """An input the encoder cannot turn into a feature (e.g. an empty caption)."""


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real (mask = 1) token of each row, whatever side the padding is on."""
    length = attention_mask.shape[1]
    flipped_first_real = attention_mask.flip(1).to(torch.int64).argmax(dim=1)
    return length - 1 - flipped_first_real


def first_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the first real token of each row (BERT's CLS under left or right padding)."""
    return attention_mask.to(torch.int64).argmax(dim=1)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Reduce token states ``(B, T, D)`` to one vector per row ``(B, D)``."""
    if pooling == "last_token":
        index = last_token_index(attention_mask)
        return hidden[torch.arange(hidden.shape[0]), index]
    if pooling == "cls":
        return hidden[torch.arange(hidden.shape[0]), first_token_index(attention_mask)]
    if pooling == "mean":
        mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
    raise ValueError(f"unknown pooling {pooling!r}; choose one of {POOLINGS}")


class TextEncoder:
    """A frozen ``transformers`` text model that maps captions to pooled hidden states.

    ``layer=-1`` is the model's final output (after the final norm, as ShareLock uses it); ``layer=k`` is
    ``hidden_states[k]``, the output of block k (0 = the embeddings), before the final norm for k < depth.
    Texts are tokenised once, sorted by length and batched; results come back in input order.
    """

    def __init__(
        self,
        name: str,
        *,
        pooling: str,
        layer: int = -1,
        max_length: int = 128,
        batch_size: int = 64,
        dtype: str = "float32",
        device: str = "cpu",
        revision: str | None = None,
    ):
        from transformers import AutoModel, AutoTokenizer

        if pooling not in POOLINGS:
            raise ValueError(f"text pooling {pooling!r} is not one of {POOLINGS}")
        self.name, self.pooling, self.layer = name, pooling, layer
        self.max_length, self.batch_size, self.device = max_length, batch_size, device
        self.dtype = resolve_dtype(dtype, device)  # "auto" -> what this machine runs fast; the key names it
        dtype = self.dtype
        self.resolved = resolve(name, "transformers", revision)
        revision = self.resolved.identity.get("revision", revision)  # the commit the key names
        self.tokenizer = AutoTokenizer.from_pretrained(self.resolved.load_path, revision=revision)
        if self.tokenizer.pad_token is None:  # decoders often ship none; any id works under the mask
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if pooling in ("mean", "cls"):
            # Encoders with absolute position embeddings (BERT) see left padding as a shift of every
            # position; right padding keeps real tokens at positions 0..n-1. Rotary decoders do not care.
            self.tokenizer.padding_side = "right"
        self.model = AutoModel.from_pretrained(self.resolved.load_path, dtype=DTYPES[dtype], revision=revision)
        if getattr(self.model.config, "is_encoder_decoder", False):
            # T5, Flan-UL2, Sentence-T5: the text representation is the encoder's; its decoder needs targets.
            self.model = self.model.get_encoder()
        self.model.eval().requires_grad_(False).to(device)
        config = self.model.config
        self.dim = int(getattr(config, "hidden_size", None) or config.d_model)
        depth = int(getattr(self.model.config, "num_hidden_layers", 0))
        if not (layer == -1 or 0 <= layer <= depth):
            raise ValueError(f"layer {layer} does not exist in {name} (use -1 or 0..{depth})")

    def cache_spec(self) -> dict:
        """Everything about this encoder that changes its features (part of the store key)."""
        return {
            "kind": "text",
            "model": self.resolved.identity,
            "layer": self.layer,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "dtype": self.dtype,
            "padding_side": self.tokenizer.padding_side,
        }

    def tokenize(self, texts: Sequence[str], rows: Sequence[int] | None = None) -> list[list[int]]:
        """Token ids of each text (truncated at ``max_length``). ``rows``: the texts' row numbers in their
        dataset, so that an error names the dataset row rather than a position inside one shard."""
        for position, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                where = f"row {int(rows[position])}" if rows is not None else f"#{position}"
                raise EncoderInputError(f"text {where} is empty ({text!r}): every caption needs words; "
                                        "fix or drop that row of the dataset")
        encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)
        return encoded["input_ids"]

    @torch.no_grad()
    def encode(self, texts: Sequence[str], *, rows: Sequence[int] | None = None,
               progress: bool | None = None) -> torch.Tensor:
        """Features ``(len(texts), dim)`` in float32, in input order (``rows``: see :meth:`tokenize`)."""
        ids = self.tokenize(texts, rows)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = torch.empty(len(ids), self.dim, dtype=torch.float32)
        show = (not paths.quiet()) if progress is None else progress
        starts = range(0, len(order), self.batch_size)
        for start in tqdm(starts, desc=f"text {self.name}", disable=not show, leave=False):
            batch_rows = order[start : start + self.batch_size]
            batch = self.tokenizer.pad({"input_ids": [ids[i] for i in batch_rows]}, return_tensors="pt")
            batch = {k: v.to(self.device) for k, v in batch.items()}
            outputs = self.model(**batch, output_hidden_states=self.layer != -1)
            hidden = outputs.last_hidden_state if self.layer == -1 else outputs.hidden_states[self.layer]
            out[batch_rows] = pool(hidden, batch["attention_mask"], self.pooling).float().cpu()
        return out


def to_rgb(image: Image.Image, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """Flatten transparency onto a white page (emoji PNGs are RGBA) and drop other modes."""
    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, background)
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    return image.convert("RGB")


class VisionEncoder:
    """A frozen image model (``timm`` or ``transformers``) with its own eval-mode preprocessing.

    Preprocessing is resolved from the model; only the input size and crop fraction may be overridden, and a
    training augmentation is never applied (ShareLock's official ``encode_image`` does). ``backend="onnx"``: the
    same network through ONNX Runtime (``lib.core.onnx_vision``, book/performance.md), named in ``cache_spec``.
    """

    def __init__(
        self,
        name: str,
        *,
        library: str,
        image_size: int | None = None,
        crop_pct: float | None = None,
        batch_size: int = 64,
        dtype: str = "float32",
        device: str = "cpu",
        revision: str | None = None,
        backend: str = "eager",
    ):
        if library not in ("timm", "transformers"):
            raise ValueError(f"vision library {library!r} is not one of ('timm', 'transformers')")
        if backend not in VISION_BACKENDS:
            raise ValueError(f"vision backend {backend!r} is not one of {VISION_BACKENDS}")
        if backend == "onnx" and device != "cpu":
            raise ValueError(f"backend='onnx' runs on the CPU (ONNX Runtime's CPU provider), not on {device!r}")
        self.name, self.library, self.batch_size, self.device = name, library, batch_size, device
        self.dtype = dtype = resolve_dtype(dtype, device, backend=backend)  # the key names the resolved dtype
        self.resolved = resolve(name, library, revision)
        revision = self.resolved.identity.get("revision", revision)  # the commit the key names
        if library == "timm":
            self._init_timm(image_size, crop_pct)
        else:
            self._init_hf(image_size, crop_pct, revision)
        self.model.eval().requires_grad_(False).to(device=device, dtype=DTYPES[dtype])
        self.backend, self._onnx = backend, None
        if backend == "onnx":
            from lib.core.onnx_vision import OnnxForward

            self._onnx = OnnxForward(self)

    def _init_timm(self, image_size, crop_pct) -> None:
        import timm
        from timm.data import create_transform, resolve_model_data_config

        if self.resolved.timm_architecture:  # an offline file, loaded the way timm loads a download
            overlay = {**self.resolved.timm_cfg_overlay, "file": self.resolved.load_path}
            self.model = timm.create_model(
                self.resolved.timm_architecture, pretrained=True, num_classes=0, pretrained_cfg_overlay=overlay
            )
        else:
            self.model = timm.create_model(self.resolved.load_path, pretrained=True, num_classes=0)
        config = resolve_model_data_config(self.model)
        if image_size:
            config["input_size"] = (3, image_size, image_size)
        if crop_pct:
            config["crop_pct"] = crop_pct
        self.data_config = config
        self.transform = create_transform(**config, is_training=False)
        self.dim = int(self.model.num_features)

    def _init_hf(self, image_size, crop_pct, revision) -> None:
        from timm.data import create_transform
        from transformers import AutoImageProcessor, AutoModel

        self.model = AutoModel.from_pretrained(self.resolved.load_path, revision=revision)
        processor = AutoImageProcessor.from_pretrained(self.resolved.load_path, revision=revision)
        crop = processor.crop_size["height"] if getattr(processor, "crop_size", None) else 224
        size_info = getattr(processor, "size", None) or {}  # a dict-like SizeDict in transformers 5
        short = (size_info.get("shortest_edge") if hasattr(size_info, "get") else None) or crop
        size = image_size or crop
        pct = crop_pct or (crop / short)
        # The processor's own mean/std and resampling, as a torchvision eval transform.
        self.data_config = {
            "input_size": (3, size, size),
            "interpolation": "bicubic" if int(getattr(processor, "resample", 3)) == 3 else "bilinear",
            "mean": tuple(processor.image_mean),
            "std": tuple(processor.image_std),
            "crop_pct": pct,
            "crop_mode": "center",
        }
        self.transform = create_transform(**self.data_config, is_training=False)
        self.dim = int(self.model.config.hidden_size)

    def cache_spec(self) -> dict:
        preprocessing = {k: list(v) if isinstance(v, tuple) else v for k, v in self.data_config.items()}
        spec = {
            "kind": "image",
            "model": self.resolved.identity,
            "library": self.library,
            "pooling": "pooled" if self.library == "timm" else "cls_pooler",
            "dtype": self.dtype,
            "preprocessing": preprocessing,
        }
        if self.backend != "eager":  # eager specs keep their old keys, so existing caches stay valid
            spec["backend"] = self.backend
        return spec

    def _forward(self, pixels: torch.Tensor) -> torch.Tensor:
        if self._onnx is not None:
            return self._onnx(pixels)
        if self.library == "timm":
            return self.model(pixels)
        return self.model(pixel_values=pixels).pooler_output  # DINOv2: layer-normed CLS token

    @torch.no_grad()
    def encode(self, images: Sequence[Image.Image], *, progress: bool | None = None) -> torch.Tensor:
        """Features ``(len(images), dim)`` in float32, in input order."""
        out = torch.empty(len(images), self.dim, dtype=torch.float32)
        show = (not paths.quiet()) if progress is None else progress
        starts = range(0, len(images), self.batch_size)
        for start in tqdm(starts, desc=f"images {self.name}", disable=not show, leave=False):
            chunk = images[start : start + self.batch_size]
            pixels = torch.stack([self.transform(to_rgb(image)) for image in chunk])
            pixels = pixels.to(device=self.device, dtype=DTYPES[self.dtype])
            out[start : start + len(chunk)] = self._forward(pixels).float().cpu()
        return out


def normalize(features: torch.Tensor) -> torch.Tensor:
    return F.normalize(features.float(), dim=-1)

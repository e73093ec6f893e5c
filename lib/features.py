"""Encoders meet the store: features are computed on a cache miss and only then.

Why: "train-or-load" (UvA DL notebooks). The second run of a notebook must not load an LLM, let
alone run it; so the store key of a text feature is derived from the config and the texts alone,
and the model is loaded lazily inside the compute callback. Vision models are cheap to build and
their preprocessing is resolved from the model itself, so they are built to derive their key.
See ``notebooks/sharelock.py``, section "The frozen encoders and the frozen-feature pipeline".
"""
from __future__ import annotations

import hashlib
import json
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from lib.config import TextModelConfig, VisionModelConfig
from lib.encoders import TextEncoder, VisionEncoder
from lib.models import resolve
from lib.store import CachedFeatures, FeatureStore

_TEXT_ENCODERS: dict[TextModelConfig, TextEncoder] = {}
_VISION_ENCODERS: dict[tuple[VisionModelConfig, str], VisionEncoder] = {}  # keyed by (config, backend)


def digest(items: Sequence[str]) -> str:
    """sha256 of a list of strings (ids, captions): rows and their order are part of a key."""
    return hashlib.sha256(json.dumps(list(items), ensure_ascii=False).encode()).hexdigest()


def text_encoder(cfg: TextModelConfig, device: str = "cpu") -> TextEncoder:
    if cfg not in _TEXT_ENCODERS:
        _TEXT_ENCODERS[cfg] = TextEncoder(
            cfg.name, pooling=cfg.pooling, layer=cfg.layer, max_length=cfg.max_length,
            batch_size=cfg.batch_size, dtype=cfg.dtype, device=device, revision=cfg.revision,
        )
    return _TEXT_ENCODERS[cfg]


def vision_encoder(cfg: VisionModelConfig, device: str = "cpu", backend: str = "eager") -> VisionEncoder:
    """The encoder of ``cfg``, built once per config and backend; ``backend="onnx"``: ONNX Runtime."""
    key = (cfg, backend)
    if key not in _VISION_ENCODERS:
        _VISION_ENCODERS[key] = VisionEncoder(
            cfg.name, library=cfg.library, image_size=cfg.image_size, crop_pct=cfg.crop_pct,
            batch_size=cfg.batch_size, dtype=cfg.dtype, device=device, revision=cfg.revision, backend=backend,
        )
    return _VISION_ENCODERS[key]


def release_encoders() -> None:
    """Free the loaded models (a notebook calls this once every feature is cached), including the
    prompted facet encoders of ``lib.facets`` (imported here, not at the top: it imports this module)."""
    from lib import facets

    _TEXT_ENCODERS.clear()
    _VISION_ENCODERS.clear()
    facets.release_encoders()


def text_spec(cfg: TextModelConfig, texts: Sequence[str], source: dict) -> dict:
    """The store key of text features: model identity, layer, pooling, dtype, and the texts."""
    return {
        "kind": "text",
        "model": resolve(cfg.name, "transformers", cfg.revision).identity,
        "layer": cfg.layer,
        "pooling": cfg.pooling,
        "max_length": cfg.max_length,
        "dtype": cfg.dtype,
        "source": source,
        "texts_sha256": digest(texts),
    }


def text_features(
    store: FeatureStore,
    cfg: TextModelConfig,
    texts: Sequence[str],
    *,
    source: dict,
    ids: Sequence[str] | None = None,
    device: str = "cpu",
    rank: int = 0,
    world_size: int = 1,
) -> CachedFeatures | None:
    """Features of ``texts`` (rows in the given order), computed only if the store misses.

    ``rank``/``world_size``: this process computes only shards ``s % world_size == rank`` and gets
    ``None`` until every rank's shards exist (``FeatureStore.get_or_compute``; ``lib.precompute`` runs
    it under ``torchrun``, book/scale_out.md). The defaults are one process doing everything.
    """
    texts = list(texts)
    ids = list(ids) if ids is not None else [str(i) for i in range(len(texts))]

    def compute(rows: np.ndarray):
        return text_encoder(cfg, device).encode([texts[i] for i in rows])

    return store.get_or_compute(text_spec(cfg, texts, source), ids, compute, rank=rank, world_size=world_size,
                                desc=f"text {cfg.name}")


def image_features(
    store: FeatureStore,
    cfg: VisionModelConfig,
    load_image: Callable[[int], Image.Image],
    ids: Sequence[str],
    *,
    source: dict,
    device: str = "cpu",
    backend: str = "eager",
    rank: int = 0,
    world_size: int = 1,
) -> CachedFeatures | None:
    """Features of the images ``load_image(0..n-1)``, computed only if the store misses.

    ``rank``/``world_size`` split the shards across processes, as for :func:`text_features`.

    ``backend="onnx"`` computes them with ONNX Runtime (faster on CPU); the backend is part of the
    store key (``VisionEncoder.cache_spec``), so eager and ONNX features never share an entry.
    """
    encoder = vision_encoder(cfg, device, backend)
    spec = {**encoder.cache_spec(), "source": source, "ids_sha256": digest(ids)}

    def compute(rows: np.ndarray):
        return encoder.encode([load_image(int(i)) for i in rows])

    return store.get_or_compute(spec, list(ids), compute, rank=rank, world_size=world_size,
                                desc=f"images {cfg.name}")

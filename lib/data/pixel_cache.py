"""Resident uint8 pixels of an image set, decoded once and kept on disk beside the feature store.

Why: the Three Towers chapter trains its image tower on pixels, not on cached features, and decoding large
clip-art (huge PNGs, SVGs rasterised by cairo) every run costs minutes, while the decoded array is small and
depends only on the images and the size. The key hashes the set's name, image ids, ``source``, size and the
decoding version below; a file that cannot be read is decoded again, with a warning.
See notebooks/three_towers.py, section "The data".
"""
from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from lib.core import atomic, paths

__all__ = ["DECODE_VERSION", "cache_key", "cache_path", "cached_pixels"]

DECODE_VERSION = 1  # bump when lib.methods.three_towers.pixels changes what it returns


def cache_key(images, size: int) -> str:
    """A hash of the image set's identity (name, ids, source) and the pixel size."""
    identity = {"name": images.name, "ids": list(images.ids), "source": images.source, "size": int(size),
                "decode": DECODE_VERSION}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cache_path(images, size: int) -> Path:
    return paths.cache_root() / "pixels" / f"{images.name}-{size}px-{cache_key(images, size)}.npy"


def _read(path: Path, shape: tuple[int, ...]) -> torch.Tensor | None:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        warnings.warn(f"pixel cache {path} is unreadable ({error}); decoding the images again", stacklevel=3)
        return None
    if array.shape != shape or array.dtype != np.uint8:
        warnings.warn(f"pixel cache {path} holds {array.dtype} {array.shape}, expected uint8 {shape}; decoding the "
                      "images again", stacklevel=3)
        return None
    return torch.from_numpy(array)


def cached_pixels(images, size: int, decode: Callable[[Callable, int, int], torch.Tensor]) -> torch.Tensor:
    """``decode(images.load_image, len(images), size)`` (``(N, 3, size, size)`` uint8), read from the cache when
    it holds this exact set at this size, else decoded and written there."""
    path = cache_path(images, size)
    shape = (len(images), 3, int(size), int(size))
    if path.is_file():
        found = _read(path, shape)
        if found is not None:
            return found
    pixels = decode(images.load_image, len(images), size)
    if tuple(pixels.shape) != shape or pixels.dtype != torch.uint8:
        raise ValueError(f"decode returned {pixels.dtype} {tuple(pixels.shape)} for {images.name}, "
                         f"expected uint8 {shape}")
    buffer = io.BytesIO()
    np.save(buffer, pixels.numpy(), allow_pickle=False)
    atomic.write_bytes(path, buffer.getvalue())
    return pixels

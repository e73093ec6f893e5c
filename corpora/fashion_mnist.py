"""Fashion-MNIST photos: real product photos as an out-of-domain zero-shot test.

Why: the emoji corpus is drawings; a head trained on drawings and tested on photos of T-shirts and
sneakers shows how far frozen features carry the alignment out of domain.
Read straight from the four IDX files that Debian's ``dataset-fashion-mnist`` installs.

See notebooks/sharelock.py, section "Zero-shot evaluation".
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass

import numpy as np
from PIL import Image

from corpora import manifests

NAME = "fashion-mnist"


@dataclass(frozen=True)
class Photos:
    pixels: np.ndarray  # (N, 28, 28) uint8
    labels: np.ndarray  # (N,) int64
    classnames: tuple[str, ...]
    ids: tuple[str, ...]

    def image(self, index: int) -> Image.Image:
        return Image.fromarray(self.pixels[index], mode="L").convert("RGB")

    def __len__(self) -> int:
        return len(self.labels)


def _read_idx(path) -> np.ndarray:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_test(per_class: int | None = None) -> Photos:
    """The 10,000 test photos, or the first ``per_class`` of each class (in file order)."""
    images = _read_idx(manifests.dataset_file(NAME, "t10k-images-idx3-ubyte.gz"))
    labels = _read_idx(manifests.dataset_file(NAME, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    rows = np.arange(len(labels))
    if per_class is not None:
        rows = np.sort(np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in range(10)]))
    classnames = tuple(manifests.load(NAME)["classes"])
    return Photos(images[rows], labels[rows], classnames, tuple(f"t10k-{i}" for i in rows))

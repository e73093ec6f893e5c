"""Checksums of files: sha256 where a hash is an *identity*, XXH3-128 where it only guards against damage.

sha256 identifies every artefact (data files, class splits, weights, store keys); the store's per-shard check
runs on every first read and only has to notice damage, so it uses XXH3-128, which hashes at memory speed
(book/performance.md).
See notebooks/viterb.py, section "Seen and unseen classes, as data" (splits checked by their sha256).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import xxhash

# Store checksums by the key a sidecar records them under (lib.core.store_files); sha256 sidecars are still verified.
STORE_ALGORITHMS: dict[str, Callable] = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}
STORE_ALGORITHM = "xxh3_128"  # what new shards are written with


def file_sha256(path: Path, block_size: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in blocks (model weights are gigabytes)."""
    return file_digest(path, "sha256", block_size)


def file_digest(path: Path, algorithm: str, block_size: int = 1 << 22) -> str:
    """Hex digest of a file under one of :data:`STORE_ALGORITHMS`, read in blocks."""
    digest = STORE_ALGORITHMS[algorithm]()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(block_size), b""):
            digest.update(block)
    return digest.hexdigest()


def buffer_digest(buffer, algorithm: str) -> str:
    """Hex digest of bytes, a memoryview or an ``mmap`` (hashed in place, without a copy)."""
    return STORE_ALGORITHMS[algorithm](buffer).hexdigest()

"""Checksums of files: sha256 where a hash is an *identity*, XXH3-128 where it only guards against damage.

sha256 identifies every artefact of the book (data files, class splits, model weights, store keys): a
cryptographic hash, so two different files never share one. The feature store's per-shard integrity
check only has to notice accidental damage (a flipped bit, a truncated or overwritten file), and it runs
on every first read of every shard, so it uses XXH3-128 (the ``xxhash`` wheel), which hashes at memory
speed (~30 GB/s on one core against ~1.4 GB/s for sha256 with SHA-NI); see book/performance.md.

See notebooks/viterb.py, section "Seen and unseen classes, as data" (splits checked by their sha256).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import xxhash

# Store checksums by the name a sidecar records them under (lib.core.store_files). "sha256": stores
# written before XXH3 was adopted, still read and verified with their own algorithm.
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

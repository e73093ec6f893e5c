"""sha256 of files: the one checksum every artefact of the book is identified and verified by.

See notebooks/viterb.py, section "Seen and unseen classes, as data" (splits checked by their sha256).
"""
from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path, block_size: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in blocks (model weights are gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(block_size), b""):
            digest.update(block)
    return digest.hexdigest()

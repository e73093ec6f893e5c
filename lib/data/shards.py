"""Images inside webdataset tar shards, read by offset: the layout img2dataset writes and open_clip trains from.

Why: a full config's millions of training images keep better as a few hundred tar files than as millions of loose
files, and a tower trained from scratch reads them in a random order (``lib.core.rows``), which a tar read front to
back cannot serve. ``python -m provision.prepare`` writes the shards and records in each split's jsonl where every
image's bytes start, so one seek and one read fetch an image. The tar header in front of those bytes is checked
against the recorded member, so a shard rewritten after preparation is named, never misread. See
book/scale_out.md, "Images in tar shards".
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from lib.data.images import BadImageError, decode_image

__all__ = ["TAR_BLOCK", "Member", "read_member", "open_member_image"]

TAR_BLOCK = 512  # a tar header is one block; the member's data starts right after it
PREPARE_AGAIN = "prepare the dataset again (python -m provision.prepare)"


@dataclass(frozen=True)
class Member:
    """One file inside a tar shard: the shard, the member's name, where its data starts and how long it is."""

    shard: Path
    name: str
    offset: int
    size: int

    def __str__(self) -> str:
        return f"{self.shard}:{self.name}"


def _header_field(header: bytes, start: int, end: int) -> str:
    return header[start:end].split(b"\0", 1)[0].decode("utf-8", "replace").strip()


def read_member(member: Member, fix: str = PREPARE_AGAIN) -> bytes:
    """The member's bytes, after checking that the tar header in front of them names this member and this size."""
    if member.offset < TAR_BLOCK or member.size < 0:
        raise BadImageError(f"{member}: offset {member.offset} / size {member.size} cannot be a tar member's data: "
                            f"{fix}")
    try:
        with open(member.shard, "rb", buffering=0) as handle:  # one read of header and data, unbuffered
            handle.seek(member.offset - TAR_BLOCK)
            block = handle.read(TAR_BLOCK + member.size)
        header, data = block[:TAR_BLOCK], block[TAR_BLOCK:]
    except FileNotFoundError:
        raise BadImageError(f"{member.shard} does not exist: {fix}") from None
    name, size = _header_field(header, 0, 100), _header_field(header, 124, 136)
    try:
        size = int(size, 8)
    except ValueError:
        size = None
    if name != member.name or size != member.size or len(data) != member.size:
        raise BadImageError(f"{member}: the shard holds something else at byte {member.offset} (header names "
                            f"{name!r}): the shard changed after it was prepared; {fix}")
    return data


def open_member_image(member: Member, *, mode: str | None = None, fix: str | None = None) -> Image.Image:
    """The image stored as ``member``, decoded with the checks a file gets (:func:`lib.data.images.open_image`)."""
    remedy = fix or PREPARE_AGAIN
    return decode_image(read_member(member, remedy), str(member), mode=mode, fix=remedy)

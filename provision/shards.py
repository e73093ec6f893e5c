"""Writing a prepared dataset's images as webdataset tar shards, while a preparer streams them from the download.

Why this layout: it is what img2dataset writes and what open_clip's ``--dataset-type webdataset`` trains from, so
the shards ``python -m provision.prepare`` writes serve the book's own loaders and a researcher's open_clip run
alike. Each image is a group of three members with one key, ``000000012.jpg`` (the image's bytes, as downloaded),
``000000012.txt`` (its caption) and ``000000012.json`` (``{"key", "caption"}``: the key the download gave it), and
a shard holds ``per_shard`` images (``prepare.shard_images`` in the dataset's manifest). The keys are running
numbers because webdataset cuts a member's name at its first dot, so a download's own names ("a.b.jpg") cannot
serve. The writer returns where each image's bytes start, which the split's jsonl records, so
:mod:`lib.data.shards` reads any image with one seek. Every shard is written as ``<name>.part`` and renamed when
complete, inside the staging folder that only becomes the dataset once everything is written. See
book/scale_out.md, "Images in tar shards".
"""
from __future__ import annotations

import io
import json
import os
import tarfile

__all__ = ["ShardWriter"]


class ShardWriter:
    """Appends images to ``shards/00000.tar``, ``shards/00001.tar``, ... in the staging folder.

    :meth:`add` returns the image's location in the layout the jsonl records (``shard``, ``member``, ``offset``,
    ``size``); :attr:`shards` maps each finished shard to its size in bytes (the preparation record, which
    :func:`provision.prepare.check` compares with the disk)."""

    def __init__(self, staging, per_shard: int, folder: str = "shards") -> None:
        if per_shard < 1:
            raise ValueError(f"shard_images must be at least 1, got {per_shard}")
        self.staging, self.per_shard, self.folder = staging, int(per_shard), folder
        self.count, self.shards = 0, {}
        self._tar = self._file = self._rel = None

    def _open_next(self) -> None:
        self._close_current()
        self._rel = f"{self.folder}/{len(self.shards):05d}.tar"
        part = self.staging.inside(self._rel + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(part, "wb")
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)

    def _member(self, name: str, data: bytes) -> int:
        """Write one member; return the offset of its data."""
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644  # no clock or owner: the same input, the same bytes
        start = self._tar.offset + len(info.tobuf(self._tar.format, self._tar.encoding, self._tar.errors))
        self._tar.addfile(info, io.BytesIO(data))
        return start

    def add(self, key: str, image: bytes, suffix: str, caption: str) -> dict:
        """One image with its caption; ``suffix`` (``.jpg``, ``.png``, ...) says how a webdataset reader decodes it."""
        if self.count % self.per_shard == 0:
            self._open_next()
        stem = f"{self.count:09d}"
        name = f"{stem}{suffix.lower()}"
        offset = self._member(name, image)
        self._member(f"{stem}.txt", caption.encode("utf-8"))
        self._member(f"{stem}.json", json.dumps({"key": key, "caption": caption}, ensure_ascii=False).encode("utf-8"))
        self.count += 1
        return {"shard": self._rel, "member": name, "offset": offset, "size": len(image)}

    def _close_current(self) -> None:
        if self._tar is None:
            return
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        final = self.staging.inside(self._rel)
        os.replace(final.with_name(final.name + ".part"), final)
        self.shards[self._rel] = final.stat().st_size
        self.staging.written += 1
        self._tar = self._file = None

    def close(self) -> dict[str, int]:
        """Finish the last shard; returns :attr:`shards`."""
        self._close_current()
        return self.shards

"""A small, read-only reader of Qt's binary resource files (``.rcc``): list the entries, read their bytes.

Why: GCompris ships its photographs, dataset files and READMEs packed in ``/usr/share/gcompris-qt/rcc/*.rcc``,
and the book needs no Qt to read them. The layout (Qt's ``rcc``, versions 1-3): a 20-byte header ``qres``,
version, then the big-endian offsets of the *tree* (fixed-size nodes: name offset, flags, then either child
count + first child index or locale + data offset; 8 more bytes of modification time from version 2), the
*data* (each entry a 4-byte length, then the bytes) and the *names* (2-byte length, 4-byte hash, UTF-16BE).
An entry is stored raw, zlib-compressed (flag 0x01: ``qCompress``, a 4-byte big-endian length then a zlib
stream) or zstd-compressed (flag 0x04; needs ``zstandard``, which GCompris 3.1's files do not use).

Every offset, count and length is checked against the file's size before it is followed, and a decompressed
entry must have the length it declares (and at most :data:`MAX_ENTRY_BYTES`): a damaged or hostile file stops
with one :class:`RccError` that names it. Nothing is ever written. See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

from corpora import manifests

__all__ = ["RccError", "read_rcc", "entries", "MAX_ENTRY_BYTES"]

MAGIC = b"qres"
COMPRESSED, DIRECTORY, COMPRESSED_ZSTD = 0x01, 0x02, 0x04
MAX_FILE_BYTES = 512 * 2**20  # the largest GCompris 3.1 .rcc is 4.7 MB
MAX_ENTRY_BYTES = 256 * 2**20
MAX_DEPTH = 64


class RccError(ValueError):
    """A ``.rcc`` file that cannot be read safely; the message names the file and what is wrong."""


def read_rcc(path: str | Path) -> dict[str, bytes]:
    """Every file entry of the ``.rcc`` at ``path`` as ``{"dir/sub/name": bytes}`` (decompressed), in tree order."""
    path = Path(path)
    data = manifests.read_capped(path, MAX_FILE_BYTES, RccError, "a resource file")
    return entries(data, str(path))


def entries(data: bytes, name: str = "<bytes>") -> dict[str, bytes]:
    """The file entries of an ``.rcc`` image held in memory (``name`` appears in errors)."""
    return _Reader(data, name).files()


class _Reader:
    def __init__(self, data: bytes, name: str):
        self.data, self.name = data, name
        if len(data) < 20 or data[:4] != MAGIC:
            self.fail("not a Qt resource file (no 'qres' header)")
        self.version, self.tree, self.payload, self.names = struct.unpack(">IIII", data[4:20])
        if not 1 <= self.version <= 3:
            self.fail(f"format version {self.version} is not one of 1, 2, 3")
        self.node_size = 14 if self.version == 1 else 22
        for label, offset in (("tree", self.tree), ("data", self.payload), ("names", self.names)):
            if not 20 <= offset <= len(data):
                self.fail(f"{label} offset {offset} lies outside the file ({len(data)} bytes)")

    def fail(self, problem: str):
        raise RccError(f"{self.name}: {problem}; the file is damaged or not a Qt resource file "
                       "(reinstall the package that holds it)")

    def take(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > len(self.data):
            self.fail(f"{what} at offset {offset}, {length} bytes, lies outside the file ({len(self.data)} bytes)")
        return self.data[offset:offset + length]

    def node(self, index: int) -> tuple[int, int, int, int]:
        """(name offset, flags, a, b): a, b are child count and first child, or locale and data offset."""
        raw = self.take(self.tree + index * self.node_size, 14, f"tree node {index}")
        name_offset, flags = struct.unpack(">IH", raw[:6])
        if flags & DIRECTORY:
            count, first = struct.unpack(">II", raw[6:14])
            return name_offset, flags, count, first
        _locale, offset = struct.unpack(">II", raw[6:14])
        return name_offset, flags, 0, offset

    def label(self, offset: int) -> str:
        (length,) = struct.unpack(">H", self.take(self.names + offset, 2, "name length"))
        raw = self.take(self.names + offset + 6, 2 * length, "name")
        return raw.decode("utf-16-be", errors="replace")

    def content(self, offset: int, flags: int, where: str) -> bytes:
        (length,) = struct.unpack(">I", self.take(self.payload + offset, 4, f"length of {where}"))
        if length > MAX_ENTRY_BYTES:
            self.fail(f"{where} declares {length} bytes, more than {MAX_ENTRY_BYTES}")
        raw = self.take(self.payload + offset + 4, length, where)
        if flags & COMPRESSED:
            if length < 4:
                self.fail(f"{where} is compressed but has only {length} bytes")
            (expected,) = struct.unpack(">I", raw[:4])
            if expected > MAX_ENTRY_BYTES:
                self.fail(f"{where} would decompress to {expected} bytes, more than {MAX_ENTRY_BYTES}")
            stream = zlib.decompressobj()
            try:
                out = stream.decompress(raw[4:], expected + 1)
            except zlib.error as error:
                self.fail(f"{where}: zlib data is damaged ({error})")
            if len(out) != expected:
                self.fail(f"{where} decompresses to {len(out)}+ bytes, not the {expected} it declares")
            return out
        if flags & COMPRESSED_ZSTD:
            try:
                import zstandard
            except ImportError:
                self.fail(f"{where} is zstd-compressed and the `zstandard` package is not installed "
                          "(pip install zstandard)")
            try:
                return zstandard.ZstdDecompressor().decompress(raw, max_output_size=MAX_ENTRY_BYTES)
            except zstandard.ZstdError as error:
                self.fail(f"{where}: zstd data is damaged ({error})")
        return raw

    def files(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        nodes = (len(self.data) - self.tree) // self.node_size
        seen: set[int] = set()
        stack = [(0, "", 0)]
        while stack:
            index, prefix, depth = stack.pop()
            if index in seen:
                self.fail(f"tree node {index} is reached twice (a loop)")
            if depth > MAX_DEPTH:
                self.fail(f"directories nested deeper than {MAX_DEPTH}")
            seen.add(index)
            name_offset, flags, a, b = self.node(index)
            name = "" if index == 0 else self.label(name_offset)
            if "/" in name or name in (".", ".."):
                self.fail(f"entry name {name!r} is not a plain name")
            path = f"{prefix}/{name}" if prefix else name
            if flags & DIRECTORY:
                if a > nodes or b + a > nodes or b <= index and a:
                    self.fail(f"directory {path or '/'!r}: {a} children from node {b} lie outside the tree")
                stack.extend((child, path, depth + 1) for child in reversed(range(b, b + a)))
            elif index == 0:
                self.fail("the root of the tree is not a directory")
            else:
                out[path] = self.content(b, flags, f"entry {path!r}")
        return out

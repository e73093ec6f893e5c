"""A small, read-only reader of Qt's compiled translations (``.qm``): the translation of a source string.

Why: GCompris's titles and descriptions are ``qsTr("...")`` strings in its QML files, translated in
``/usr/share/gcompris-qt/translations/gcompris_<locale>.qm``; reading those files gives human-written
translations of every photograph's title and description, with no Qt at hand. The layout (Qt's ``qm.cpp``):
a 16-byte magic, then sections (1-byte tag, 4-byte big-endian length): *hashes* (0x42: pairs of the ELF hash
of source text + comment and the offset of a message), *messages* (0x69: records of tagged fields ending with
tag 1; translations are UTF-16BE, source text, context and comment UTF-8), *contexts* (0x2f), numerus rules
(0x88), dependencies (0x96) and *language* (0xa7). ``lrelease`` usually strips the source text from a message
and keeps only its hash, so a string is found as Qt finds it: by :func:`elf_hash` of its source text, then by
context and source text where the message keeps them.

Every length is checked against the file before it is followed (a damaged or hostile file stops with one
:class:`QmError` naming it); nothing is written. See notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from corpora import manifests

__all__ = ["QmError", "Catalogue", "Message", "read_qm", "parse", "elf_hash", "MAGIC"]

MAGIC = bytes.fromhex("3cb86418caef9c95cd211cbf60a1bddd")
CONTEXTS, HASHES, MESSAGES, NUMERUS, DEPENDENCIES, LANGUAGE = 0x2F, 0x42, 0x69, 0x88, 0x96, 0xA7
END, SOURCE16, TRANSLATION, CONTEXT16, OBSOLETE1, SOURCE, CONTEXT, COMMENT, OBSOLETE2 = range(1, 10)
MAX_FILE_BYTES = 64 * 2**20  # GCompris 3.1's largest .qm is under 1 MB


class QmError(ValueError):
    """A ``.qm`` file that cannot be read safely; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Message:
    """One translated message: its translations (several for plural forms) and whatever the file kept of its key."""

    translations: tuple[str, ...]
    context: str | None = None
    source: str | None = None
    comment: str | None = None


@dataclass
class Catalogue:
    """The messages of one ``.qm`` file, found by hash (see :meth:`translate`)."""

    name: str
    language: str = ""
    by_hash: dict[int, list[Message]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_hash.values())

    def translate(self, source: str, context: str | None = None, comment: str = "") -> str | None:
        """The (first) translation of ``source``, as Qt picks it: same hash of source + comment, then the same
        context, source text and comment wherever the message keeps them; ``context=None`` accepts any context.
        None when the file has no such message or its translation is empty."""
        candidates = self.by_hash.get(elf_hash((source + comment).encode("utf-8")), [])
        for message in candidates:
            if message.source is not None and message.source != source:
                continue
            if message.comment is not None and message.comment != comment:
                continue
            if context is not None and message.context is not None and message.context != context:
                continue
            if message.translations and message.translations[0]:
                return message.translations[0]
        return None


def elf_hash(data: bytes) -> int:
    """Qt's ``elfHash`` (qtranslator.cpp) of the UTF-8 bytes of source text + comment (never 0)."""
    h = 0
    for byte in data:
        if byte == 0:
            break
        h = ((h << 4) + byte) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h or 1


def read_qm(path: str | Path) -> Catalogue:
    """The catalogue of the ``.qm`` file at ``path``."""
    path = Path(path)
    data = manifests.read_capped(path, MAX_FILE_BYTES, QmError, "a translation file")
    return parse(data, str(path))


def parse(data: bytes, name: str = "<bytes>") -> Catalogue:
    """The catalogue of a ``.qm`` image held in memory (``name`` appears in errors)."""

    def fail(problem: str):
        raise QmError(f"{name}: {problem}; the file is damaged or not a Qt translation file "
                      "(reinstall the package that holds it)")

    def take(buffer: bytes, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > len(buffer):
            fail(f"{what} at offset {offset}, {length} bytes, runs past its end ({len(buffer)} bytes)")
        return buffer[offset:offset + length]

    if data[:16] != MAGIC:
        fail("no .qm magic number")
    sections: dict[int, bytes] = {}
    offset = 16
    while offset < len(data):
        tag, length = struct.unpack(">BI", take(data, offset, 5, "section header"))
        sections[tag] = take(data, offset + 5, length, f"section 0x{tag:02x}")
        offset += 5 + length
    catalogue = Catalogue(name=name, language=sections.get(LANGUAGE, b"").decode("utf-8", errors="replace"))
    hashes, messages = sections.get(HASHES, b""), sections.get(MESSAGES, b"")
    if len(hashes) % 8:
        fail(f"hash table of {len(hashes)} bytes is not a whole number of 8-byte entries")

    def message_at(position: int) -> Message:
        fields: dict[str, str] = {}
        translations: list[str] = []
        for _ in range(10_000):
            (tag,) = take(messages, position, 1, "message field")
            position += 1
            if tag == END:
                return Message(tuple(translations), fields.get("context"), fields.get("source"), fields.get("comment"))
            if tag == OBSOLETE1:
                take(messages, position, 4, "obsolete field")
                position += 4
                continue
            if tag not in (TRANSLATION, SOURCE16, CONTEXT16, SOURCE, CONTEXT, COMMENT, OBSOLETE2):
                fail(f"unknown message field tag {tag} at offset {position - 1} of the messages")
            (length,) = struct.unpack(">I", take(messages, position, 4, "field length"))
            position += 4
            if length == 0xFFFFFFFF:  # a null string
                if tag == TRANSLATION:
                    translations.append("")
                continue
            raw = take(messages, position, length, f"field {tag}")
            position += length
            if tag == TRANSLATION:
                if length % 2:
                    fail(f"a translation of odd length {length} (UTF-16 needs an even one)")
                translations.append(raw.decode("utf-16-be", errors="replace"))
            elif tag in (SOURCE, CONTEXT, COMMENT):
                fields[{SOURCE: "source", CONTEXT: "context", COMMENT: "comment"}[tag]] = raw.decode(
                    "utf-8", errors="replace")
        fail("a message with more than 10,000 fields")

    for start in range(0, len(hashes), 8):
        key, position = struct.unpack(">II", hashes[start:start + 8])
        catalogue.by_hash.setdefault(key, []).append(message_at(position))
    return catalogue

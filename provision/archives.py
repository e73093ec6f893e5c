"""One safe reader for the archives that ``python -m provision.prepare`` takes in: zip, tar (any compression), folder.

Why: the full datasets' releases come as archives from other people's servers, most with no published checksum, so
a preparer must assume an archive may be hostile. Three things go wrong with a naive reader: a member named
``images/../../escape.jpg`` (or ``/etc/x``) is written outside the target ("zip-slip"); a link or device member
makes a later write land elsewhere; and a small archive expands to gigabytes in memory ("zip bomb"). Here every
member name is normalised and must stay inside the archive's own tree, links and devices are never followed (they
are skipped; a symbolic link in a folder given as the download is refused: :func:`no_link`), and every read is
streamed in blocks against a per-member and a per-archive byte cap, whatever size the archive's header claims.
Nothing is ever linked into a prepared dataset: every file is copied (a hard link would let an in-place edit of the
download change the prepared set). See book/scale_out.md, "Pre-flight".
"""
from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ArchiveError", "Entry", "entries", "safe_name", "bounded_read", "no_link", "max_entry_bytes",
           "max_total_bytes"]

_BLOCK = 1 << 20


class ArchiveError(RuntimeError):
    """An archive member that cannot be read safely; the message names the archive, the member and the fix."""


def max_entry_bytes() -> int:
    """The largest member read into memory (``LIB_PREPARE_MAX_ENTRY_BYTES``, default 512 MiB: an image or a list)."""
    return int(os.environ.get("LIB_PREPARE_MAX_ENTRY_BYTES", 512 << 20))


def max_total_bytes() -> int:
    """The most one archive may expand to (``LIB_PREPARE_MAX_TOTAL_BYTES``, default 4 TiB: ImageNet-21k is ~1.3 TB)."""
    return int(os.environ.get("LIB_PREPARE_MAX_TOTAL_BYTES", 4 << 40))


@dataclass
class Entry:
    """One regular file of an archive or folder: its normalised name, its declared size and a bounded reader."""

    name: str  # normalised path inside the archive or folder, with "/", never absolute, never with ".."
    size: int
    read: Callable[[], bytes]
    file: Path | None = None  # the file on disk (a folder input), named in messages; copied, never linked


def safe_name(name: str, archive: Path | str = "archive") -> str:
    """``name`` normalised (``a/./b`` -> ``a/b``, leading ``./`` dropped); raises :class:`ArchiveError` for an
    absolute name, a drive letter, a backslash path or one that climbs out of the archive's tree with ``..``."""
    if "\x00" in name or "\\" in name or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"{archive}: member {name!r} is not a portable relative path; refusing the archive "
                           "(a hostile or damaged download: get it again from the dataset's own page)")
    if name.startswith("/"):
        raise ArchiveError(f"{archive}: member {name!r} is an absolute path; refusing the archive (a hostile or "
                           "damaged download: get it again from the dataset's own page)")
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../"):
        raise ArchiveError(f"{archive}: member {name!r} would be written outside the target; refusing the archive "
                           "(a hostile or damaged download: get it again from the dataset's own page)")
    return "" if normal == "." else normal


class _Budget:
    """The bytes one archive has expanded to so far, against :func:`max_total_bytes`."""

    def __init__(self, archive: Path) -> None:
        self.archive, self.used, self.cap = archive, 0, max_total_bytes()

    def take(self, n: int, name: str) -> None:
        self.used += n
        if self.used > self.cap:
            raise ArchiveError(f"{self.archive}: expands past {self.cap:,} bytes (at member {name!r}); a decompression "
                               "bomb or the wrong file. Raise LIB_PREPARE_MAX_TOTAL_BYTES if the release really is "
                               "larger")


def bounded_read(handle, name: str, archive: Path | str, budget: _Budget | None = None) -> bytes:
    """Read ``handle`` to its end in blocks, refusing more than :func:`max_entry_bytes` (whatever its header says)."""
    cap, parts, total = max_entry_bytes(), [], 0
    while block := handle.read(_BLOCK):
        total += len(block)
        if total > cap:
            raise ArchiveError(f"{archive}: member {name!r} expands past {cap:,} bytes; a decompression bomb or not "
                               "this dataset. Raise LIB_PREPARE_MAX_ENTRY_BYTES if a real file is that large")
        if budget is not None:
            budget.take(len(block), name)
        parts.append(block)
    return b"".join(parts)


def _zip_is_link(info: zipfile.ZipInfo) -> bool:
    """A symbolic link stored by a Unix zip (its mode in the high bits of ``external_attr``)."""
    return stat.S_ISLNK(info.external_attr >> 16)


def entries(path: Path) -> Iterator[Entry]:
    """Every regular file of a zip, a tar (any compression, read once in order) or a folder, safely named.

    Links, devices and other special members of an archive are skipped, never followed; a symbolic link in a
    folder is refused (:func:`no_link`). Names that would leave the tree raise :class:`ArchiveError` before anything
    is written."""
    path = Path(path)
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in dirs:
                no_link(Path(root) / name, path)
            for name in sorted(files):
                file = Path(root) / name
                no_link(file, path)
                if not file.is_file():
                    continue
                rel = safe_name(file.relative_to(path).as_posix(), path)
                yield Entry(rel, file.stat().st_size, lambda f=file, r=rel: _read_file(f, r, path), file)
        return
    budget = _Budget(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir() or _zip_is_link(info):
                    continue
                rel = safe_name(info.filename, path)

                def read(info=info, rel=rel) -> bytes:
                    with archive.open(info) as handle:
                        return bounded_read(handle, rel, path, budget)
                yield Entry(rel, info.file_size, read)
        return
    try:
        with tarfile.open(path, "r|*") as archive:
            for member in archive:
                if not member.isfile():  # directories, links, devices, fifos: never followed
                    continue
                rel = safe_name(member.name, path)

                def read(member=member, rel=rel) -> bytes:
                    return bounded_read(archive.extractfile(member), rel, path, budget)
                yield Entry(rel, member.size, read)
    except tarfile.TarError as error:
        raise ArchiveError(f"{path}: not a readable zip or tar ({error}); a truncated or different download: get it "
                           "again") from None


def no_link(path: Path, folder: Path) -> None:
    """Raise :class:`ArchiveError` if ``path`` (inside the download ``folder``) is a symbolic link: what it points to
    may be anywhere, and a prepared dataset never holds or follows one."""
    if Path(path).is_symlink():
        raise ArchiveError(f"{path} is a symbolic link (to {os.readlink(path)}): provision.prepare reads only regular "
                           f"files in {folder}; replace the link by the file it points to (cp -L) and run again")


def _read_file(file: Path, rel: str, folder: Path) -> bytes:
    with open(file, "rb") as handle:
        return bounded_read(handle, rel, folder)

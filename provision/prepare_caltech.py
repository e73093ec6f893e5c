"""Caltech-101 for ``python -m provision.prepare caltech-101``: a user's download, checked image by image.

    python -m provision.prepare caltech-101 --from ~/downloads/caltech-101.zip
    python -m provision.prepare caltech-101 --from ~/downloads/caltech-101      # a folder holding any form below
    python -m provision.prepare_caltech --hash-list ~/downloads/caltech-101.zip  # rewrite the manifest's hash list

Why per-image hashes: the release comes in several forms that are all the same photographs: CaltechDATA's
``caltech-101.zip`` (DOI 10.22002/D1.20086), which holds ``101_ObjectCategories.tar.gz`` (and ``Annotations.tar``);
that ``.tar.gz`` alone (torchvision's download); a plain ``.tar`` of it; or the extracted ``101_ObjectCategories/``
folder. Their archive bytes differ (compression, member order, times), their images do not. So the manifest records
the sha256 of every image's bytes, keyed by ``<category>/<file>`` (``data_manifests/caltech-101.sha256``, whose own
sha256 sits in ``data_manifests/caltech-101.yaml``), and every form verifies against the same list.

What the step does: finds the download in ``--from`` (the file itself, or in the folder or one level below: the zip,
the ``.tar.gz``, a ``.tar``, then the extracted folder); reads every member through :func:`provision.archives.entries`
(confined names, no links, size caps), the zip's inner ``.tar.gz`` too: it is first staged as a file (read through
the zip's caps) and then read by the same function with its own; skips the ``BACKGROUND_Google`` clutter folder
(467 images that are no category; torchvision and the CLIP benchmark suites leave it out too) and anything that is
no image of the list (recorded as dropped); refuses an image whose bytes are not the listed ones with one line that
names it, and one that does not decode whole; writes ``<category>/<file>`` into the staging folder (atomic files,
resumable, renamed into place by :mod:`provision.prepare`); refuses a download that lacks any listed image. The
result is one folder per category, what ``corpora.caltech`` and ``corpora.datasets.folder_labelled`` read.

See book/scale_out.md, "Pre-flight" (how each full dataset is prepared).
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from corpora import caltech
from provision.archives import Entry, entries
from provision.prepare_sets import Prepared, decodes, files_per_folder, find, refuse, stage

__all__ = ["ARCHIVES", "INNER", "locate", "images", "prepare_caltech", "hash_list"]

ARCHIVES = ["caltech-101.zip", "101_ObjectCategories.tar.gz", "101_ObjectCategories.tgz", "101_ObjectCategories.tar",
            "caltech-101.tar.gz", "caltech-101.tar"]
FOLDERS = ["101_ObjectCategories"]
INNER = ("101_ObjectCategories.tar.gz", "101_ObjectCategories.tgz", "101_ObjectCategories.tar")  # inside the zip
NESTED = ".nested"  # the staging sub-folder the zip's inner archive is read from (removed when done)
WHAT = "the Caltech-101 download (caltech-101.zip, 101_ObjectCategories.tar.gz or .tar, or 101_ObjectCategories/)"


def locate(source: Path) -> Path:
    """The download ``source`` names: a file as it is; in a folder (or one level below) the first of
    :data:`ARCHIVES`, else the extracted ``101_ObjectCategories/``, else the folder itself when it holds category
    folders (an extraction into it)."""
    source = Path(source)
    if source.is_file():
        return source
    if not source.is_dir():
        refuse(f"--from {source} does not exist: point it at {WHAT}")
    found = find(source, ARCHIVES, WHAT, required=False) or find(source, FOLDERS, WHAT, required=False,
                                                                   folder_ok=True)
    if found is not None:
        return found
    if any((source / category).is_dir() for category in caltech.categories()):
        return source
    return find(source, ARCHIVES + FOLDERS, WHAT, folder_ok=True)  # refuses, listing what the folder holds


def _ignored(name: str) -> bool:
    """macOS metadata a zip made on a Mac carries (``__MACOSX/``, ``._<name>``): never a photo."""
    return name.startswith("__MACOSX/") or "/__MACOSX/" in name or name.rsplit("/", 1)[-1].startswith("._")


def _inner(entry: Entry, outer: Path) -> bool:
    """True for the zip's nested image archive (``caltech-101/101_ObjectCategories.tar.gz``)."""
    return outer.is_file() and not _ignored(entry.name) and entry.name.rsplit("/", 1)[-1] in INNER


def images(download: Path, staging, say=print) -> Iterator[tuple[str, Entry]]:
    """``(<category>/<file>, entry)`` for every file of the download (its last two path parts: the archives' roots
    differ); the zip's inner archive is staged under :data:`NESTED` (read through the zip's caps) and read by
    :func:`entries` with its own caps, then removed."""
    for entry in entries(download):
        if _ignored(entry.name):
            continue
        if _inner(entry, download):
            rel = f"{NESTED}/{entry.name.rsplit('/', 1)[-1]}"
            say(f"  reading {entry.name} out of {download.name} ({entry.size:,} bytes)")
            staging.write(rel, entry.read())
            path = staging.inside(rel)
            for inner in entries(path):
                if not _ignored(inner.name):
                    yield "/".join(inner.name.split("/")[-2:]), inner
            path.unlink()
            shutil.rmtree(staging.inside(NESTED), ignore_errors=True)
            continue
        yield "/".join(entry.name.split("/")[-2:]), entry


def _checked(key: str, expected: str, where: str):
    """The check ``stage`` runs on an image's bytes before it writes them: the listed sha256, then (``decode``) a
    whole decode."""

    def check(data: bytes, decode: bool = True) -> None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            refuse(f"{where}: image {key} has sha256 {actual[:16]}…, data_manifests/caltech-101.sha256 lists "
                   f"{expected[:16]}…: a damaged or different copy; get {caltech.ARCHIVE} again ({caltech.DOI})")
        if decode:
            try:
                decodes(data)
            except ValueError as error:
                refuse(f"{where}: image {key} matches its sha256 but does not decode ({error}): report it")
    return check


def prepare_caltech(source: Path, staging, options: dict, verify, say) -> Prepared:
    """Every image of the manifest's hash list from the download, checked and decoded, as ``<category>/<file>``.

    ``options["per_class"]`` (the Python API only, as a smoke test uses it): write only ``corpora.caltech.photos``'s
    seeded sample of that many photos per category (``options["sample_seed"]``, default 0), as ImageNet+'s capped
    extraction does; every photo of the download is still checked against its sha256 (the sample's are decoded too),
    and the record says which selection it holds (``corpora.caltech.require`` refuses a sample)."""
    result = Prepared()
    download = locate(source)
    result.inputs = verify({"images": download})
    listed = caltech.image_hashes()
    per_class, sample_seed = options.get("per_class"), int(options.get("sample_seed") or 0)
    wanted = (None if per_class is None else
              {key for keys in caltech.photos(int(per_class), sample_seed).values() for key in keys})
    say(f"  every photo is checked against its sha256 in data_manifests/caltech-101.sha256 ({len(listed):,} photos of "
        f"{len(caltech.categories())} categories)" + (" and decoded whole" if wanted is None else
                                                      f"; a sample of {per_class} per category is decoded and written"))
    seen: dict[str, None] = {}
    written: list[str] = []
    dropped: dict[str, set[str]] = {"the BACKGROUND_Google clutter folder (not a category)": set(),
                                    "not an image of the manifest's list": set()}
    for key, entry in images(download, staging, say):
        category = key.split("/", 1)[0]
        if category == caltech.CLUTTER:
            dropped["the BACKGROUND_Google clutter folder (not a category)"].add(key)
        elif key not in listed:
            dropped["not an image of the manifest's list"].add(entry.name)
        elif key not in seen:  # a member repeated in an archive is read once
            check = _checked(key, listed[key], str(entry.file or f"{download}: {entry.name}"))
            if wanted is None or key in wanted:
                stage(staging, key, entry, check=check)
                written.append(key)
            else:  # outside the sample: its sha256 is checked, nothing is written
                check(entry.read(), decode=False)
            seen[key] = None
    missing = [key for key in listed if key not in seen]
    if missing:
        refuse(f"{download}: {len(missing):,} of the {len(listed):,} images are missing (e.g. {missing[0]}): a "
               f"truncated or partial copy; get {caltech.ARCHIVE} again ({caltech.DOI})")
    per_folder = files_per_folder(staging, written)
    result.counts.update(categories=len(per_folder), images=len(written), photos_checked=len(seen),
                         files_per_folder=per_folder)
    result.settings = {"image_sha256": caltech.manifest()["image_sha256"]["sha256"],
                       "selection": "every photo" if wanted is None else {"per_class": int(per_class),
                                                                          "sample_seed": sample_seed}}
    result.dropped = {reason: found for reason, found in dropped.items() if found}
    return result


def hash_list(download: Path) -> str:
    """The lines of ``data_manifests/caltech-101.sha256`` (``<sha256>  <category>/<file>``, category order, then
    file name) for every image of a download outside the clutter folder; nothing is written to disk but the nested
    archive of a zip (in a temporary folder)."""
    import tempfile

    class _Scratch:  # the two Staging methods images() uses
        def __init__(self, path: Path) -> None:
            self.path = path

        def inside(self, rel: str) -> Path:
            return self.path / rel

        def write(self, rel: str, data: bytes) -> None:
            (self.path / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.path / rel).write_bytes(data)

    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, entry in images(locate(Path(download)), _Scratch(Path(tmp)), say=lambda _: None):
            if key.split("/", 1)[0] != caltech.CLUTTER and key.lower().endswith((".jpg", ".jpeg")):
                found[key] = hashlib.sha256(entry.read()).hexdigest()
    order = {c: i for i, c in enumerate(sorted({k.split("/", 1)[0] for k in found}))}
    keys = sorted(found, key=lambda k: (order[k.split("/", 1)[0]], k))
    return "".join(f"{found[k]}  {k}\n" for k in keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provision.prepare_caltech", description=__doc__.splitlines()[0])
    parser.add_argument("--hash-list", metavar="DOWNLOAD", required=True,
                        help="print the per-image hash list of a download (to data_manifests/caltech-101.sha256)")
    args = parser.parse_args(argv)
    print(hash_list(Path(args.hash_list)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

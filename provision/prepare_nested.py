"""ImageNet+ for ``python -m provision.prepare imagenet-plus``: two releases of per-synset tars, one capped selection.

ILSVRC2012_img_train.tar is a tar of 1,000 ``<wnid>.tar`` files; the ImageNet-21k releases (``fall11_whole.tar``,
``winter21_whole.tar.gz``) are tars of ~20k of them. ViTeRB's ImageNet+ reads the 1,000 IN-1k synsets as seen
classes and the ``n_unseen`` most populated other synsets as unseen ones, each capped at the manifest's
``seen_per_class`` / ``unseen_per_class`` images by a seeded sample (``data_manifests/imagenet-plus.yaml``). Uncapped
that is 1.3M + ~1M images; the loader reads 100k + 25k of them. So this step lists each release (the image count of
every synset, from the tar headers), applies the manifest's rule and caps *exactly as*
``corpora.full_sets.imagenet_plus_benchmark`` applies them to the folders on disk, and extracts only the images the
loader will choose (``--all-images``: every image of the chosen synsets). The loader, run on the capped folders,
selects the same synsets and the same images (tests/test_prepare.py checks it against a full extraction).

An uncompressed outer tar is listed by seeking over its headers (minutes for 1.3 TB); a compressed one is read twice,
once to list and once to extract (extract the outer archive first, ``tar xzf``, to read it once). A listing is kept
in the staging folder, so a resumed run does not list again. The preparation step as a whole: book/scale_out.md.
"""
from __future__ import annotations

import json
import os
import random
import re
import tarfile
from pathlib import Path

from corpora import manifests
from provision.archives import bounded_read, entries, no_link
from provision.prepare_sets import IMAGE_SUFFIXES, Entry, Prepared, files_per_folder, find, refuse, settings, stage

WNID = re.compile(r"(n\d{8})(?:\.tar)?$")
SEEN_NAMES = ["ILSVRC2012_img_train.tar", "ILSVRC2012_img_train", "train"]
UNSEEN_NAMES = ["fall11_whole.tar", "winter21_whole.tar.gz", "winter21_whole.tar", "fall11_whole", "winter21_whole",
                "imagenet21k", "imagenet-21k"]


def _image(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_SUFFIXES


class Synsets:
    """One release: a tar of ``<wnid>.tar`` (any compression), or a folder of ``<wnid>.tar`` files or ``<wnid>/``
    folders (read as :func:`provision.archives.entries` reads a folder: a symbolic link in it is refused, every
    image is copied, and an inner tar's members are read against the same per-member cap)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.compressed = path.is_file() and not _plain_tar(path)

    def _inner_tars(self, stream: bool):
        """(wnid, open inner TarFile) in release order."""
        if self.path.is_dir():
            for item in sorted(self.path.iterdir()):
                match = WNID.search(item.name)
                no_link(item, self.path)
                if match and item.is_file() and item.suffix == ".tar":
                    with tarfile.open(item, "r:") as inner:
                        yield match.group(1), inner
            return
        with tarfile.open(self.path, "r|*" if stream or self.compressed else "r:") as outer:
            for member in outer:
                match = WNID.search(member.name.rsplit("/", 1)[-1])
                if member.isfile() and match and member.name.endswith(".tar"):
                    with tarfile.open(fileobj=outer.extractfile(member), mode="r|" if stream else "r:") as inner:
                        yield match.group(1), inner

    def listing(self) -> dict[str, list[tuple[str, int]]]:
        """wnid -> [(image file name, bytes)] sorted by name."""
        out: dict[str, list[tuple[str, int]]] = {}
        if self.path.is_dir():
            for item in sorted(self.path.iterdir()):
                match = WNID.search(item.name)
                no_link(item, self.path)
                if match and item.is_dir():
                    found = list(os.scandir(item))
                    for e in found:
                        no_link(Path(e.path), self.path)
                    out[match.group(1)] = sorted((e.name, e.stat().st_size) for e in found
                                                 if e.is_file() and _image(e.name))
        for wnid, inner in self._inner_tars(stream=self.compressed):
            out[wnid] = sorted((m.name.rsplit("/", 1)[-1], m.size) for m in inner if m.isfile() and _image(m.name))
        return out

    def extract(self, wanted: dict[str, set[str]], staging, folder: str) -> list[str]:
        """Write ``<folder>/<wnid>/<name>`` for every wanted name; returns the relative paths written or kept."""

        done = []
        if self.path.is_dir():
            for wnid, names in wanted.items():
                no_link(self.path / wnid, self.path)
                if not (self.path / wnid).is_dir():
                    continue
                for entry in entries(self.path / wnid):
                    if entry.name in names:
                        rel = f"{folder}/{wnid}/{entry.name}"
                        stage(staging, rel, entry)
                        done.append(rel)
            todo = {w: n for w, n in wanted.items() if not (self.path / w).is_dir()}
        else:
            todo = wanted
        if not todo:
            return done
        for wnid, inner in self._inner_tars(stream=True):
            names = todo.get(wnid)
            if not names:
                continue
            for member in inner:
                name = member.name.rsplit("/", 1)[-1]
                if member.isfile() and name in names:
                    rel = f"{folder}/{wnid}/{name}"
                    stage(staging, rel, Entry(name, member.size, lambda m=member, t=inner, r=f"{wnid}.tar/{name}":
                                              bounded_read(t.extractfile(m), r, self.path)))
                    done.append(rel)
        return done


def _plain_tar(path: Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(6)
    return not head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd"))


def _cached_listing(release: Synsets, staging, role: str, say) -> dict[str, list[tuple[str, int]]]:
    path = staging.path / f".listing-{role}.json"
    stat = release.path.stat()
    stamp = [str(release.path), stat.st_size, stat.st_mtime_ns]
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("stamp") == stamp:
            return {k: [tuple(x) for x in v] for k, v in saved["synsets"].items()}
    say(f"  listing {release.path} ({role}) ...")
    found = release.listing()
    staging.write(path.name, json.dumps({"stamp": stamp, "synsets": found}).encode())
    return found


def capped(paths: list[str], cap, seed: int, key: str) -> list[str]:
    """``corpora.full_sets._full_benchmark``'s cap: over the sorted paths, a ``Random(f"{seed}:cap:{key}")`` sample."""
    paths = sorted(paths)
    if cap is not None and len(paths) > int(cap):
        return sorted(random.Random(f"{seed}:cap:{key}").sample(paths, int(cap)))
    return paths


def unseen_choice(counts: dict[str, int], splits: dict, seen: set[str]) -> list[str]:
    """The unseen synsets by the manifest's rule (``full_split``'s): ``unseen_wnids``, or the ``n_unseen`` non-seen
    synsets with the most images, ties to the smaller wnid."""
    candidates = {w: n for w, n in counts.items() if w not in seen and n > 0}
    if "unseen_wnids" in splits:
        missing = [w for w in splits["unseen_wnids"] if w not in candidates]
        if missing:
            refuse(f"unseen synsets {missing[:3]} (splits.unseen_wnids) have no images in the ImageNet-21k release")
        return sorted(splits["unseen_wnids"])
    n = int(splits["n_unseen"])
    ranked = sorted(candidates, key=lambda w: (-candidates[w], w))
    if len(ranked) < n:
        refuse(f"the ImageNet-21k release has {len(ranked)} non-IN-1k synsets with images, {n} needed")
    return sorted(ranked[:n])


def prepare_imagenet_plus(source: Path, staging, options: dict, verify, say) -> Prepared:
    """Seen: the IN-1k train images of each of the 1,000 wnids; unseen: the manifest's rule applied to the IN-21k
    synsets' image counts. By default only the images a run reads are extracted (the manifest's seeded cap per
    class, chosen exactly as corpora.full_sets does); ``all_images`` extracts every image of those classes."""
    result, applied = Prepared(), settings("imagenet-plus")
    manifest = manifests.load("imagenet-plus")
    layout, images, splits = manifest["layout"], manifest.get("images") or {}, manifest["splits"]
    seed = int(images.get("seed", 0))
    seen_wnids = list(manifests.load(splits["seen_manifest"])["class_dirs"])
    seen_release = Synsets(find(source, SEEN_NAMES, "the ImageNet-1k train images", folder_ok=True))
    unseen_release = Synsets(find(source, UNSEEN_NAMES, "the ImageNet-21k release", folder_ok=True))
    result.inputs = verify({"seen (IN-1k train)": seen_release.path, "unseen (IN-21k)": unseen_release.path})
    every = bool(options.get("all_images"))
    seen_list = _cached_listing(seen_release, staging, "seen", say)
    missing = [w for w in seen_wnids if not seen_list.get(w)]
    if missing:
        refuse(f"{seen_release.path}: {len(missing)} of the 1,000 IN-1k synsets have no images (e.g. {missing[0]})")
    unseen_list = _cached_listing(unseen_release, staging, "unseen", say)
    unseen = unseen_choice({w: len(v) for w, v in unseen_list.items()}, splits, set(seen_wnids))
    wanted = {}
    for role, wnids, listing, cap in (("seen", seen_wnids, seen_list, images.get("seen_per_class")),
                                      ("unseen", unseen, unseen_list, images.get("unseen_per_class"))):
        folder = layout[f"{role}_dir"]
        for wnid in wnids:
            paths = [f"{folder}/{wnid}/{name}" for name, _ in listing[wnid]]
            wanted[(role, wnid)] = {p.rsplit("/", 1)[-1] for p in (paths if every else capped(paths, cap, seed, wnid))}
    written = []
    for role, release in (("seen", seen_release), ("unseen", unseen_release)):
        chosen = {w: names for (r, w), names in wanted.items() if r == role}
        written += release.extract(chosen, staging, layout[f"{role}_dir"])
    per_folder = files_per_folder(staging, written)
    short = [f for (r, w), names in wanted.items() for f in [f"{layout[f'{r}_dir']}/{w}"]
             if per_folder.get(f) != len(names)]
    if short:
        refuse(f"{short[0]}: fewer images extracted than listed: the release changed while being read? Run again")
    result.counts.update(seen_classes=len(seen_wnids), unseen_classes=len(unseen), images=len(written),
                         selection="every image" if every else "the manifest's capped sample",
                         files_per_folder=per_folder)
    result.settings = applied
    result.dropped = {}
    return result

"""The steps of ``python -m provision.prepare`` for each full dataset: released files in, the loader's layout out.

One function per dataset, each ``(source, staging, options, verify, say) -> Prepared``: it finds the released files
under ``source`` (an archive or the folder it extracts to), has ``verify`` check them against the manifest, writes
the loader's layout into ``staging`` (:class:`provision.prepare.Staging`: atomic files, resumable) and reports
counts, drops and the settings it applied. Every choice is seeded from the manifest, never from the file system's
listing order. The image-caption datasets' images go into webdataset tar shards as they stream from the download
(:class:`provision.shards.ShardWriter`). The loaders these layouts feed: ``corpora.datasets.jsonl_pairs``
(cc3m-llava, flame-recap-cc3m),
``folder_labelled`` (imagenet-1k) and ``corpora.full_sets`` (awa2, cub, fgvc-aircraft, imagenet-plus). The
whole path from download to full run: book/scale_out.md.
"""
from __future__ import annotations

import functools
import io
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from corpora import manifests
from provision.archives import ArchiveError, Entry, entries  # noqa: F401  (re-exported for the preparers)
from provision.shards import ShardWriter

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}
READS = {
    "cc3m-llava": "chat.json and images.zip of the HF dataset liuhaotian/LLaVA-CC3M-Pretrain-595K "
                  "(or images/ unzipped)",
    "imagenet-1k": "ILSVRC2012_img_val.tar and ILSVRC2012_devkit_t12.tar.gz (or val images already in <wnid>/ folders)",
    "awa2": "AwA2-data.zip (or its Animals_with_Attributes2/ folder); optionally xlsa17.zip to check the split",
    "cub": "CUB_200_2011.tgz (or its CUB_200_2011/ folder); optionally xlsa17.zip to check the split",
    "fgvc-aircraft": "fgvc-aircraft-2013b.tar.gz (or its fgvc-aircraft-2013b/ folder)",
    "imagenet-plus": "ILSVRC2012_img_train.tar and an ImageNet-21k release (fall11_whole.tar, winter21_whole.tar.gz, "
                     "or a folder of <wnid>.tar files or <wnid>/ folders)",
    "flame-recap-cc3m": "flame-long-minicpm-samples_*.json (HF dataset caj/FLAME-ReCap-CC3M-MiniCPM-Llama3-V-2_5) and "
                        "the CC3M webdataset shards (*.tar of <key>.jpg, e.g. pixparse/cc3m-wds)",
    "caltech-101": "caltech-101.zip of CaltechDATA (DOI 10.22002/D1.20086), or its 101_ObjectCategories.tar.gz, a .tar "
                   "or the extracted folder (provision.prepare_caltech)",
}


class PrepareError(RuntimeError):
    """The downloads cannot become the dataset (missing file, wrong checksum, another version): one actionable line."""


@dataclass
class Prepared:
    """What a preparer reports: counts, dropped items (reason -> examples), the settings it applied, index files."""

    counts: dict = field(default_factory=dict)
    dropped: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    index_files: tuple[str, ...] = ()
    inputs: dict = field(default_factory=dict)


def refuse(message: str):
    raise PrepareError(message)


# ------------------------------------------------------------------------------------------ reading downloads
def find(source: Path, names: list[str], what: str, *, required: bool = True, folder_ok: bool = False) -> Path | None:
    """The first of ``names`` (a file or, with ``folder_ok``, a folder) in ``source`` or one level below."""
    for name in names:
        for base in (source, *sorted(p for p in source.iterdir() if p.is_dir())):
            path = base / name
            if path.is_file() or (folder_ok and path.is_dir()):
                return path
    if required:
        listing = ", ".join(sorted(p.name for p in source.iterdir())[:12]) or "nothing"
        refuse(f"{what} not found in {source} (looked for {', '.join(names)}; it holds {listing})")
    return None


def stage(staging, rel: str, entry: Entry, check: Callable[[bytes], None] | None = None) -> None:
    """``entry``'s bytes at ``rel`` in the staging folder, checked first (an image must decode whole), and always
    copied: never a link, so nothing done to the download later changes the prepared set. A file an earlier run
    staged is kept only when its bytes are the entry's (:meth:`provision.prepare.Staging.holds`), never by size."""
    if check is None and _is_image(rel):  # every image decodes whole before it is prepared, or prepare stops
        check = functools.partial(_must_decode, where=entry.file or entry.name)
    data = entry.read()
    if check is not None:
        check(data)
    if staging.holds(rel, data):
        staging.kept += 1
        return
    staging.write(rel, data)


def decodes(data: bytes) -> None:
    """Raise ValueError unless ``data`` decodes whole as an image.

    Why whole: PIL's ``verify()`` reads the header and structure only, so a truncated JPEG passes it and fails
    later, at feature time, with advice (prepare again) that would put the same file back."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as error:  # noqa: BLE001 - PIL raises many kinds
        raise ValueError(f"{type(error).__name__}: {error}") from None


def _must_decode(data: bytes, where) -> None:
    try:
        decodes(data)
    except ValueError as error:
        refuse(f"{where} does not decode as an image ({error}): the download is damaged; get it again (a file that "
              "does not decode is never prepared, so preparing again from the same copy stops here too)")


def _is_image(name: str) -> bool:
    return Path(name).suffix.lower() in IMAGE_SUFFIXES


def _listed_once(archive, name: str, what: str, keys: list[str]) -> list[str]:
    """``keys`` (the ids or names of a release's index file), refused when one is listed twice: a loader would give
    two labels one name (or one id two lines), and only a later count would notice."""
    seen = set()
    for key in keys:
        if key in seen:
            refuse(f"{archive}: {name} lists {what} {key!r} twice: a damaged or edited copy; get the release again")
        seen.add(key)
    return keys


# ------------------------------------------------------------------------------------------ settings and checks
def settings(dataset: str) -> dict:
    """The manifest's settings a preparation depends on (recorded; a change makes :func:`provision.prepare.check`
    fail)."""
    manifest = manifests.load(dataset)
    if dataset in ("cc3m-llava", "flame-recap-cc3m"):
        return {"split": manifest.get("prepare")}
    if dataset == "imagenet-plus":
        splits = manifest["splits"]
        return {"images": manifest.get("images"), "layout": manifest.get("layout"),
                "unseen": splits.get("unseen_wnids") or {"rule": splits.get("unseen_rule"),
                                                         "n": splits.get("n_unseen")}}
    return {}


def count_problems(dataset: str, folder: Path, record: dict, command: str) -> list[str]:
    """Files on disk against the recorded counts (a class folder emptied, images deleted after preparation)."""
    counts = record.get("counts", {})
    problems = []
    for rel, size in (counts.get("shards") or {}).items():  # the images' tar shards: there, and as long as written
        path = folder / rel
        found = path.stat().st_size if path.is_file() else None
        if found != size:
            state = "is missing" if found is None else f"holds {found:,} bytes, {size:,} were written"
            problems.append(f"dataset {dataset}: {path} {state}: run `{command} --force`")
            if len(problems) >= 3:
                problems.append(f"dataset {dataset}: (more shards differ)")
                return problems
    for rel, expected in (counts.get("files_per_folder") or {}).items():
        path = folder / rel
        found = sum(1 for e in os.scandir(path) if e.is_file() and _is_image(e.name)) if path.is_dir() else 0
        if found != expected:
            problems.append(f"dataset {dataset}: {path} holds {found} images, {expected} were prepared: "
                            f"run `{command} --force`")
            if len(problems) >= 3:
                problems.append(f"dataset {dataset}: (more folders differ)")
                break
    return problems


def files_per_folder(staging, rels: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rel in rels:
        counts[rel.rsplit("/", 1)[0]] = counts.get(rel.rsplit("/", 1)[0], 0) + 1
    return dict(sorted(counts.items()))


def _split_pairs(dataset: str, keys: list[str]) -> set[str]:
    """The held-out keys: ``min(val_pairs, max_val_fraction * n)`` (at least 1), a seeded sample of the sorted keys."""
    spec = manifests.load(dataset).get("prepare") or {}
    if not spec:
        refuse(f"data_manifests/{dataset}.yaml has no `prepare:` settings (val_pairs, max_val_fraction, seed)")
    n_val = max(1, min(int(spec["val_pairs"]), int(float(spec["max_val_fraction"]) * len(keys))))
    if len(keys) < 2:
        refuse(f"{dataset}: {len(keys)} usable pairs, too few to hold any out")
    return set(random.Random(int(spec["seed"])).sample(sorted(keys), n_val))


def _write_pairs(staging, dataset: str, rows: list[tuple[str, dict, str]], result, shards: dict[str, int]) -> None:
    """``train.jsonl`` / ``val.jsonl`` (release order) from (key, location in the shards, caption) rows: each line
    says where the image's bytes are (``shard``, ``member``, ``offset``, ``size``; :mod:`lib.data.shards`)."""
    held_out = _split_pairs(dataset, [key for key, _, _ in rows])
    lines = {"train": [], "val": []}
    for key, where, caption in rows:
        lines["val" if key in held_out else "train"].append(json.dumps({**where, "key": key, "caption": caption},
                                                                       ensure_ascii=False))
    for split, rows_ in lines.items():
        staging.write(f"{split}.jsonl", ("\n".join(rows_) + "\n").encode("utf-8"))
    result.counts.update(pairs=len(rows), train=len(lines["train"]), val=len(lines["val"]), shards=dict(shards))
    result.index_files = ("train.jsonl", "val.jsonl")


def _shard_writer(staging, dataset: str) -> ShardWriter:
    return ShardWriter(staging, int((manifests.load(dataset).get("prepare") or {}).get("shard_images", 10_000)))


def _sharded(writer: ShardWriter, key: str, entry: Entry, caption: str, bad: set) -> dict | None:
    """``entry``'s image appended to the shards (its location), or None (and ``key`` in ``bad``) when it does not
    decode whole."""
    data = entry.read()
    try:
        decodes(data)
    except ValueError:
        bad.add(key)
        return None
    return writer.add(key, data, Path(entry.name).suffix or ".jpg", caption)


def _caption_ok(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


# ------------------------------------------------------------------------------------------ the datasets
def cc3m_llava(source: Path, staging, options: dict, verify, say):
    """chat.json rows ``{"id", "image", "conversations": [human, gpt]}``: caption = the first gpt turn; images from
    images.zip (any folder inside it); a row whose image is absent or does not decode is dropped (recorded)."""
    result = Prepared()
    chat = find(source, ["chat.json"], "chat.json")
    images = find(source, ["images.zip", "images"], "images.zip", folder_ok=True)
    result.inputs = verify({"captions": chat, "images": images})
    wanted, rows, dropped = {}, [], {"no gpt caption": set(), "no image in the download": set(),
                                     "image does not decode": set()}
    for row in json.loads(chat.read_text(encoding="utf-8")):
        turns = [t.get("value") for t in row.get("conversations", []) if isinstance(t, dict) and t.get("from") == "gpt"]
        if not turns or not _caption_ok(turns[0]) or not isinstance(row.get("image"), str):
            dropped["no gpt caption"].add(str(row.get("id")))
            continue
        name = row["image"].rsplit("/", 1)[-1]
        wanted.setdefault(name, " ".join(turns[0].split()))
        rows.append((name, " ".join(turns[0].split())))
    writer, where = _shard_writer(staging, "cc3m-llava"), {}
    for entry in entries(images):  # the archive's order: one pass, each image once, into the shards
        name = entry.name.rsplit("/", 1)[-1]
        if name in wanted and name not in where and name not in dropped["image does not decode"]:
            found = _sharded(writer, name, entry, wanted[name], dropped["image does not decode"])
            if found is not None:
                where[name] = found
    shards = writer.close()
    dropped["no image in the download"] = set(wanted) - set(where) - dropped["image does not decode"]
    usable = [(name, where[name], caption) for name, caption in rows if name in where]
    _write_pairs(staging, "cc3m-llava", usable, result, shards)
    result.settings, result.dropped = settings("cc3m-llava"), {k: v for k, v in dropped.items() if v}
    return result


def flame_recap_cc3m(source: Path, staging, options: dict, verify, say):
    """The long re-captions (``{"__key__", "minicpm"}`` rows) joined by key with the images of the CC3M webdataset
    shards (``<key>.jpg`` members); keys without an image (or with one that does not decode) are dropped."""
    result = Prepared()
    captions = sorted(source.glob("**/flame-long-minicpm-samples_*.json"))
    if not captions:
        refuse(f"no flame-long-minicpm-samples_*.json under {source}: download the long re-captions of "
              "caj/FLAME-ReCap-CC3M-MiniCPM-Llama3-V-2_5")
    shards = sorted(p for p in source.glob("**/*.tar") if p.is_file())
    if not shards:
        refuse(f"no CC3M webdataset shards (*.tar) under {source}: download e.g. pixparse/cc3m-wds")
    result.inputs = verify({"captions": captions[0], **{f"shard {i}": p for i, p in enumerate(shards)}})
    text = {r["__key__"]: " ".join(r["minicpm"].split()) for r in json.loads(captions[0].read_text(encoding="utf-8"))
            if _caption_ok(r.get("minicpm"))}
    writer, where, bad = _shard_writer(staging, "flame-recap-cc3m"), {}, set()
    for shard in shards:
        for entry in entries(shard):
            key, suffix = os.path.splitext(entry.name.rsplit("/", 1)[-1])
            if suffix.lower() == ".jpg" and key in text and key not in where and key not in bad:
                found = _sharded(writer, key, entry, text[key], bad)
                if found is not None:
                    where[key] = found
    shards_written = writer.close()
    rows = [(key, where[key], caption) for key, caption in text.items() if key in where]
    _write_pairs(staging, "flame-recap-cc3m", rows, result, shards_written)
    result.settings = settings("flame-recap-cc3m")
    result.dropped = {k: v for k, v in {"no image in the shards": set(text) - set(where) - bad,
                                        "image does not decode": bad}.items() if v}
    return result


def _imagenet_devkit(devkit: Path) -> tuple[dict[int, str], list[int]]:
    """ILSVRC2012_ID -> wnid of the 1,000 leaf synsets (meta.mat) and the val images' IDs (ground truth), as
    torchvision's ``parse_devkit_archive`` reads them."""
    from scipy.io import loadmat

    found = {}
    for entry in entries(devkit):
        if entry.name.endswith(("data/meta.mat", "data/ILSVRC2012_validation_ground_truth.txt")):
            found[entry.name.rsplit("/", 1)[-1]] = entry.read()
    if len(found) != 2:
        refuse(f"{devkit}: data/meta.mat and data/ILSVRC2012_validation_ground_truth.txt not found: another devkit?")
    synsets = loadmat(io.BytesIO(found["meta.mat"]), squeeze_me=True)["synsets"]
    leaves = {int(s[0]): str(s[1]) for s in synsets if int(s[4]) == 0}
    truth = [int(line) for line in found["ILSVRC2012_validation_ground_truth.txt"].decode().split()]
    return leaves, truth


def imagenet_1k(source: Path, staging, options: dict, verify, say):
    """The val tar's ``ILSVRC2012_val_<n>.JPEG`` sorted into ``<wnid>/`` by the devkit's ground truth; or images
    already in ``<wnid>/`` folders (copied). Every one of the manifest's 1,000 wnids must get images."""
    result = Prepared()
    wnids = list(manifests.load("imagenet-1k")["class_dirs"])
    tar = find(source, ["ILSVRC2012_img_val.tar"], "the val tar", required=False)
    written = []
    if tar is None:  # already sorted (valprep.sh, or a copy laid out by hand)
        folder = (source if (source / wnids[0]).is_dir()
                  else find(source, ["val"], "ILSVRC2012_img_val.tar", folder_ok=True))
        result.inputs = verify({"sorted images": folder})
        for entry in entries(folder):
            wnid = entry.name.split("/")[0]
            if wnid in wnids and _is_image(entry.name):
                stage(staging, entry.name, entry)
                written.append(entry.name)
    else:
        devkit = find(source, ["ILSVRC2012_devkit_t12.tar.gz"], "the devkit (ground truth of the val images)")
        result.inputs = verify({"val images": tar, "devkit": devkit})
        leaves, truth = _imagenet_devkit(devkit)
        if set(leaves.values()) != set(wnids):
            refuse(f"{devkit}: its 1,000 classes are not the wnids of data_manifests/imagenet-1k.yaml: "
                   "another release?")
        pattern = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG$")
        for entry in entries(tar):
            match = pattern.search(entry.name)
            if match and 1 <= int(match.group(1)) <= len(truth):
                rel = f"{leaves[truth[int(match.group(1)) - 1]]}/{match.group(0)}"
                stage(staging, rel, entry)
                written.append(rel)
        if len(written) != len(truth):
            refuse(f"{tar} holds {len(written):,} of the {len(truth):,} val images the devkit lists: "
                  "a truncated download")
    per_folder = files_per_folder(staging, written)
    empty = [w for w in wnids if w not in per_folder]
    if empty:
        refuse(f"{len(empty)} of the 1,000 classes have no image (e.g. {empty[0]}): an incomplete copy")
    result.counts.update(classes=len(per_folder), images=len(written), files_per_folder=per_folder)
    return result


def _xlsa17_check(source: Path, dataset: str, classes: list[str], say) -> None:
    """Xian et al.'s proposed split (xlsa17/data/<AWA2|CUB>/testclasses.txt) against the manifest's unseen list."""
    where = find(source, ["xlsa17.zip", "xlsa17"], "xlsa17", required=False, folder_ok=True)
    if where is None:
        say(f"  (no xlsa17.zip in the downloads: the manifest's unseen list of {dataset} is used unchecked)")
        return
    sub = {"awa2": "AWA2", "cub": "CUB"}[dataset]
    lists = {e.name.rsplit("/", 1)[-1]: e.read().decode().split() for e in entries(where)
             if f"data/{sub}/" in e.name and e.name.endswith(("testclasses.txt", "trainvalclasses.txt"))}
    unseen = set(manifests.load(dataset)["splits"]["unseen"])
    test = set(lists.get("testclasses.txt", []))
    if test != unseen:
        refuse(f"{where}: data/{sub}/testclasses.txt differs from splits.unseen of data_manifests/{dataset}.yaml "
              f"(only in the file: {sorted(test - unseen)[:3]}, only in the manifest: {sorted(unseen - test)[:3]})")
    overlap = set(lists.get("trainvalclasses.txt", [])) & unseen
    if overlap:
        refuse(f"{where}: trainvalclasses.txt of {sub} names unseen classes {sorted(overlap)[:3]}")
    say(f"  xlsa17 {sub} split matches the manifest: {len(test)} unseen classes")


def awa2(source: Path, staging, options: dict, verify, say):
    """``.../JPEGImages/<class>/<file>`` of AwA2-data.zip (or its folder) -> ``<class>/<file>`` for the manifest's
    classes."""
    result = Prepared()
    archive = find(source, ["AwA2-data.zip", "Animals_with_Attributes2"], "AwA2-data.zip", folder_ok=True)
    result.inputs = verify({"images": archive})
    classes = list(manifests.load("awa2")["classes"])
    known, written, other = set(classes), [], set()
    for entry in entries(archive):
        parts = entry.name.split("/")
        if "JPEGImages" in parts[:-2] and _is_image(entry.name):
            cls = parts[parts.index("JPEGImages") + 1]
            if cls in known:
                stage(staging, f"{cls}/{parts[-1]}", entry)
                written.append(f"{cls}/{parts[-1]}")
            else:
                other.add(cls)
    per_folder = files_per_folder(staging, written)
    missing = [c for c in classes if c not in per_folder]
    if missing:
        refuse(f"{archive}: {len(missing)} of the 50 classes have no images under JPEGImages/ (e.g. {missing[0]})")
    _xlsa17_check(source, "awa2", classes, say)
    result.counts.update(classes=len(per_folder), images=len(written), files_per_folder=per_folder)
    result.dropped = {"not a class of the manifest": other} if other else {}
    return result


def cub(source: Path, staging, options: dict, verify, say):
    """classes.txt, images.txt and images/ of CUB_200_2011 (archive or folder), checked against each other."""
    result = Prepared()
    archive = find(source, ["CUB_200_2011.tgz", "CUB_200_2011"], "CUB_200_2011.tgz", folder_ok=True)
    result.inputs = verify({"images": archive})
    written, lists = [], {}
    for entry in entries(archive):
        rel = entry.name.split("CUB_200_2011/", 1)[-1] if "CUB_200_2011/" in entry.name else entry.name
        if rel in ("classes.txt", "images.txt"):
            lists[rel] = entry.read()
            staging.write(rel, lists[rel])
        elif rel.startswith("images/") and _is_image(rel):
            stage(staging, rel, entry)
            written.append(rel)
    if set(lists) != {"classes.txt", "images.txt"}:
        refuse(f"{archive}: classes.txt and images.txt not found: not CUB_200_2011?")
    rows = [line.split(maxsplit=1) for line in lists["classes.txt"].decode().splitlines() if line.strip()]
    _listed_once(archive, "classes.txt", "class id", [row[0] for row in rows])
    classes = _listed_once(archive, "classes.txt", "class", [row[-1] for row in rows])
    absent = [c for c in manifests.load("cub")["splits"]["unseen"] if c not in classes]
    if absent:
        refuse(f"{archive}: unseen class {absent[0]!r} of data_manifests/cub.yaml is not in classes.txt: "
              "another version?")
    rows = [line.split(maxsplit=1) for line in lists["images.txt"].decode().splitlines() if line.strip()]
    _listed_once(archive, "images.txt", "image id", [row[0] for row in rows])
    listed = set(_listed_once(archive, "images.txt", "image", ["images/" + row[-1] for row in rows]))
    missing = sorted(listed - set(written))
    if missing:
        refuse(f"{archive}: {len(missing)} images listed in images.txt are missing (e.g. {missing[0]}): "
              "a truncated download")
    _xlsa17_check(source, "cub", classes, say)
    per_folder = files_per_folder(staging, written)
    result.counts.update(classes=len(classes), images=len(written), files_per_folder=per_folder)
    result.index_files = ("classes.txt", "images.txt")
    return result


def fgvc_aircraft(source: Path, staging, options: dict, verify, say):
    """data/ of fgvc-aircraft-2013b (families.txt, the three images_family_*.txt lists, the listed images/)."""
    result = Prepared()
    layout = manifests.load("fgvc-aircraft")["layout"]
    archive = find(source, ["fgvc-aircraft-2013b.tar.gz", "fgvc-aircraft-2013b"], "fgvc-aircraft-2013b.tar.gz",
                   folder_ok=True)
    result.inputs = verify({"images": archive})
    keep = {layout["classes"], *layout["images"]}
    written, lists = [], {}
    for entry in entries(archive):
        rel = entry.name.split("data/", 1)[-1] if "data/" in entry.name else entry.name
        if rel in keep:
            lists[rel] = entry.read()
            staging.write(rel, lists[rel])
        elif rel.startswith(f"{layout['image_dir']}/") and _is_image(rel):
            stage(staging, rel, entry)
            written.append(rel)
    if set(lists) != keep:
        refuse(f"{archive}: {', '.join(sorted(keep - set(lists)))} not found under data/: not fgvc-aircraft-2013b?")
    listed = {f"{layout['image_dir']}/{line.split()[0]}{layout['image_suffix']}"
              for name in layout["images"] for line in lists[name].decode().splitlines() if line.strip()}
    missing = sorted(listed - set(written))
    if missing:
        refuse(f"{archive}: {len(missing)} listed images are missing (e.g. {missing[0]}): a truncated download")
    families = _listed_once(archive, layout["classes"], "family",
                            [f for f in lists[layout["classes"]].decode().splitlines() if f.strip()])
    counts = files_per_folder(staging, written)
    result.counts.update(families=len(families), images=len(written), files_per_folder=counts)
    result.index_files = tuple(sorted(keep))
    return result


# The flat-archive preparers; ImageNet+ (nested archives) is provision.prepare_nested's, and provision.prepare holds
# the registry of both.
PREPARERS = {"cc3m-llava": cc3m_llava, "imagenet-1k": imagenet_1k, "awa2": awa2, "cub": cub,
             "fgvc-aircraft": fgvc_aircraft, "flame-recap-cc3m": flame_recap_cc3m}

"""Dataset manifests: where each dataset comes from, its licence, its files and their checksums.

Why: a number is only reproducible if the bytes behind it are. Every dataset the book reads has a
YAML file in ``data_manifests/``; its content hash enters every feature-store key built from the dataset,
and a missing or altered file stops the run with a message that says where to get it and where
to put it.

See notebooks/viterb.py, section "Seen and unseen classes, as data".
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import yaml

from lib.core.checksums import file_sha256
from lib.core.paths import REPO_ROOT, cache_root

MANIFEST_DIR = REPO_ROOT / "data_manifests"


class DatasetMissingError(FileNotFoundError):
    """A dataset file is absent or does not match its manifest."""


def manifest_path(name: str) -> Path:
    return MANIFEST_DIR / f"{name}.yaml"


@lru_cache(maxsize=None)
def load(name: str) -> dict:
    path = manifest_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in MANIFEST_DIR.glob("*.yaml")))
        raise DatasetMissingError(f"no manifest {path}: known datasets are {known}")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


# Keys that tell a person how to get or rebuild the files, never what the files are: editing them (or a comment)
# keeps every stored feature. Everything else (files, checksums, splits, settings) is the dataset's identity.
INSTRUCTION_KEYS = frozenset({"description", "obtain", "made_by"})


def _identity(value):
    if isinstance(value, dict):
        return {k: _identity(v) for k, v in value.items() if k not in INSTRUCTION_KEYS}
    if isinstance(value, list):
        return [_identity(v) for v in value]
    return value


def manifest_hash(name: str) -> str:
    """sha256 of the manifest's content (canonical JSON, without comments and :data:`INSTRUCTION_KEYS`): part of
    every store key built from this dataset."""
    return hashlib.sha256(json.dumps(_identity(load(name)), sort_keys=True, default=str).encode()).hexdigest()


def location(name: str) -> Path:
    """The folder holding the dataset's files (``location`` in the manifest, overridable by env)."""
    manifest = load(name)
    env = f"{name.upper().replace('-', '_')}_DIR"
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    folder = Path(manifest["location"]).expanduser()
    if folder.is_absolute():
        return folder
    if folder.parts[:2] == (".cache", "assets"):
        return cache_root().joinpath("assets", *folder.parts[2:])
    return REPO_ROOT / folder


_VERIFIED: set[tuple[str, int, int]] = set()


def dataset_file(name: str, file: str) -> Path:
    """Path of one file of a dataset, checked against the manifest's sha256 (once per process)."""
    manifest = load(name)
    entries = {entry["file"]: entry for entry in manifest.get("files", [])}
    if file not in entries:
        raise DatasetMissingError(f"{file!r} is not a file of dataset {name!r} ({manifest_path(name)})")
    folder = location(name)
    path = folder / file
    how = " ".join(str(manifest.get("obtain", "")).split())
    if not path.is_file():
        raise DatasetMissingError(
            f"dataset {name!r}: {path} is missing. Get it: {how} Put it in {folder}."
        )
    stat = path.stat()
    stamp = (str(path), stat.st_size, stat.st_mtime_ns)
    expected = entries[file].get("sha256")
    if expected and stamp not in _VERIFIED:
        actual = file_sha256(path)
        if actual != expected:
            raise DatasetMissingError(
                f"dataset {name!r}: {path} has sha256 {actual[:12]}…, the manifest expects {expected[:12]}…: "
                f"the file is corrupt or another version. Delete it and get it again: {how}"
            )
        _VERIFIED.add(stamp)
    return path


# ---- folders built once from the manifest's inputs (unpacked packages, corpus indexes) ----
_CHECKED: set[Path] = set()


def unpacked_once(target: Path, extract, remedy: str) -> Path:
    """``target``, unpacked by ``extract(target)`` unless its ``contents.json`` (written last, so its presence means
    the folder is complete) is there; a folder without it is an interrupted unpacking and is unpacked again. The
    first time a process opens it, every file listed is checked to be present with its recorded size; otherwise one
    error names the file and ``remedy``."""
    import shutil

    if not (target / "contents.json").is_file():
        if target.exists():
            shutil.rmtree(target)
        extract(target)
    if target not in _CHECKED:
        contents = json.loads((target / "contents.json").read_text(encoding="utf-8"))
        for rel, record in contents.items():
            path = target / rel
            if not path.is_file() or path.stat().st_size != record["bytes"]:
                state = ("is missing" if not path.is_file()
                         else f"has {path.stat().st_size} bytes, not {record['bytes']}")
                raise DatasetMissingError(f"{path} {state}: {remedy}")
        _CHECKED.add(target)
    return target


def forget(target: Path | None = None) -> None:
    """Check ``target`` (None: every folder) again the next time it is opened (after it was deleted or rebuilt)."""
    if target is None:
        _CHECKED.clear()
    else:
        _CHECKED.discard(target)


def index_once(target: Path, build) -> dict:
    """``target/index.json``, built by ``build(target)`` unless it is there (a folder without it is an interrupted
    build and is built again)."""
    import shutil

    if not (target / "index.json").is_file():
        if target.exists():
            shutil.rmtree(target)
        build(target)
    return json.loads((target / "index.json").read_text(encoding="utf-8"))


def read_capped(path: str | Path, most: int, error: type[Exception], what: str) -> bytes:
    """The bytes of ``path``, refused with ``error`` (naming the file) above ``most`` bytes or when unreadable."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > most:
            raise error(f"{path}: {size} bytes, more than the {most} {what} may have")
        return path.read_bytes()
    except OSError as failure:
        raise error(f"{path} cannot be read ({type(failure).__name__}: {failure})") from None

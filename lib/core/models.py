"""Where each named model's weights come from, and the identity that keys its cached features.

A model is always named by a string: a hub id (keyed by its commit), a local folder (keyed by its files'
sha256), or an ``offline/`` name, resolved by the first entry point of the group ``frozen_lip.offline_models``
(the book's is ``provision.offline_models``), so the library imports no such registry itself.
See ``notebooks/sharelock.py``, section "The frozen encoders and the frozen-feature pipeline".
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

from lib.core import paths
from lib.core.atomic import write_json
from lib.core.checksums import file_sha256

OFFLINE_PREFIX = "offline/"
# Files whose bytes change a model's outputs (weights, configs, tokenizer vocabularies, custom code): all
# of them key the features of a local model folder. Hidden files and folders (.git, .cache) do not.
WEIGHT_SUFFIXES = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".onnx", ".json", ".txt", ".model",
                    ".tiktoken", ".py"}


class ModelNotFoundError(FileNotFoundError):
    """A model name that is neither an offline model, a local folder, nor reachable on the hub."""


@dataclass(frozen=True)
class ResolvedModel:
    """What a loader needs: the string to pass to ``from_pretrained`` / timm, and an identity."""

    name: str
    load_path: str
    library: str
    identity: dict  # everything about the weights that changes features (part of store keys)
    timm_architecture: str | None = None  # a timm weights file: the architecture to load it into
    timm_cfg_overlay: dict = field(default_factory=dict)  # ... and its preprocessing (timm's pretrained_cfg keys)


OFFLINE_ENTRY_POINTS = "frozen_lip.offline_models"


@functools.cache
def offline_resolver() -> Callable[[str, str], ResolvedModel]:
    """The registry that resolves ``offline/`` names: the first entry point of :data:`OFFLINE_ENTRY_POINTS`."""
    found = sorted(metadata.entry_points(group=OFFLINE_ENTRY_POINTS), key=lambda e: e.name)
    if not found:
        raise ModelNotFoundError(
            f"no registry of offline/ models is installed (entry point group {OFFLINE_ENTRY_POINTS!r}): run "
            "`pip install -e .` in the book's checkout (make setup does), or name a hub id or a local folder")
    return found[0].load()


def is_hub_id(name: str) -> bool:
    """``owner/name`` of the Hugging Face hub: not an offline model, not a local path (see :func:`resolve`)."""
    return (bool(name) and not name.startswith(OFFLINE_PREFIX) and not name.startswith(("/", "./", "../", "~"))
            and name.count("/") == 1 and not Path(name).expanduser().exists())


def resolve(name: str, library: str, revision: str | None = None) -> ResolvedModel:
    """Turn a model name from a config into something ``transformers`` / ``timm`` can load.

    ``library`` is the loader the config names; it must agree with an offline model's own.
    """
    if name.startswith(OFFLINE_PREFIX):
        return offline_resolver()(name, library)
    local = Path(name).expanduser()
    looks_local = name.startswith(("/", "./", "../", "~")) or name.count("/") > 1
    if looks_local and not local.exists():
        raise ModelNotFoundError(
            f"model folder {local} does not exist: check the path in the config "
            "(a hub id has the form owner/name; a local path must point to a folder or file)"
        )
    if local.exists():
        return ResolvedModel(name, str(local), library, _local_identity(local))
    # A hub id: keyed by the commit the revision resolves to, so that a moving branch ("main") never reuses the
    # features of older weights; the commit is recorded with the features (the store's spec.json).
    return ResolvedModel(name, name, library,
                         {"name": name, "revision": hub_commit(name, revision) or revision or "main"})


_COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_commit(name: str, revision: str | None = None) -> str | None:
    """The commit hash that ``revision`` (default ``main``) of hub model ``name`` names: the revision itself when it is
    a full hash; else the local Hugging Face cache's snapshot for it (what ``from_pretrained`` will load with the hub
    off); else, with the hub reachable, the hub's answer. ``None`` when none of these knows (an offline machine
    without the model: loading fails there anyway, with its own message)."""
    revision = revision or "main"
    if _COMMIT.fullmatch(revision):
        return revision
    try:
        from huggingface_hub import try_to_load_from_cache

        for filename in ("config.json", "preprocessor_config.json", "tokenizer_config.json"):
            found = try_to_load_from_cache(name, filename, revision=revision)
            if isinstance(found, str):
                commit = Path(found).parent.name
                if _COMMIT.fullmatch(commit):
                    return commit
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            return None
        from huggingface_hub import HfApi

        return HfApi().model_info(name, revision=revision).sha
    except Exception:  # noqa: BLE001  (no answer is not an error here; the loader reports real failures)
        return None


def _local_identity(local: Path) -> dict:
    """A local folder or file, keyed by its contents only: moving or renaming it keeps its features.

    Folder: the sha256 of each file that changes the outputs (``WEIGHT_SUFFIXES``), by its path inside
    the folder. File: its sha256. Hashes are cached (:func:`file_hashes`), so a fully cached run reads no weights.
    """
    if local.is_dir():
        files = {p.relative_to(local).as_posix(): p for p in sorted(local.rglob("*"))
                 if p.suffix in WEIGHT_SUFFIXES and p.is_file()
                 and not any(part.startswith(".") for part in p.relative_to(local).parts)}
        return {"local": "folder", "sha256": file_hashes(local, files)}
    return {"local": "file", "sha256": file_hashes(local.parent, {local.name: local})[local.name]}


def file_hashes(folder: Path, files: dict[str, Path]) -> dict[str, str]:
    """sha256 of each file, re-hashing only those whose (size, mtime_ns, ctime_ns) changed since the last call.

    Recorded per folder under ``lib.core.paths.cache_root()/hashes/``; an unwritable record only costs time."""
    real, record, known = str(folder.resolve()), None, {}
    try:
        record = paths.cache_root() / "hashes" / f"{hashlib.sha256(real.encode()).hexdigest()[:32]}.json"
        known = json.loads(record.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    fresh = {}
    for rel, path in files.items():
        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        old = known.get(rel) if isinstance(known, dict) else None
        same = isinstance(old, dict) and old.get("stamp") == stamp and isinstance(old.get("sha256"), str)
        fresh[rel] = {"stamp": stamp, "sha256": old["sha256"] if same else file_sha256(path)}
    if fresh != known and record is not None:
        try:
            write_json(record, {"folder": real, "files": fresh})
        except OSError:
            pass
    return {rel: value["sha256"] for rel, value in fresh.items()}



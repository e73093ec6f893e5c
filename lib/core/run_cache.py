"""A cache of training runs: :func:`lib.core.train.fit` reads a run it has already done instead of redoing it.

Why: on one CPU process ``fit`` is deterministic, so a run is a pure function of its inputs. The key names
everything a run reads: tensors, seed, settings, device, the method's submodules, parameters and attributes, and
the ``lib`` code it can reach (:mod:`lib.core.code_closure`). What the key cannot name is trained, not cached.
Opt-in with ``LIB_RUN_CACHE=1``; ``make clean-cache`` drops it.

See notebooks/sharelock.py, section "Training the head" (the run cache).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lib.core import atomic, checksums, code_closure, paths

__all__ = ["enabled", "run_key", "key_or_none", "load", "save", "sweep_stale", "cache_dir", "counts"]

SCHEMA = 2  # 2: entries carry checksums.json
_FILES = ("weights.pt", "run.json")
_LOOP_MODULES = ["lib.core.train"]
_COUNTS = {"trained": 0, "read": 0}  # this process's runs (a notebook's kernel): recorded in metrics.json
_SKIP = {"_parameters", "_buffers", "_modules", "training", "_non_persistent_buffers_set"}


def enabled() -> bool:
    """``LIB_RUN_CACHE=1`` (or ``true``/``yes``/``on``) turns the cache on."""
    return os.environ.get("LIB_RUN_CACHE", "").strip().lower() in {"1", "true", "yes", "on"}


def counts() -> dict[str, int]:
    """How many runs this process trained and how many it read back (``metrics.json``'s ``training``)."""
    return dict(_COUNTS)


def count(read: bool) -> None:
    _COUNTS["read" if read else "trained"] += 1


def cache_dir() -> Path:
    return paths.cache_root() / "runs"


class Unnameable(Exception):
    """Something a run reads that the key cannot name: the run is trained, not cached."""


def _tensor_digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().to("cpu").contiguous()
    flat = data.reshape(-1)
    raw = flat.view(torch.uint8) if data.dtype != torch.bool else flat.to(torch.uint8)
    digest = hashlib.blake2b(raw.numpy().tobytes() if raw.numel() else b"", digest_size=20).hexdigest()
    return f"{data.dtype}{tuple(data.shape)}:{digest}"


def _rows_digest(rows: Any) -> str:
    """A training source's name: a tensor's content digest, or the store key of rows streamed from the store (the
    key names the features' content, so a streamed run is cached as surely as a resident one)."""
    if isinstance(rows, torch.Tensor):
        return _tensor_digest(rows)
    cached = getattr(rows, "cached", None)
    if cached is None or not getattr(cached, "key", None):
        raise Unnameable(f"a {type(rows).__name__} training source names no content")
    view = [getattr(rows, name, None) for name in ("per_row", "first", "rows", "dtype")]
    return f"store:{cached.key}:{view}"


def _value(value: Any, where: str) -> Any:
    if isinstance(value, torch.Tensor):
        return _tensor_digest(value)
    if isinstance(value, torch.Generator):
        return "generator:" + _tensor_digest(value.get_state())
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _value(v, f"{where}[{k!r}]") for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted(repr(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _value(getattr(value, f.name), f"{where}.{f.name}") for f in dataclasses.fields(value)}
    qualname = getattr(value, "__qualname__", "")
    if callable(value) and isinstance(qualname, str) and qualname and "<" not in qualname:
        return f"callable:{getattr(value, '__module__', '?')}.{qualname}"  # a named function: its code is keyed
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        raise Unnameable(f"{where} is a {type(value).__name__} whose repr names no content")
    return f"{type(value).__module__}.{type(value).__qualname__}:{text}"


def method_fingerprint(method: nn.Module) -> dict:
    """Every submodule's class, parameters, buffers and plain attributes (see the module docstring)."""
    out = {}
    for name, module in method.named_modules():
        entry = {"class": f"{type(module).__module__}.{type(module).__qualname__}"}
        entry["state"] = {k: _tensor_digest(v) for k, v in module.state_dict(keep_vars=True).items() if "." not in k}
        entry["requires_grad"] = sorted(k for k, p in module.named_parameters(recurse=False) if p.requires_grad)
        attrs = {k: v for k, v in vars(module).items() if k not in _SKIP and not k.startswith("_")}
        entry["attrs"] = {k: _value(v, f"{name or 'method'}.{k}") for k, v in sorted(attrs.items())}
        out[name or "."] = entry
    return out


_DIGESTS: dict[str, tuple[list[Path], list[tuple[int, int]], str]] = {}  # module -> (closure, stats, digest)


def _stats(files: list[Path]) -> list[tuple[int, int]]:
    return [(stat.st_mtime_ns, stat.st_size) for stat in (path.stat() for path in files)]


def _code_digest(method: nn.Module) -> str:
    """The digest of the ``lib`` files the method and the training loop can run.

    Kept per process and module, recomputed when a file of the closure changes (mtime or size)."""
    module = type(method).__module__
    cached = _DIGESTS.get(module)
    if cached is not None:
        files, stats, digest = cached
        try:
            if _stats(files) == stats:
                return digest
        except FileNotFoundError:  # a file of the closure was removed: recompute
            pass
    files = code_closure.closure([module, *_LOOP_MODULES])
    stats = _stats(files)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(paths.REPO_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    _DIGESTS[module] = (files, stats, digest.hexdigest())
    return digest.hexdigest()


def run_key(method: nn.Module, train: dict[str, torch.Tensor], val: dict[str, torch.Tensor] | None,
            settings: Any, seed: int, device: str) -> str:
    """The run's key (hex), or raises :class:`Unnameable` (see the module docstring)."""
    if not type(method).__module__.startswith("lib."):
        raise Unnameable(f"{type(method).__qualname__} is not defined in lib, so its code cannot be keyed")
    parts = {
        "schema": SCHEMA,
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "device": str(device),
        "seed": int(seed),
        "settings": _value(settings, "settings"),
        "train": {k: _rows_digest(v) for k, v in sorted(train.items())},
        "val": None if val is None else {k: _tensor_digest(v) for k, v in sorted(val.items())},
        "method": method_fingerprint(method),
        "code": _code_digest(method),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def key_or_none(method: nn.Module, train: dict[str, torch.Tensor], val: dict[str, torch.Tensor] | None,
                settings: Any, seed: int, device: Any) -> str | None:
    """The run's key when the cache is on (``LIB_RUN_CACHE=1``) and the run can be keyed, else None."""
    if not enabled():
        return None
    try:
        return run_key(method, train, val, settings, seed, str(device))
    except Unnameable as reason:
        warnings.warn(f"run cache: this run is trained and not cached: {reason}", stacklevel=3)
        return None


def _entry(key: str) -> Path:
    return cache_dir() / key[:2] / key


STALE_SECONDS = 3600  # a temporary entry folder this old was left by a killed process: swept on the next write


def _checksums(folder: Path) -> dict[str, str]:
    return {name: checksums.file_digest(folder / name, checksums.STORE_ALGORITHM) for name in _FILES}


def _damage(entry: Path) -> str | None:
    """Why an entry cannot be believed (None when both files have the checksums written with them)."""
    try:
        recorded = json.loads((entry / "checksums.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"its checksums.json cannot be read ({type(error).__name__})"
    if not isinstance(recorded, dict) or recorded.get("algorithm") != checksums.STORE_ALGORITHM:
        return "its checksums.json names no known algorithm"
    for name in _FILES:
        path = entry / name
        if not path.is_file():
            return f"{name} is missing"
        if checksums.file_digest(path, checksums.STORE_ALGORITHM) != recorded.get("files", {}).get(name):
            return f"{name} does not match its checksum"
    return None


def load(key: str, method: nn.Module) -> dict | None:
    """The stored result fields, with the stored weights loaded into ``method``; None when absent or damaged.

    Both files are checked against the checksums written with them before either is read: a flipped byte in the
    weights or an edited ``run.json`` is retrained (with one warning line), never returned as a result."""
    entry = _entry(key)
    if not entry.exists():
        return None
    damage = _damage(entry)
    if damage is None:
        try:
            fields = json.loads((entry / "run.json").read_text(encoding="utf-8"))
            state = torch.load(entry / "weights.pt", map_location="cpu", weights_only=True)
            method.load_state_dict(state)
            return fields
        except Exception as error:  # noqa: BLE001  (intact bytes that still do not fit the method: retrain)
            damage = f"it cannot be read ({type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:160]})"
    warnings.warn(f"run cache entry {entry}: {damage}; retraining the run and replacing the entry", stacklevel=3)
    return None


def sweep_stale(folder: Path, older_than: float = STALE_SECONDS) -> list[Path]:
    """Remove the temporary entry folders (``.<key>.*.tmp``) that a killed process left in ``folder``."""
    removed = []
    now = time.time()
    for tmp in Path(folder).glob(".*.tmp"):
        try:
            if tmp.is_dir() and now - tmp.stat().st_mtime > older_than:
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
        except OSError:
            continue
    return removed


def save(key: str, method: nn.Module, fields: dict) -> None:
    """Write the entry whole or not at all (:func:`lib.core.atomic.building_dir`), its checksums last."""
    try:
        with atomic.building_dir(_entry(key)) as tmp:
            state = {k: v.detach().to("cpu") for k, v in method.state_dict().items()}
            torch.save(state, tmp / "weights.pt")
            atomic.write_json(tmp / "run.json", fields)
            atomic.write_json(tmp / "checksums.json",
                              {"algorithm": checksums.STORE_ALGORITHM, "files": _checksums(tmp)})
        sweep_stale(_entry(key).parent)
    except (OSError, ValueError) as error:  # ValueError: a non-finite number, which strict JSON refuses
        print(f"run cache: could not write {_entry(key)} ({error}); the run is not cached", file=sys.stderr)

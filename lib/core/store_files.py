"""The store's files: canonical keys, atomic writes, locks, checked sidecars and manifests, and the
read side (:class:`CachedFeatures`, memory-mapped shards checked against their checksum).

Why apart from ``lib.core.store``: these are the on-disk guarantees the store builds on, each small and tested by
damaging files (tests/test_reliability_store.py); they are described in book/design.md.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import secrets
import shlex
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import torch

from lib.core.checksums import STORE_ALGORITHM, STORE_ALGORITHMS, buffer_digest, file_digest

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows: no flock, see book/design.md)
    fcntl = None

STORE_DTYPES = ("float16", "float32")
VERIFY_POLICIES = ("always", "once", "never")
_META = ("spec.json", "ids.json", "manifest.json")  # small files written under the entry lock
verified_files: set[tuple] = set()  # files whose checksum this process has checked ("once" policy)
verified_files_lock = threading.Lock()
_no_flock_warned = False

# Test hook (tests/_precompute_worker.py): when set, called with the name of each step of a write, so a
# test can SIGKILL the process at exactly that point. Events: "shard_claimed", "shard_computed",
# "manifest_dropped" (a complete entry with a lost shard made incomplete again), and for
# each file kind K in spec, ids, npy, sidecar, manifest: "K_partial" (half the temp file written),
# "before_K_rename", "after_K_rename". None in normal use (one `is None` check per event).
_FAULT_HOOK: Callable[[str], None] | None = None


def fault_point(event: str) -> None:
    if _FAULT_HOOK is not None:
        _FAULT_HOOK(event)


class StoreError(RuntimeError):
    """Any store failure. The message names the entry, shard or file, and says what to do."""


def canonical_bytes(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_json(value, path: str) -> None:
    """Reject what json would silently coerce or could not round-trip, naming the field."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StoreError(f"spec field {path} is {value}, which JSON cannot represent: "
                             "use a finite number or a string")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]")
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise StoreError(f"spec field {path} has key {k!r} of type {type(k).__name__}: spec keys must be str")
            _check_json(v, f"{path}[{k!r}]")
        return
    raise StoreError(f"spec field {path} has type {type(value).__name__}, which is not a JSON type: convert it "
                     "(str(), int(), float(), list()) before building the spec, so the cache key is well defined")


def spec_key(spec: Mapping) -> str:
    """sha256 hex of the spec's canonical JSON: independent of dict order, changed by any field."""
    if not isinstance(spec, Mapping):
        raise StoreError(f"spec must be a dict of JSON values, got {type(spec).__name__}")
    _check_json(spec, "spec")
    return sha256_hex(canonical_bytes(spec))


def _store_root(path: Path) -> Path:
    """The store directory that ``path`` (an entry, or a file or lock inside one) belongs to."""
    for p in (path, *path.parents):
        if len(p.name) == 64 and p.parent.name == p.name[:2]:
            return p.parents[1]
    return path.parent


_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _storage_error(e: OSError, path: Path) -> StoreError | None:
    """One StoreError naming the store and the fix if ``e`` means it cannot be written; else None."""
    if e.errno not in _READ_ONLY + _FULL:
        return None
    root = _store_root(path)
    q = shlex.quote(os.path.abspath(root))
    moved = "(FeatureStore(<dir>); LIB_CACHE_DIR=<dir> moves the book's default store)"
    if e.errno in _FULL:
        return StoreError(f"the disk holding the feature store {root} is full ({e.strerror} while writing {path}); "
                          f"nothing was half-written and finished shards are kept. Free space on it (`df -h {q}` "
                          f"shows how much is left), or give the store a directory on another disk {moved}, then "
                          "rerun: only what is missing is computed")
    fix = "Copy it to a writable disk" if e.errno == errno.EROFS else f"Make it writable (`chmod -R u+w {q}`)"
    return StoreError(f"the feature store {root} is read-only ({e.strerror}: {path}): cache hits still read from it, "
                      f"but this call must write to it. {fix}, or give the store a writable directory {moved}, "
                      "then rerun")


@contextlib.contextmanager
def storage_errors_as_store_errors(path: Path) -> Iterator[None]:
    """Turn a read-only or full store into one StoreError (see :func:`_storage_error`) for the block."""
    try:
        yield
    except OSError as e:
        error = _storage_error(e, path)
        if error is None:
            raise
        raise error from None


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def atomic_write(path: Path, data: bytes, kind: str) -> None:
    """Write-then-rename: readers see the old file or the whole new one, never a torn write.

    ``kind`` names the file in the test hook's events; a read-only or full store is one StoreError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    view = memoryview(data)
    try:
        with storage_errors_as_store_errors(path):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                _write_all(fd, view[:len(view) // 2])
                fault_point(f"{kind}_partial")
                _write_all(fd, view[len(view) // 2:])
                os.fsync(fd)
            finally:
                os.close(fd)
            fault_point(f"before_{kind}_rename")
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable (directories cannot be opened on every platform)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    fault_point(f"after_{kind}_rename")


@contextlib.contextmanager
def file_lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if absent) for the block; yields whether it is held.

    ``blocking=False`` yields False at once if it is held elsewhere. The lock dies with the descriptor or process."""
    global _no_flock_warned
    if fcntl is None:
        yield True
        return
    with storage_errors_as_store_errors(path):
        path.parent.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            held = True
        except BlockingIOError:
            held = False
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            if not _no_flock_warned:
                _no_flock_warned = True
                warnings.warn(f"the file system of {path} refuses flock ({e}): the feature store runs without "
                              "locks, so precompute each entry from one process at a time", stacklevel=2)
            held = True
        yield held
    finally:
        os.close(fd)


def lock_path(entry: Path, shard: int | None = None) -> Path:
    return entry / "locks" / ("entry.lock" if shard is None else f"shard-{shard:05d}.lock")


def clean_temp(entry: Path, *, shard: int | None = None, meta: bool = False, idle_shards: bool = False) -> int:
    """Delete crash leftovers, each only under the lock that its writer would hold; return how many.

    ``shard=s``: shard s's temp files (its lock held); ``meta``: those of the small files (entry lock held);
    ``idle_shards``: those of any shard whose lock is free right now."""
    prefixes = [f".shard-{shard:05d}."] if shard is not None else []
    prefixes += [f".{name}." for name in _META] if meta else []
    removed = 0
    for tmp in sorted(entry.glob(".*.tmp")):
        name = tmp.name
        if not name.startswith(tuple(prefixes)):
            if not (idle_shards and name.startswith(".shard-") and name[7:12].isdigit()):
                continue
            with file_lock(lock_path(entry, int(name[7:12])), blocking=False) as held:
                if held:
                    tmp.unlink(missing_ok=True)
                    removed += 1
            continue
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


def npy_header(path: Path) -> tuple[tuple, np.dtype]:
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return shape, dtype


def repair_command(entry: Path) -> str:
    """The shell command that repairs ``entry`` (lib.core.store_repair), with this interpreter and real path."""
    return f"{shlex.quote(sys.executable)} -m lib.core.store repair {shlex.quote(os.path.abspath(entry))}"


def repair_hint(entry: Path) -> str:
    return f"run `{repair_command(entry)}`, then rerun"


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's content without its own checksum field (canonical JSON)."""
    return sha256_hex(canonical_bytes({k: v for k, v in manifest.items() if k != "manifest_sha256"}))


def check_sidecar(sc, s: int) -> None:
    """Raise ValueError unless ``sc`` is a well-formed sidecar of shard ``s``."""
    ok = (isinstance(sc, dict) and sc.get("index") == s and isinstance(sc.get("rows"), list)
          and len(sc["rows"]) == 2 and all(isinstance(r, int) for r in sc["rows"])
          and isinstance(sc.get("shape"), list) and len(sc["shape"]) == 2
          and all(isinstance(d, int) and d >= 0 for d in sc["shape"])
          and sc["shape"][0] == sc["rows"][1] - sc["rows"][0] and sc.get("dtype") in STORE_DTYPES
          and isinstance(sc.get("nbytes"), int)
          and [isinstance(sc[a], str) for a in STORE_ALGORITHMS if a in sc] == [True])
    if not ok:
        raise ValueError(f"not a sidecar of shard {s}")


def sidecar_checksum(sc: dict) -> tuple[str, str]:
    """(algorithm, hex digest) of a checked sidecar: its one key among STORE_ALGORITHMS."""
    algorithm = next(a for a in STORE_ALGORITHMS if a in sc)
    return algorithm, sc[algorithm]


def shard_sidecar(s: int, rows: list[int], shape: list[int], dtype: str, data: bytes) -> dict:
    """The sidecar of shard ``s`` whose .npy file holds ``data``."""
    return {"index": s, "rows": rows, "shape": shape, "dtype": dtype,
            STORE_ALGORITHM: buffer_digest(data, STORE_ALGORITHM), "nbytes": len(data)}


def read_manifest(entry: Path) -> dict:
    """The entry's manifest, checked (JSON, own checksum, structure); one StoreError naming it otherwise."""
    path, key = entry / "manifest.json", entry.name

    def fail(problem: str):
        return StoreError(f"manifest of entry {key} ({path}) {problem}: {repair_hint(entry)} (intact shards are "
                          "reused, not recomputed)")
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise StoreError(f"no complete entry for this spec (key {key}, {entry}): run get_or_compute") from None
    except (OSError, ValueError) as e:
        raise fail(f"cannot be read as JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise fail("is not a JSON object")
    if "manifest_sha256" in manifest and manifest["manifest_sha256"] != manifest_digest(manifest):
        raise fail("fails its own sha256 check (edited or damaged)")
    try:  # manifests written before the checksum existed are checked for structure only
        if manifest["key"] != key:
            raise ValueError(f"it names entry {manifest['key']!r}")
        shards, n, dim = manifest["shards"], manifest["n_rows"], manifest["dim"]
        if manifest["dtype"] not in STORE_DTYPES or not isinstance(manifest["ids_sha256"], str):
            raise ValueError("bad dtype or ids_sha256")
        if not isinstance(manifest["spec"], dict) or not isinstance(shards, list) or not shards:
            raise ValueError("bad spec or shard list")
        for s, sc in enumerate(shards):
            check_sidecar(sc, s)
            if sc["shape"][1] != dim or sc["dtype"] != manifest["dtype"]:
                raise ValueError(f"shard {s} disagrees with the entry's dim or dtype")
        if shards[0]["rows"][0] != 0 or shards[-1]["rows"][1] != n or any(
                a["rows"][1] != b["rows"][0] for a, b in zip(shards, shards[1:])):
            raise ValueError("the shards do not tile the rows")
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise fail(f"is malformed ({type(e).__name__}: {e})") from None
    return manifest


class CachedFeatures:
    """A complete store entry: rows in ``ids`` order, read lazily from memory-mapped shards."""

    def __init__(self, path: Path, manifest: dict, ids: list[str], verify: str,
                 shards_computed: int = 0, shards_reused: int = 0):
        self.path, self.verify = Path(path), verify
        self.key: str = manifest["key"]
        self.spec: dict = manifest["spec"]
        self.ids: list[str] = ids
        self.dtype: str = manifest["dtype"]
        self.shards: list[dict] = manifest["shards"]
        self._dim: int = manifest["dim"]
        self.shards_computed = shards_computed  # by the get_or_compute call that returned this
        self.shards_reused = shards_reused

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"CachedFeatures(key={self.key[:12]}..., rows={len(self)}, dim={self.dim}, dtype={self.dtype})"

    def shard_arrays(self) -> list[np.ndarray]:
        """The shards as read-only ``np.memmap`` s, each checked against its sidecar (and checksum, per ``verify``)."""
        return [open_shard(self.path, self.key, sc, self.verify) for sc in self.shards]

    def numpy(self, dtype=np.float32) -> np.ndarray:
        """All rows, in ``ids`` order, as one in-memory array."""
        out = np.empty((len(self), self.dim), dtype=dtype)
        for sc, arr in zip(self.shards, self.shard_arrays()):
            out[sc["rows"][0]:sc["rows"][1]] = arr
        return out

    def tensor(self, dtype=torch.float32, device="cpu") -> torch.Tensor:
        np_dtype = {torch.float16: np.float16, torch.float64: np.float64}.get(dtype, np.float32)
        return torch.from_numpy(self.numpy(np_dtype)).to(device=device, dtype=dtype)


def open_shard(entry: Path, key: str, sc: dict, verify: str) -> np.ndarray:
    """Check one shard (size always; checksum per the verify policy; header shape) and memory-map it.

    The checksum is taken over the very mapping that is returned (no second read of the file, no copy).
    """
    i = sc["index"]
    path = entry / f"shard-{i:05d}.npy"
    algorithm, digest = sidecar_checksum(sc)

    def fail(problem: str):
        error = StoreError(f"shard {i} of entry {key} ({path}) {problem}: {repair_hint(entry)}; only the damaged "
                           "shards are recomputed")
        error.problem = problem  # what lib.core.store_repair reports
        return error
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise fail("is missing") from None
    if st.st_size != sc["nbytes"]:
        raise fail(f"has {st.st_size} bytes, its sidecar says {sc['nbytes']} (truncated or overwritten)")
    stamp = (str(path), algorithm, digest, st.st_ino, st.st_size, st.st_mtime_ns)
    check = verify == "always" or (verify == "once" and stamp not in verified_files)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        if check and file_digest(path, algorithm) != digest:
            raise fail(f"fails its checksum ({algorithm})") from None
        raise fail(f"is not a readable .npy file ({e})") from None
    if check:
        mapped = getattr(arr, "_mmap", None)  # np.memmap's mapping: the whole file when the header is small
        whole = mapped is not None and len(mapped) == st.st_size
        if (buffer_digest(mapped, algorithm) if whole else file_digest(path, algorithm)) != digest:
            raise fail(f"fails its checksum ({algorithm})")
        with verified_files_lock:
            verified_files.add(stamp)
    if list(arr.shape) != sc["shape"] or arr.dtype != np.dtype(sc["dtype"]):
        raise fail(f"holds {arr.dtype}{list(arr.shape)}, its sidecar says {sc['dtype']}{sc['shape']}")
    return arr

"""The cached-feature store: frozen-model features computed once, re-read many times.

Explained in the ShareLock notebook, section "The frozen-feature pipeline"; decisions in DESIGN.md §2.

Every method in the book trains small heads on features of *frozen* models (LLM text features,
DINOv2 image features). Encoding is by far the most expensive step (ShareLock: 80 GB of images
become 12 GB of features), so it is done once per *spec* -- a dict naming everything that changes
the numbers (model id + revision or file hash, layer, pooling, prompt template, dtype,
preprocessing, dataset manifest hash) -- and every later run reads the cache.

Layout of one entry, ``root/<key[:2]>/<key>/`` with ``key = spec_key(spec)``::

    spec.json                 the spec, for humans and for `grep`
    ids.json                  the row ids; row i of the features belongs to ids[i]
    shard-00000.npy           rows [0, shard_rows), plain .npy (no pickle), memory-mapped on read
    shard-00000.json          sidecar {index, rows, shape, dtype, sha256, nbytes}
    manifest.json             written last, once every shard exists: the entry is complete

Why it looks like this:

* **Rows follow ``ids``.** Rows are never ordered by a dict or a directory listing (ShareLock's
  official code orders class prototypes by ``list_keys()``, a latent misalignment bug).
* **Write-then-rename.** Every file goes to a temp file in the same directory, is fsynced, then
  ``os.replace``-d into place, so a crash leaves either the old state or the new one, never half a
  file under a real name. A shard's sidecar is written only *after* its ``.npy`` is in place: a
  shard is finished iff its sidecar exists and the ``.npy`` matches it. Hence precompute is
  resumable: finished shards are never recomputed, a shard without a sidecar always is.
* **Checksums.** Sidecars carry the sha256 of the ``.npy`` file; reads verify it per the store's
  ``verify`` policy, and :meth:`FeatureStore.repair` deletes exactly the shards that fail.
* **Ranks.** With ``world_size`` W, rank r computes shards r, r+W, ... (``torchrun``/``accelerate``),
  so many GPUs need no new code; whichever process finds all shards present writes the manifest.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = ["StoreError", "spec_key", "FeatureStore", "CachedFeatures"]

_DTYPES = ("float16", "float32")
_VERIFY = ("always", "once", "never")
_STALE_TMP_S = 3600.0  # a temp file of another rank older than this is a crash leftover
_verified: set[tuple] = set()  # files whose sha256 this process has checked ("once" policy)
_verified_lock = threading.Lock()


class StoreError(RuntimeError):
    """Any store failure. The message names the entry, shard or file, and says what to do."""


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


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
    return hashlib.sha256(_canonical(spec)).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    """Write-then-rename: readers see the old file or the whole new one, never a torn write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable (directories cannot be opened on every platform)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise StoreError(f"{what} ({path}) cannot be read ({e}): delete {path} and rerun get_or_compute") from None


def _npy_header(path: Path) -> tuple[tuple, np.dtype]:
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return shape, dtype


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
        """The shards as read-only ``np.memmap`` s, each checked against its sidecar first."""
        return [_open_shard(self.path, self.key, sc, self.verify) for sc in self.shards]

    def numpy(self, dtype=np.float32) -> np.ndarray:
        """All rows, in ``ids`` order, as one in-memory array."""
        out = np.empty((len(self), self.dim), dtype=dtype)
        for sc, arr in zip(self.shards, self.shard_arrays()):
            out[sc["rows"][0]:sc["rows"][1]] = arr
        return out

    def tensor(self, dtype=torch.float32, device="cpu") -> torch.Tensor:
        np_dtype = {torch.float16: np.float16, torch.float64: np.float64}.get(dtype, np.float32)
        return torch.from_numpy(self.numpy(np_dtype)).to(device=device, dtype=dtype)


def _open_shard(entry: Path, key: str, sc: dict, verify: str) -> np.ndarray:
    """Check one shard (size always; sha256 per the verify policy; header shape) and memory-map it."""
    i = sc["index"]
    path = entry / f"shard-{i:05d}.npy"

    def fail(problem: str):
        return StoreError(f"shard {i} of entry {key} ({path}) {problem}: run FeatureStore(root).repair(spec) "
                          f"(or delete {path} and {path.with_suffix('.json')}) and rerun get_or_compute "
                          "to recompute it")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise fail("is missing") from None
    if st.st_size != sc["nbytes"]:
        raise fail(f"has {st.st_size} bytes, its sidecar says {sc['nbytes']} (truncated or overwritten)")
    stamp = (str(path), sc["sha256"], st.st_ino, st.st_size, st.st_mtime_ns)
    if verify == "always" or (verify == "once" and stamp not in _verified):
        if _file_sha256(path) != sc["sha256"]:
            raise fail("fails its sha256 check")
        with _verified_lock:
            _verified.add(stamp)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise fail(f"is not a readable .npy file ({e})") from None
    if list(arr.shape) != sc["shape"] or arr.dtype != np.dtype(sc["dtype"]):
        raise fail(f"holds {arr.dtype}{list(arr.shape)}, its sidecar says {sc['dtype']}{sc['shape']}")
    return arr


class FeatureStore:
    """A directory of cache entries, one per spec (see the module docstring and DESIGN.md §2).

    ``dtype`` is how new shards are stored (float16 halves disk and RAM; overflow is an error,
    never a silent inf). ``verify``: "once" checks a shard's sha256 the first time this process
    opens it, "always" on every open, "never" trusts the sidecar (sizes and shapes are always checked).
    """

    def __init__(self, root: str | os.PathLike, *, dtype: str = "float16", shard_rows: int = 4096,
                 verify: str = "once"):
        if dtype not in _DTYPES:
            raise StoreError(f"FeatureStore dtype={dtype!r} is not supported: use one of {_DTYPES}")
        if verify not in _VERIFY:
            raise StoreError(f"FeatureStore verify={verify!r} is not supported: use one of {_VERIFY}")
        if not isinstance(shard_rows, int) or shard_rows < 1:
            raise StoreError(f"FeatureStore shard_rows={shard_rows!r} must be a positive int")
        self.root, self.dtype, self.shard_rows, self.verify = Path(root), dtype, shard_rows, verify

    def entry_dir(self, spec: Mapping) -> Path:
        key = spec_key(spec)
        return self.root / key[:2] / key

    def has(self, spec: Mapping) -> bool:
        """True iff the entry is complete (its manifest exists)."""
        return (self.entry_dir(spec) / "manifest.json").is_file()

    def open(self, spec: Mapping) -> CachedFeatures:
        """The complete entry for ``spec``; a StoreError saying to run the precompute otherwise."""
        entry = self.entry_dir(spec)
        if not (entry / "manifest.json").is_file():
            done = len(list(entry.glob("shard-*.json"))) if entry.is_dir() else 0
            raise StoreError(f"no complete entry for this spec (key {entry.name}, {entry}; {done} shard(s) finished): "
                             "run the precompute step, FeatureStore.get_or_compute(spec, ids, compute), first")
        return self._load(entry)

    def _load(self, entry: Path, computed: int = 0) -> CachedFeatures:
        manifest = _read_json(entry / "manifest.json", f"manifest of entry {entry.name}")
        raw = (entry / "ids.json").read_bytes() if (entry / "ids.json").is_file() else b""
        if hashlib.sha256(raw).hexdigest() != manifest["ids_sha256"]:
            raise StoreError(f"ids.json of entry {entry.name} ({entry}) does not match its manifest: "
                             f"delete {entry} and rerun get_or_compute")
        return CachedFeatures(entry, manifest, json.loads(raw), self.verify,
                              shards_computed=computed, shards_reused=len(manifest["shards"]) - computed)

    def get_or_compute(self, spec: Mapping, ids: Sequence[str],
                       compute: Callable[[np.ndarray], np.ndarray | torch.Tensor],
                       *, rank: int = 0, world_size: int = 1, progress: bool | None = None,
                       desc: str | None = None) -> CachedFeatures | None:
        """Return the features of ``ids`` under ``spec``, computing only the shards not yet on disk.

        ``compute(rows)`` gets the int64 row indices (into ``ids``) of one shard and returns a
        ``(len(rows), dim)`` float array or tensor. With ``world_size`` W > 1 this process computes
        only shards ``s % W == rank`` and returns ``None`` while other ranks' shards are missing;
        after a barrier (``torch.distributed.barrier()``, ``accelerator.wait_for_everyone()``) any
        rank gets the complete entry from :meth:`open` or another call. ``progress=None``: a tqdm
        bar unless the ``CI`` environment variable is set.
        """
        key = spec_key(spec)
        entry = self.root / key[:2] / key
        if not (isinstance(world_size, int) and isinstance(rank, int) and 0 <= rank < world_size):
            raise StoreError(f"rank={rank!r}, world_size={world_size!r}: need 0 <= rank < world_size")
        ids = list(ids)
        if not ids or not all(isinstance(i, str) for i in ids):
            raise StoreError(f"entry {key}: ids must be a non-empty sequence of str (row i belongs to ids[i])")
        ids_raw = _canonical(ids)
        entry.mkdir(parents=True, exist_ok=True)
        if not (entry / "spec.json").is_file():
            spec_json = json.dumps(json.loads(_canonical(spec)), indent=1, sort_keys=True)
            _atomic_write(entry / "spec.json", spec_json.encode())
        if not (entry / "ids.json").is_file():
            _atomic_write(entry / "ids.json", ids_raw)
        elif (entry / "ids.json").read_bytes() != ids_raw:
            raise StoreError(f"entry {key} ({entry}) was built for different ids than this call passes: the ids "
                             "changed but the spec did not. Put the dataset manifest hash (or a hash of the ids) "
                             "in the spec so each dataset version gets its own entry, or delete the entry directory")
        if (entry / "manifest.json").is_file():
            manifest = _read_json(entry / "manifest.json", f"manifest of entry {key}")
            if manifest["dtype"] != self.dtype:
                raise StoreError(f"entry {key} ({entry}) is stored as {manifest['dtype']} but this FeatureStore uses "
                                 f"dtype={self.dtype}: put the dtype in the spec, or use FeatureStore(dtype="
                                 f"{manifest['dtype']!r}) to read it")
            return self._load(entry)

        n_shards = -(-len(ids) // self.shard_rows)
        mine = [s for s in range(n_shards) if s % world_size == rank]
        self._clean_temp(entry, mine)
        todo = [s for s in mine if self._finished(entry, key, s, len(ids)) is None]
        show = (not os.environ.get("CI")) if progress is None else progress
        for s in tqdm(todo, desc=desc or f"features {key[:8]}", unit="shard", disable=not show):
            self._compute_shard(entry, key, s, len(ids), compute)

        sidecars = [self._finished(entry, key, s, len(ids)) for s in range(n_shards)]
        if any(sc is None for sc in sidecars):
            if world_size > 1:
                return None  # other ranks still working; see docstring
            raise StoreError(f"entry {key} ({entry}) is still incomplete after computing every shard: another "
                             "process is deleting shards; rerun get_or_compute")
        dims = {sc["shape"][1] for sc in sidecars}
        if len(dims) != 1:
            raise StoreError(f"shards of entry {key} ({entry}) disagree on the feature dim {sorted(dims)}: "
                             f"delete {entry} and rerun get_or_compute")
        manifest = {"key": key, "spec": json.loads(_canonical(spec)), "n_rows": len(ids), "dim": dims.pop(),
                    "dtype": self.dtype, "shard_rows": self.shard_rows, "shards": sidecars,
                    "ids_sha256": hashlib.sha256(ids_raw).hexdigest(),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        _atomic_write(entry / "manifest.json", json.dumps(manifest, indent=1).encode())
        return self._load(entry, computed=len(todo))

    def _rows(self, s: int, n: int) -> list[int]:
        return [s * self.shard_rows, min((s + 1) * self.shard_rows, n)]

    def _finished(self, entry: Path, key: str, s: int, n: int) -> dict | None:
        """The sidecar of shard ``s`` if the shard is finished, else None (cheap: no hashing)."""
        side, npy = entry / f"shard-{s:05d}.json", entry / f"shard-{s:05d}.npy"
        if not side.is_file():
            return None
        try:
            sc = json.loads(side.read_text())
        except ValueError:  # cannot happen via _atomic_write; treat as never written
            return None
        if sc["rows"] != self._rows(s, n) or sc["dtype"] != self.dtype:
            raise StoreError(f"shard {s} of entry {key} ({side}) holds rows {sc['rows']} as {sc['dtype']}, but this "
                             f"FeatureStore (shard_rows={self.shard_rows}, dtype={self.dtype}) expects "
                             f"{self._rows(s, n)} as {self.dtype}: reuse the settings that started this entry "
                             f"(put the dtype in the spec), or delete {entry}")
        try:
            ok = npy.stat().st_size == sc["nbytes"] and list(_npy_header(npy)[0]) == sc["shape"]
        except (OSError, ValueError):
            ok = False
        if not ok:
            warnings.warn(f"shard {s} of entry {key} ({npy}) does not match its sidecar; recomputing it")
            return None
        return sc

    def _compute_shard(self, entry: Path, key: str, s: int, n: int, compute: Callable) -> None:
        start, stop = self._rows(s, n)
        rows = np.arange(start, stop, dtype=np.int64)
        out = compute(rows)
        if isinstance(out, torch.Tensor):
            if not out.is_floating_point():
                raise StoreError(f"compute returned a {out.dtype} tensor for shard {s} of entry {key}: "
                                 "return float features")
            x = out.detach().to("cpu", torch.float32).numpy()
        else:
            x = np.asarray(out)
            if not np.issubdtype(x.dtype, np.floating):
                raise StoreError(f"compute returned {x.dtype} for shard {s} of entry {key}: return float features")
            x = x.astype(np.float32, copy=False)
        if x.ndim != 2 or x.shape[0] != len(rows):
            raise StoreError(f"compute returned shape {tuple(x.shape)} for shard {s} of entry {key} "
                             f"(rows {start}:{stop}): it must return ({len(rows)}, dim)")
        finite = np.isfinite(x)
        if not finite.all():
            raise StoreError(f"compute returned nan/inf for shard {s} of entry {key} (rows {start}:{stop}): "
                             "fix the encoder; non-finite features are never stored")
        with np.errstate(over="ignore"):
            y = x.astype(self.dtype)
        if not np.isfinite(y).all():
            raise StoreError(f"features overflow {self.dtype} in entry {key} (shard {s}, max |x| = "
                             f"{np.abs(x).max():.3g}): use FeatureStore(dtype='float32') and put the dtype in the spec")
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(y), allow_pickle=False)
        data = buf.getvalue()
        _atomic_write(entry / f"shard-{s:05d}.npy", data)  # the data first ...
        sidecar = {"index": s, "rows": [start, stop], "shape": list(y.shape), "dtype": self.dtype,
                   "sha256": hashlib.sha256(data).hexdigest(), "nbytes": len(data)}
        _atomic_write(entry / f"shard-{s:05d}.json", json.dumps(sidecar).encode())  # ... then its sidecar

    def _clean_temp(self, entry: Path, shards: Sequence[int] | None) -> None:
        """Delete crash leftovers: temp files of our own shards, and any other temp file once stale.

        Temp files of other ranks' shards may be in flight right now, so they are left alone.
        ``shards=None`` (repair, an offline operation) deletes every temp file.
        """
        prefixes = None if shards is None else tuple(f".shard-{s:05d}." for s in shards)
        now = time.time()
        for tmp in entry.glob(".*.tmp"):
            try:
                if prefixes is None or tmp.name.startswith(prefixes) or now - tmp.stat().st_mtime > _STALE_TMP_S:
                    tmp.unlink()
            except FileNotFoundError:
                pass

    def repair(self, spec: Mapping) -> list[int]:
        """Delete every shard that fails verification (full sha256) and return their indices.

        The manifest goes too if anything was deleted, so the next :meth:`get_or_compute`
        recomputes exactly those shards. Run it while no process is writing to this entry.
        """
        entry = self.entry_dir(spec)
        if not entry.is_dir():
            raise StoreError(f"no entry for this spec (key {entry.name}) under {self.root}: nothing to repair")
        self._clean_temp(entry, None)
        manifest, listed = entry / "manifest.json", {}
        if manifest.is_file():
            try:
                listed = {sc["index"]: sc for sc in json.loads(manifest.read_text())["shards"]}
            except (ValueError, KeyError, TypeError):
                manifest.unlink()  # unreadable: rebuilt from the sidecars by the next get_or_compute
        found = {int(p.name[6:11]) for p in entry.glob("shard-?????.*")}
        bad = []
        for s in sorted(found | set(listed)):
            side = entry / f"shard-{s:05d}.json"
            try:
                sc = json.loads(side.read_text())
                _open_shard(entry, entry.name, sc, "always")
                if s in listed and listed[s] != sc:
                    raise StoreError("sidecar differs from manifest")
            except (OSError, ValueError, KeyError, StoreError):
                bad.append(s)
                for p in (side, entry / f"shard-{s:05d}.npy"):
                    p.unlink(missing_ok=True)
        if bad:
            manifest.unlink(missing_ok=True)
        return bad

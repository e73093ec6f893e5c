"""The cached-feature store: frozen-model features computed once, re-read many times.

Explained in notebooks/sharelock.py, section "The frozen encoders and the frozen-feature pipeline";
its key, layout and guarantees in book/design.md; running it on many processes in book/scale_out.md.
An entry, one per *spec* (a dict naming everything that changes the numbers), lives in ``root/<key[:2]>/<key>/``;
``python -m lib.core.store check|repair <entry dir>`` verifies or repairs one.
"""
from __future__ import annotations

import io
import json
import os
import shlex
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from lib.core import paths, store_files, store_repair
from lib.core.store_files import (  # noqa: F401  (verified_files: bench/store.py clears it; manifest_digest: tests)
    STORE_DTYPES, VERIFY_POLICIES, CachedFeatures, StoreError, atomic_write, canonical_bytes, check_sidecar,
    clean_temp, fault_point, file_lock, lock_path, manifest_digest, npy_header, read_manifest, repair_hint, sha256_hex,
    shard_sidecar, verified_files, storage_errors_as_store_errors, repair_command, spec_key,
)

__all__ = ["CachedFeatures", "FeatureStore", "StoreError", "repair_command", "spec_key", "store_files"]


class FeatureStore:
    """A directory of cache entries, one per spec (book/design.md, "The feature store").

    ``dtype``: how new shards are stored (float16 by default; overflow is an error). ``verify``: check a shard's
    checksum "once" per process, "always", or "never" (sizes and shapes are always checked)."""

    def __init__(self, root: str | os.PathLike, *, dtype: str = "float16", shard_rows: int = 4096,
                 verify: str = "once"):
        if dtype not in STORE_DTYPES:
            raise StoreError(f"FeatureStore dtype={dtype!r} is not supported: use one of {STORE_DTYPES}")
        if verify not in VERIFY_POLICIES:
            raise StoreError(f"FeatureStore verify={verify!r} is not supported: use one of {VERIFY_POLICIES}")
        if not isinstance(shard_rows, int) or shard_rows < 1:
            raise StoreError(f"FeatureStore shard_rows={shard_rows!r} must be a positive int")
        self.root, self.dtype, self.shard_rows, self.verify = Path(root), dtype, shard_rows, verify
        # One record per get_or_compute call of this object: {"key", "rows", "computed": [shard indices
        # this process computed]}. How lib.core.features reports what a run computed (also on ranks that
        # get None back while other ranks' shards are missing).
        self.calls: list[dict] = []

    def _layout(self, dtype: str | None, shard_rows: int | None) -> tuple[str, int]:
        """The (dtype, shard_rows) of one entry: the call's, else this store's defaults."""
        dtype = self.dtype if dtype is None else dtype
        shard_rows = self.shard_rows if shard_rows is None else shard_rows
        if dtype not in STORE_DTYPES:
            raise StoreError(f"dtype={dtype!r} is not supported: use one of {STORE_DTYPES}")
        if not isinstance(shard_rows, int) or isinstance(shard_rows, bool) or shard_rows < 1:
            raise StoreError(f"shard_rows={shard_rows!r} must be a positive int")
        return dtype, shard_rows

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

    def _load(self, entry: Path, computed: int = 0, manifest: dict | None = None) -> CachedFeatures:
        manifest = read_manifest(entry) if manifest is None else manifest
        ids_path = entry / "ids.json"
        raw = ids_path.read_bytes() if ids_path.is_file() else None
        if raw is None or sha256_hex(raw) != manifest["ids_sha256"]:
            state = "is missing" if raw is None else "does not match the ids hash in its manifest (damaged)"
            raise StoreError(f"ids.json of entry {entry.name} ({ids_path}) {state}: {repair_hint(entry)} with this "
                             "entry's ids (the run rewrites ids.json and recomputes nothing)")
        return CachedFeatures(entry, manifest, json.loads(raw), self.verify,
                              shards_computed=computed, shards_reused=len(manifest["shards"]) - computed)

    @staticmethod
    def lock_path(entry: Path, shard: int | None = None) -> Path:
        return lock_path(entry, shard)

    def _check_ids(self, entry: Path, key: str, ids_raw: bytes) -> None:
        """ids.json must hold exactly this call's ids; one message saying why not otherwise."""
        path = entry / "ids.json"
        raw = path.read_bytes()
        if raw == ids_raw:
            return
        try:
            vouched = read_manifest(entry)["ids_sha256"] == sha256_hex(ids_raw)
        except StoreError:
            vouched = False
        if vouched:
            raise StoreError(f"ids.json of entry {key} ({path}) is damaged: it does not match the ids hash in the "
                             f"manifest, which this call's ids do: {repair_hint(entry)}")
        try:
            parsed = json.loads(raw)
            readable = isinstance(parsed, list) and all(isinstance(i, str) for i in parsed)
        except ValueError:
            readable = False
        if not readable:
            raise StoreError(f"ids.json of entry {key} ({path}) is damaged (not a JSON list of str) and no manifest "
                             f"says which ids its shards hold: {repair_hint(entry)} (its shards are recomputed)")
        raise StoreError(f"entry {key} ({entry}) was built for different ids than this call passes: the ids "
                         "changed but the spec did not. Put the dataset manifest hash (or a hash of the ids) "
                         f"in the spec so each dataset version gets its own entry, or delete the entry "
                         f"(`rm -r {_q(entry)}`) and rerun")

    def _hit(self, entry: Path, key: str, ids_raw: bytes, dtype: str, warn: bool) -> CachedFeatures | None:
        """The complete entry; None (and a warning if ``warn``) if a listed shard file is missing or of the
        wrong size (one stat per shard, no hashing): the caller recomputes it."""
        self._check_ids(entry, key, ids_raw)
        manifest = read_manifest(entry)
        if manifest["dtype"] != dtype:
            raise StoreError(f"entry {key} ({entry}) is stored as {manifest['dtype']} but this call asks for "
                             f"dtype={dtype}: put the dtype in the spec, or ask for dtype={manifest['dtype']!r}, or "
                             f"delete the entry (`rm -r {_q(entry)}`) and rerun")
        lost = [sc["index"] for sc in manifest["shards"]
                if _size(entry / f"shard-{sc['index']:05d}.npy") != sc["nbytes"]]
        if not lost:
            return self._load(entry, manifest=manifest)
        if warn:
            warnings.warn(f"shard(s) {', '.join(map(str, lost))} of the complete entry {key} ({entry}) are missing or "
                          "of the wrong size; recomputing them (the other shards are reused)", stacklevel=2)
        return None

    def _reopen(self, entry: Path, key: str, ids_raw: bytes, dtype: str) -> CachedFeatures | None:
        """Under the entry lock: the complete entry, or, if a listed shard is lost, an incomplete one (the
        manifest dropped first, then the lost shards' files, each under its lock) that the caller resumes."""
        hit = self._hit(entry, key, ids_raw, dtype, warn=False)
        if hit is not None:
            return hit
        manifest = read_manifest(entry)
        (entry / "manifest.json").unlink()
        fault_point("manifest_dropped")
        for sc in manifest["shards"]:
            s = sc["index"]
            with file_lock(lock_path(entry, s)):
                if _size(entry / f"shard-{s:05d}.npy") != sc["nbytes"]:
                    for name in (f"shard-{s:05d}.json", f"shard-{s:05d}.npy"):
                        (entry / name).unlink(missing_ok=True)
        return None

    def get_or_compute(self, spec: Mapping, ids: Sequence[str],
                       compute: Callable[[np.ndarray], np.ndarray | torch.Tensor],
                       *, dtype: str | None = None, shard_rows: int | None = None, rank: int = 0,
                       world_size: int = 1, progress: bool | None = None,
                       desc: str | None = None) -> CachedFeatures | None:
        """Return the features of ``ids`` under ``spec``, computing only the shards not yet on disk.

        ``compute(rows)`` gets the int64 row indices (into ``ids``) of one shard and returns a ``(len(rows), dim)``
        float array or tensor. With ``world_size`` W > 1 this process computes only shards ``s % W == rank`` and
        returns ``None`` while other ranks' shards are missing (after a barrier any rank can :meth:`open` the entry).
        ``progress=None``: a tqdm bar unless ``CI`` is set. ``dtype`` / ``shard_rows``: this entry's layout
        (default: the store's). Safe from several processes at once.
        """
        dtype, shard_rows = self._layout(dtype, shard_rows)
        key = spec_key(spec)
        entry = self.root / key[:2] / key
        if not (isinstance(world_size, int) and isinstance(rank, int) and 0 <= rank < world_size):
            raise StoreError(f"rank={rank!r}, world_size={world_size!r}: need 0 <= rank < world_size")
        ids = list(ids)
        if not ids or not all(isinstance(i, str) for i in ids):
            raise StoreError(f"entry {key}: ids must be a non-empty sequence of str (row i belongs to ids[i])")
        ids_raw = canonical_bytes(ids)
        record = {"key": key, "rows": len(ids), "computed": []}
        self.calls.append(record)
        if (entry / "manifest.json").is_file() and (entry / "ids.json").is_file():
            hit = self._hit(entry, key, ids_raw, dtype, warn=True)  # the common case: no lock, nothing written
            if hit is not None:
                return hit
        with storage_errors_as_store_errors(entry):
            entry.mkdir(parents=True, exist_ok=True)

        with file_lock(self.lock_path(entry)):
            self.clean_temp(entry, meta=True)
            if not (entry / "spec.json").is_file():
                spec_json = json.dumps(json.loads(canonical_bytes(spec)), indent=1, sort_keys=True)
                atomic_write(entry / "spec.json", spec_json.encode(), "spec")
            if not (entry / "ids.json").is_file():
                atomic_write(entry / "ids.json", ids_raw, "ids")
            self._check_ids(entry, key, ids_raw)
            if (entry / "manifest.json").is_file():
                hit = self._reopen(entry, key, ids_raw, dtype)
                if hit is not None:
                    return hit

        layout = (dtype, shard_rows)
        n_shards = -(-len(ids) // shard_rows)
        todo = [s for s in range(rank, n_shards, world_size)
                if self._finished(entry, key, s, len(ids), layout) is None]
        show = (not paths.quiet()) if progress is None else progress
        computed, busy, dims = 0, [], {}  # dims: the entry's feature dim, once a shard tells it
        with tqdm(total=len(todo), desc=desc or f"features {key[:8]}", unit="shard", disable=not show) as bar:
            for s in todo:  # first the shards nobody holds ...
                with file_lock(self.lock_path(entry, s), blocking=False) as held:
                    if not held:
                        busy.append(s)
                        continue
                    computed += self._claimed_shard(entry, key, s, len(ids), compute, layout, record, dims)
                bar.update()
            for s in busy:  # ... then wait for the ones another process was computing (normally finished)
                with file_lock(self.lock_path(entry, s)):
                    computed += self._claimed_shard(entry, key, s, len(ids), compute, layout, record, dims)
                bar.update()

        with file_lock(self.lock_path(entry)):
            if (entry / "manifest.json").is_file():  # another process completed the entry meanwhile
                return self._load(entry, computed)
            sidecars = [self._finished(entry, key, s, len(ids), layout) for s in range(n_shards)]
            if any(sc is None for sc in sidecars):
                if world_size > 1:
                    return None  # other ranks still working; see docstring
                raise StoreError(f"entry {key} ({entry}) is still incomplete after computing every shard: another "
                                 "process is deleting shards; rerun get_or_compute")
            dims = {sc["shape"][1] for sc in sidecars}
            if len(dims) != 1:
                raise _dims_error(entry, dims)
            self.clean_temp(entry, meta=True, idle_shards=True)
            manifest = {"key": key, "spec": json.loads(canonical_bytes(spec)), "n_rows": len(ids), "dim": dims.pop(),
                        "dtype": dtype, "shard_rows": shard_rows, "shards": sidecars,
                        "ids_sha256": sha256_hex(ids_raw)}
            manifest["manifest_sha256"] = manifest_digest(manifest)
            atomic_write(entry / "manifest.json", json.dumps(manifest, indent=1).encode(), "manifest")
        return self._load(entry, computed)

    def _claimed_shard(self, entry: Path, key: str, s: int, n: int, compute: Callable, layout: tuple[str, int],
                       record: dict, dims: dict) -> int:
        """With shard ``s``'s lock held: clear its temp files, compute it unless finished meanwhile."""
        fault_point("shard_claimed")
        self.clean_temp(entry, shard=s)
        if self._finished(entry, key, s, n, layout, warn=False) is not None:
            return 0  # another process finished it while we waited
        self._compute_shard(entry, key, s, n, compute, layout, dims)
        record["computed"].append(s)
        return 1

    @staticmethod
    def _rows(s: int, n: int, shard_rows: int) -> list[int]:
        return [s * shard_rows, min((s + 1) * shard_rows, n)]

    def _finished(self, entry: Path, key: str, s: int, n: int, layout: tuple[str, int],
                  warn: bool = True) -> dict | None:
        """The sidecar of shard ``s`` if the shard is finished, else None (cheap: no hashing)."""
        side, npy = entry / f"shard-{s:05d}.json", entry / f"shard-{s:05d}.npy"
        if not side.is_file():
            return None
        try:
            sc = json.loads(side.read_bytes())
            check_sidecar(sc, s)
        except (OSError, ValueError):  # cannot happen via atomic_write: damage after the fact
            if warn:
                warnings.warn(f"sidecar of shard {s} of entry {key} ({side}) is unreadable; recomputing the shard",
                              stacklevel=2)
            return None
        dtype, shard_rows = layout
        if sc["rows"] != self._rows(s, n, shard_rows) or sc["dtype"] != dtype:
            raise StoreError(f"shard {s} of entry {key} ({side}) holds rows {sc['rows']} as {sc['dtype']}, but this "
                             f"call (shard_rows={shard_rows}, dtype={dtype}) expects "
                             f"{self._rows(s, n, shard_rows)} as {dtype}: reuse the settings that started this "
                             f"entry (put the dtype in the spec), or delete the entry (`rm -r {_q(entry)}`) and rerun")
        try:
            ok = npy.stat().st_size == sc["nbytes"] and list(npy_header(npy)[0]) == sc["shape"]
        except (OSError, ValueError):
            ok = False
        if not ok:
            if warn:
                warnings.warn(f"shard {s} of entry {key} ({npy}) does not match its sidecar; recomputing it",
                              stacklevel=2)
            return None
        return sc

    def _compute_shard(self, entry: Path, key: str, s: int, n: int, compute: Callable,
                       layout: tuple[str, int], dims: dict) -> None:
        dtype, shard_rows = layout
        start, stop = self._rows(s, n, shard_rows)
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
            y = x.astype(dtype)
        if not np.isfinite(y).all():
            raise StoreError(f"features overflow {dtype} in entry {key} (shard {s}, max |x| = "
                             f"{np.abs(x).max():.3g}): use FeatureStore(dtype='float32') and put the dtype in the spec")
        for side in [] if "dim" in dims else entry.glob("shard-?????.json"):  # one finished shard tells the dim
            try:
                sc = json.loads(side.read_bytes())
                check_sidecar(sc, int(side.name[6:11]))
            except (OSError, ValueError):
                continue
            dims["dim"] = sc["shape"][1]
            break
        if dims.setdefault("dim", y.shape[1]) != y.shape[1]:  # refused before anything is written
            raise _dims_error(entry, {dims["dim"], y.shape[1]})
        fault_point("shard_computed")
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(y), allow_pickle=False)
        data = buf.getvalue()
        atomic_write(entry / f"shard-{s:05d}.npy", data, "npy")  # the data first ...
        sidecar = shard_sidecar(s, [start, stop], list(y.shape), dtype, data)
        atomic_write(entry / f"shard-{s:05d}.json", json.dumps(sidecar).encode(), "sidecar")  # ... then its sidecar

    def clean_temp(self, entry: Path, *, shard: int | None = None, meta: bool = False,
                    idle_shards: bool = False) -> None:
        """Delete crash leftovers, each only under the lock its writer would hold (store_files.clean_temp)."""
        clean_temp(entry, shard=shard, meta=meta, idle_shards=idle_shards)

    def repair(self, spec: Mapping) -> list[int]:
        """Make the entry consistent again; return the indices of the shards it deleted.

        The same as ``python -m lib.core.store repair <entry dir>`` (lib.core.store_repair.repair); the next
        :meth:`get_or_compute` recomputes exactly the deleted shards. Safe while other processes precompute.
        """
        entry = self.entry_dir(spec)
        if not entry.is_dir():
            raise StoreError(f"no entry for this spec (key {entry.name}) under {self.root}: nothing to repair")
        return store_repair.repair(entry, spec)["deleted"]


def _dims_error(entry: Path, dims: set[int]) -> StoreError:
    return StoreError(f"shards of entry {entry.name} ({entry}) disagree on the feature dim {sorted(dims)} (the encoder "
                      "changed but the spec did not): put what changed in the spec, or delete the entry "
                      f"(`rm -r {_q(entry)}`) and rerun")


def _q(path: Path) -> str:
    return shlex.quote(os.path.abspath(path))


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


if __name__ == "__main__":  # python -m lib.core.store check|repair <entry dir>
    sys.exit(store_repair.main())

"""Benchmark: feature-store throughput, ``lib.core.store`` vs plain NumPy on the same bytes.

The store adds safety to plain ``.npy`` files: atomic writes with fsync, a checksum per shard (XXH3-128;
entries written before carry sha256), checks of every shard against its sidecar on read. This measures
what that costs.

* **Read**: open the entry and read every row into one float32 array (``CachedFeatures.numpy()``)
  under each checksum policy (``verify="never"``; ``"once"`` on its first open in a process, which
  hashes, and on a later open, which does not; ``"always"``), against ``np.load(mmap_mode="r")`` of
  the very same shard files copied into a float32 array. Side by side: an entry as the store writes
  it now (XXH3-128 sidecars) and the same rows as an entry with sha256 sidecars (as written before
  XXH3; still read and verified with sha256). Target: the store at >= 80 % of raw.
* **Write**: ``get_or_compute`` of the whole entry (compute returns rows of a resident float32
  array, so the store's own cost is what is measured) against ``np.save`` of the same rows as
  float16 into one file, once as is (it returns when the bytes are in the page cache) and once
  followed by ``fsync`` (on disk, the durability the store's writes have); the sha256 entry too.

Page cache: *warm* reads come from files just written or read (in RAM); *cold* reads first ask the
kernel to drop the files' cached pages (``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed; the
kernel may keep some), so they include the disk. Both are reported; MB/s count the bytes on disk.

    .venv/bin/python -m bench.store --rows 50000 --dim 768
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import _common

NAME = "store"
POLICIES = ("never", "once (first open)", "once (later opens)", "always")
OLD = "[sha256 sidecars of older entries]"  # suffix of the rows that read an entry written before XXH3-128


def drop_page_cache(paths: list[Path]) -> bool:
    """Ask the kernel to evict these files' cached pages; False where it cannot be asked."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def read_raw(files: list[Path], rows: int, dim: int) -> np.ndarray:
    """The baseline read: memory-map each .npy and copy its rows into one float32 array."""
    out, start = np.empty((rows, dim), dtype=np.float32), 0
    for path in files:
        arr = np.load(path, mmap_mode="r")
        out[start:start + len(arr)] = arr
        start += len(arr)
    return out


def read_store(root: Path, spec: dict, policy: str) -> np.ndarray:
    """``CachedFeatures.numpy()`` of the entry under ``policy`` (``"once (first open)"``: as in a fresh process)."""
    from lib.core import store

    verify = policy.split()[0]
    if policy == "once (first open)":
        store.verified_files.clear()  # as in a fresh process: nothing hashed yet
    return store.FeatureStore(root, verify=verify).open(spec).numpy(np.float32)


def measure(rows: int, dim: int, shard_rows: int, repeats: int, workdir: Path) -> dict:
    from lib.core import store

    rng = np.random.default_rng(0)
    features = rng.standard_normal((rows, dim), dtype=np.float32)
    spec = {"kind": "bench", "rows": rows, "dim": dim}
    ids = [str(i) for i in range(rows)]
    root = workdir / "store"

    def write_store(algorithm: str = store.store_files.STORE_ALGORITHM, where: Path = root):
        shutil.rmtree(where, ignore_errors=True)
        default, store.store_files.STORE_ALGORITHM = store.store_files.STORE_ALGORITHM, algorithm
        try:  # algorithm="sha256": an entry as the store wrote it before XXH3-128
            store.FeatureStore(where, shard_rows=shard_rows).get_or_compute(
                spec, ids, lambda r: features[r[0]:r[-1] + 1], progress=False)
        finally:
            store.store_files.STORE_ALGORITHM = default

    def write_numpy():  # the same job: float32 features in, a float16 .npy out
        np.save(workdir / "raw.npy", features.astype(np.float16))

    def write_numpy_durable():  # ... and on disk, not only in the page cache, as the store's fsync makes it
        with open(workdir / "raw-fsync.npy", "wb") as f:
            np.save(f, features.astype(np.float16))
            f.flush()
            os.fsync(f.fileno())

    old_root = workdir / "store-sha256"
    write = _common.best_times(
        {"np.save": write_numpy, "np.save + fsync": write_numpy_durable, "store": write_store,
         f"store {OLD}": lambda: write_store("sha256", old_root)}, repeats)
    shard_files = sorted(store.FeatureStore(root).entry_dir(spec).glob("shard-*.npy"))
    old_files = sorted(store.FeatureStore(old_root).entry_dir(spec).glob("shard-*.npy"))
    sidecars = [json.loads(p.with_suffix(".json").read_text()) for p in (shard_files[0], old_files[0])]
    assert "xxh3_128" in sidecars[0] and "sha256" in sidecars[1], sidecars
    nbytes = sum(p.stat().st_size for p in shard_files)
    mb = nbytes / 1e6
    for where in (root, old_root):
        assert np.array_equal(read_raw(shard_files, rows, dim), read_store(where, spec, "always"))

    reads, dropped = {}, False
    for cache in ("warm", "cold"):
        functions = {"raw np.load(mmap_mode='r')": lambda: read_raw(shard_files, rows, dim)}
        for where, suffix in ((root, ""), (old_root, f" {OLD}")):
            functions.update({f"store verify={p}{suffix}": (lambda p=p, w=where: read_store(w, spec, p))
                              for p in POLICIES})
        files = {name: old_files if name.endswith(OLD) else shard_files for name in functions}
        best = {name: float("inf") for name in functions}
        for _ in range(repeats):
            for name, function in functions.items():
                if "(later opens)" in name:  # this process has hashed the shards
                    read_store(old_root if name.endswith(OLD) else root, spec, "once (first open)")
                if cache == "cold":
                    dropped = drop_page_cache(files[name])
                else:
                    read_raw(files[name], rows, dim)  # pages in RAM
                start = time.perf_counter()
                function()
                best[name] = min(best[name], time.perf_counter() - start)
        reads[cache] = {name: mb / seconds for name, seconds in best.items()}
    return {
        "rows": rows, "dim": dim, "dtype": "float16", "shard_rows": shard_rows, "shards": len(shard_files),
        "bytes_on_disk": nbytes, "repeats": repeats, "checksum": store.store_files.STORE_ALGORITHM,
        "cold_cache_dropped_with_fadvise": bool(dropped),
        "write_mb_per_s": {name: mb / seconds for name, seconds in write.items()},
        "read_mb_per_s": reads,
    }


def ratios(result: dict) -> list[dict]:
    raw_name = "raw np.load(mmap_mode='r')"
    out = []
    for cache, rates in result["read_mb_per_s"].items():
        for suffix, checksum in (("", "XXH3-128 sidecars"), (f" {OLD}", "sha256 sidecars (older entries)")):
            for policy in POLICIES:
                name = f"store verify={policy}{suffix}"
                out.append(_common.ratio(
                    f"store read, {cache} page cache, verify={policy}{suffix}", rates[name] / rates[raw_name],
                    baseline=f"{raw_name} of the same shard files",
                    candidate=f"CachedFeatures.numpy(), verify={policy}, {checksum}",
                    measure="MB/s into float32", baseline_value=rates[raw_name], candidate_value=rates[name],
                    unit="MB/s", target=0.8))
    write = result["write_mb_per_s"]
    for baseline in ("np.save", "np.save + fsync"):
        out.append(_common.ratio(
            f"store write vs {baseline}", write["store"] / write[baseline], baseline=f"{baseline}, one file",
            candidate="FeatureStore.get_or_compute (shards, XXH3-128, atomic rename, fsync)",
            measure="MB/s written (float32 in, float16 on disk)", baseline_value=write[baseline],
            candidate_value=write["store"], unit="MB/s"))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--rows", type=int, default=None, help="rows (default 50,000; --quick 2,000)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--shard-rows", type=int, default=4096, help="the store's default")
    parser.add_argument("--repeats", type=int, default=None, help="rounds; the best time counts (default 5)")
    parser.add_argument("--tmp", default=None, help="scratch folder (default: the system's temp dir)")
    args = parser.parse_args(argv)
    rows = args.rows or (2000 if args.quick else 50_000)
    shard_rows = min(args.shard_rows, 512) if args.quick else args.shard_rows
    repeats = args.repeats or (1 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="bench-store-", dir=args.tmp) as tmp:
        result = measure(rows, args.dim, shard_rows, repeats, Path(tmp))
    config = {"rows": rows, "dim": args.dim, "shard_rows": shard_rows, "repeats": repeats, "quick": args.quick}
    return _common.publish(NAME, config, ratios(result), args.out, result=result)


if __name__ == "__main__":
    main()

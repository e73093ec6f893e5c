"""Precompute a chapter's frozen features into the store, on one process or many (``torchrun``).

    python -m lib.precompute --chapter sharelock --config small
    torchrun --nproc_per_node 8 -m lib.precompute --chapter sharelock --config full
    accelerate launch -m lib.precompute --chapter sharelock --config full

Why a separate entry point: the paper-scale encodings (563k images through DINOv2, 563k captions through
Llama-3-8B) take GPU-hours, which W GPUs divide by W. The launcher sets ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``; each rank encodes on ``cuda:LOCAL_RANK`` (or the CPU) the shards ``r, r+W, ...`` of
every entry (``FeatureStore.get_or_compute(rank=, world_size=)``), waits at a barrier, and rank 0 then
completes each entry (writes its manifest, computing any shard still missing) and verifies
every shard's checksum. The entries are built by the very ``lib.features`` calls the chapter's notebook
makes, from the same config, so their store keys are identical and the notebook then computes nothing.
Rows map to shards by a fixed rule and each shard is written atomically by exactly one process, so the
store is bit-identical to a single-process run (tests/test_distributed.py). See book/scale_out.md.

Output: one line per entry (on rank 0): its name, store key, rows x dim, and how many shards each rank
computed (the rest were already in the store).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib import distributed
from lib.store import CachedFeatures, FeatureStore, StoreError, spec_key

__all__ = ["Entry", "CHAPTERS", "sharelock_entries", "main"]

# A rank may wait at the barrier for the slowest rank's whole share of an encoding: allow hours.
BARRIER_TIMEOUT_MINUTES = 24 * 60


@dataclass(frozen=True)
class Entry:
    """One store entry of a chapter: ``run(store, rank, world_size)`` is the notebook's own lib call."""

    name: str  # "<kind>:<model>:<set>", matched by --only
    run: Callable[[FeatureStore, int, int], CachedFeatures | None]


def sharelock_entries(cfg, device: str) -> list[Entry]:
    """The features notebooks/sharelock.py caches ("The frozen-feature pipeline"), with the same calls:
    every vision model on every image set, every text model on the captions and the zero-shot prompts."""
    from lib import datasets, features
    from lib.sharelock import prompts

    bench = datasets.build_benchmark(cfg.data)
    entries = []
    for vision in cfg.vision:
        for images in (bench.train, bench.val, bench.retrieval, *bench.zero_shot):
            entries.append(Entry(f"image:{vision.name}:{images.name}", _image_run(features, vision, images, device)))
    for text in cfg.text:
        for pairs in (bench.train, bench.val, bench.retrieval):
            entries.append(Entry(f"text:{text.name}:{pairs.name}",
                                 _text_run(features, text, pairs.captions, pairs.source, device)))
        for labelled in bench.zero_shot:
            entries.append(Entry(f"text:{text.name}:prompts:{labelled.name}",
                                 _text_run(features, text, prompts(labelled),
                                           {"prompts_for": labelled.source["dataset"]}, device)))
    unique = {e.name: e for e in entries}  # a pairs corpus validates and retrieves on the same set
    return list(unique.values())


def _image_run(features, vision, images, device):
    return lambda store, rank, world: features.image_features(
        store, vision, images.load_image, images.ids, source=images.source, device=device,
        rank=rank, world_size=world)


def _text_run(features, text, texts, source, device):
    return lambda store, rank, world: features.text_features(
        store, text, texts, source=source, device=device, rank=rank, world_size=world)


def _sharelock_config(config: str, limit: int | None):
    from lib import config as configs

    overrides = {"data": {"limit": limit}} if limit else {}
    return configs.load("sharelock", config, configs.ShareLockConfig, overrides)


# chapter -> (load its config, list its entries). The other chapters cache features through their own
# modules (facets, sequences); they can be added here the same way.
CHAPTERS: dict[str, tuple[Callable, Callable]] = {"sharelock": (_sharelock_config, sharelock_entries)}


class _CountingStore:
    """A FeatureStore that records, per ``get_or_compute`` call, the entry key, its rows, and which
    shards *this process* computed; the ``lib.features`` functions return ``None`` on ranks whose
    entry is still incomplete, so this cannot come from their result."""

    def __init__(self, store: FeatureStore) -> None:
        self.store = store
        self.last: dict = {}

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def get_or_compute(self, spec: Mapping, ids: Sequence[str], compute: Callable, **kwargs):
        record = {"key": spec_key(spec), "rows": len(ids), "computed": []}
        self.last = record

        def counted(rows: np.ndarray):
            record["computed"].append(int(rows[0]) // self.store.shard_rows)
            return compute(rows)

        return self.store.get_or_compute(spec, ids, counted, **kwargs)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lib.precompute", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True, help=f"one of: {', '.join(CHAPTERS)}")
    parser.add_argument("--config", default="small",
                        help="section of notebooks/configs/<chapter>.yaml (small, full) or a YAML file")
    parser.add_argument("--limit", type=int, default=None,
                        help="keep the first N training rows (the notebook's `limit` parameter: same keys)")
    parser.add_argument("--only", action="append", default=None, metavar="PATTERN",
                        help="only entries whose name matches this glob (repeatable; see --list)")
    parser.add_argument("--list", action="store_true", help="print the entry names and exit")
    parser.add_argument("--store", default=None, help="store directory (default: lib.paths.store_dir())")
    parser.add_argument("--shard-rows", type=int, default=None,
                        help="rows per shard of new entries (default: the config's store.shard_rows)")
    parser.add_argument("--device", default=None, help="default: cuda:LOCAL_RANK if CUDA is available, else cpu")
    parser.add_argument("--report", default=None, metavar="JSON",
                        help="rank 0 also writes the summary as JSON: per entry the shards each rank computed")
    return parser


def _fail(message: str) -> None:
    raise SystemExit(f"lib.precompute: {message}")


def _select(entries: list[Entry], patterns: list[str] | None) -> list[Entry]:
    if not patterns:
        return entries
    chosen = [e for e in entries if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    if not chosen:
        _fail(f"--only {' '.join(patterns)} matches none of the {len(entries)} entries: "
              f"{', '.join(e.name for e in entries[:6])}{', ...' if len(entries) > 6 else ''} (see --list)")
    return chosen


def _load(args) -> tuple[object, list[Entry], FeatureStore]:
    """Config, entries and store, or one actionable line (SystemExit) before any process group exists."""
    from lib import manifests, paths
    from lib.config import ConfigError

    if args.chapter not in CHAPTERS:
        _fail(f"unknown chapter {args.chapter!r}: lib.precompute knows {', '.join(sorted(CHAPTERS))}")
    if args.limit is not None and args.limit < 1:
        _fail(f"--limit {args.limit}: expected a positive number of rows")
    if args.shard_rows is not None and args.shard_rows < 1:
        _fail(f"--shard-rows {args.shard_rows}: expected a positive number of rows")
    load_config, list_entries = CHAPTERS[args.chapter]
    try:
        cfg = load_config(args.config, args.limit)
    except (ConfigError, FileNotFoundError) as error:
        _fail(f"{args.chapter} config {args.config!r}: {error}")
    device = args.device or _default_device()
    try:
        entries = _select(list_entries(cfg, device), args.only)
    except manifests.DatasetMissingError as error:
        _fail(str(error))
    root = args.store or paths.store_dir()
    store = FeatureStore(root, dtype=cfg.store.dtype, shard_rows=args.shard_rows or cfg.store.shard_rows,
                         verify=cfg.store.verify)
    return cfg, entries, store


def _default_device() -> str:
    """``cuda:LOCAL_RANK`` when CUDA is available (the GPU torchrun gave this rank), else the CPU; the same
    rule as :func:`lib.distributed.init`, which runs later."""
    import torch

    return f"cuda:{distributed.env_local_rank()}" if torch.cuda.is_available() else "cpu"


def _compute_own_shards(entries: list[Entry], store: FeatureStore, rank: int, world: int) -> list[list[int]]:
    counting = _CountingStore(store)
    computed = []
    for entry in entries:
        entry.run(counting, rank, world)
        computed.append(counting.last["computed"])
    return computed


def _complete_and_verify(entries: list[Entry], store: FeatureStore) -> list[tuple[CachedFeatures, list[int]]]:
    """Rank 0, after the barrier: each entry's manifest, any shard still missing, every checksum read."""
    counting, done = _CountingStore(store), []
    for entry in entries:
        cached = entry.run(counting, 0, 1)
        cached.shard_arrays()  # opens every shard under the store's verify policy (sha256 on first read)
        done.append((cached, counting.last["computed"]))
    return done


def _gather_counts(computed: list[list[int]], world: int) -> list[list[list[int]]]:
    """Every rank's list of computed shards per entry, indexed [rank][entry]."""
    if world == 1:
        return [computed]
    import torch.distributed as dist

    counts: list = [None] * world
    dist.all_gather_object(counts, computed)
    return counts


def _record(entry: Entry, cached: CachedFeatures, per_rank: list[list[int]], late: list[int]) -> dict:
    return {"name": entry.name, "key": cached.key, "rows": len(cached), "dim": cached.dim,
            "shards": len(cached.shards), "computed_by_rank": per_rank, "completed_by_rank_0": late}


def _summary(chapter: str, record: dict) -> str:
    computed = sum(map(len, record["computed_by_rank"])) + len(record["completed_by_rank_0"])
    reused = record["shards"] - computed
    ranks = ",".join(str(len(shards)) for shards in record["computed_by_rank"])
    late = len(record["completed_by_rank_0"])
    extra = f", {late} completed by rank 0" if late else ""
    return (f"{chapter} {record['name']}: key {record['key'][:12]}, {record['rows']} rows x {record['dim']}, "
            f"{record['shards']} shards (computed per rank [{ranks}]{extra}, {reused} reused)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # as the notebooks: the small config's models are local files, the full config's come from the hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1" if args.config == "small" else "0")
    _, entries, store = _load(args)
    if args.list:
        print("\n".join(e.name for e in entries))
        return 0
    distributed.init(args.device, timeout_minutes=BARRIER_TIMEOUT_MINUTES)
    rank, world = distributed.rank(), distributed.world_size()
    try:
        computed = _compute_own_shards(entries, store, rank, world)
        _barrier(world)
        counts = _gather_counts(computed, world)
        if rank == 0:
            records = []
            for index, (entry, (cached, late)) in enumerate(zip(entries, _complete_and_verify(entries, store))):
                records.append(_record(entry, cached, [c[index] for c in counts], late))
                print(_summary(args.chapter, records[-1]), flush=True)
            if args.report:
                Path(args.report).write_text(json.dumps({"chapter": args.chapter, "config": args.config,
                                                         "world_size": world, "entries": records}, indent=1))
        _barrier(world)  # no rank leaves before the manifests exist
    except StoreError as error:
        _fail(f"rank {rank}: {error}")
    finally:
        distributed.cleanup()
    return 0


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


if __name__ == "__main__":
    sys.exit(main())

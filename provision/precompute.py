"""Precompute a chapter's frozen features into the store, on one process or many (``torchrun``).

    python -m provision.precompute --chapter sharelock --config small
    torchrun --nproc_per_node 8 -m provision.precompute --chapter sharelock --config full
    python -m provision.precompute --chapter fdt --list
    python -m provision.precompute --chapter viterb --config full --overrides "{device: cpu, data: {limit: 16}}"

Why a separate entry point: the paper-scale encodings (563k images through DINOv2, 563k captions through
Llama-3-8B or Mistral-Nemo) take GPU-hours, which W GPUs divide by W. It runs the chapter's own
``feature_plan`` (``chapters.<chapter>``), the very plan its notebook materialises, so the store keys
are the notebook's and the notebook then computes nothing. The launcher sets ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``; each rank encodes on ``cuda:LOCAL_RANK`` (or the CPU) the shards ``r, r+W, ...`` of every
entry, waits at a barrier, and rank 0 then completes each entry (its manifest, any shard still missing)
and reads every shard under the store's checksum policy. Rows map to shards by a fixed rule and each
shard is written atomically by one process, so the store is bit-identical to a single-process run
(tests/test_distributed.py). See book/scale_out.md.

``--overrides`` is the notebooks' ``overrides`` parameter (a YAML mapping merged over the config section), so a
rehearsal's precompute and its notebook run share their store keys. A ``full`` run first runs the pre-flight
(``provision.preflight``: data prepared, models reachable, device and disk) and stops with its one line per problem
before any model is loaded (``--no-preflight`` skips it).

Output (rank 0): one line per entry: its name, store key, rows x dim, and the shards each rank computed
(the rest were already in the store).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
from pathlib import Path

from lib.core import distributed
from lib.core.features import Plan, materialise
from lib.core.store import FeatureStore, StoreError

__all__ = ["main", "load_plan"]

# A rank may wait at the barrier for the slowest rank's whole share of an encoding: allow hours.
BARRIER_TIMEOUT_MINUTES = 24 * 60


def _fail(message: str) -> None:
    raise SystemExit(f"provision.precompute: {message}")


def load_plan(chapter: str, config: str = "small", *, limit: int | None = None, only=None,
              shard_rows: int | None = None, overrides=None) -> tuple[object, Plan]:
    """The chapter's validated config and its feature plan (the notebook's), or one actionable line."""
    import chapters
    from chapters.configs import parameter_overrides
    from lib.core.config import ConfigError
    from corpora import manifests

    if chapter not in chapters.NAMES:
        close = difflib.get_close_matches(chapter, chapters.NAMES, n=1)
        _fail(f"unknown chapter {chapter!r}{f' (did you mean {close[0]!r}?)' if close else ''}: "
              f"provision.precompute knows {', '.join(chapters.NAMES)}")
    for flag, value in (("--limit", limit), ("--shard-rows", shard_rows)):
        if value is not None and value < 1:
            _fail(f"{flag} {value}: expected a positive number")
    module = chapters.get(chapter)
    try:
        merged = parameter_overrides(overrides=overrides, limit=limit)
        cfg = module.load_config(config, merged or None)
        plan = module.feature_plan(cfg, module.benchmark(cfg))
    except (ConfigError, FileNotFoundError, manifests.DatasetMissingError) as error:
        _fail(f"{chapter} config {config!r}: {error}")
    chosen = plan.select(only)
    if only and not len(chosen):
        names = plan.names()
        _fail(f"--only {' '.join(only)} matches none of the {len(names)} entries: {', '.join(names[:6])}"
              f"{', ...' if len(names) > 6 else ''} (see --list)")
    if shard_rows:
        for request in chosen:
            request.shard_rows = shard_rows
    return cfg, chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m provision.precompute", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True, help="one of the chapters in chapters.NAMES")
    parser.add_argument("--config", default="small", help="small, medium, full, or a YAML file")
    parser.add_argument("--limit", type=int, default=None,
                        help="the config's data.limit (the notebook's `limit` parameter): keys as in that run")
    parser.add_argument("--only", action="append", default=None, metavar="PATTERN",
                        help="only entries whose name matches this glob (repeatable; see --list)")
    parser.add_argument("--list", action="store_true", help="print the entry names and exit (loads no model)")
    parser.add_argument("--store", default=None, help="store directory (default: lib.core.paths.store_dir())")
    parser.add_argument("--shard-rows", type=int, default=None,
                        help="rows per shard of new entries (tokens per shard for token sequences)")
    parser.add_argument("--device", default=None, help="default: cuda:LOCAL_RANK if CUDA is available, else cpu")
    parser.add_argument("--overrides", default=None, metavar="YAML",
                        help='a YAML mapping merged over the config section, as the notebooks\' `overrides` parameter '
                             '(e.g. "{device: cpu, train: {steps: 2}}"): the keys are then the notebook\'s')
    parser.add_argument("--no-preflight", action="store_true", help="skip the pre-flight of a full config")
    parser.add_argument("--report", default=None, metavar="JSON",
                        help="rank 0 also writes the summary as JSON: per entry the shards each rank computed")
    return parser


def _default_device() -> str:
    import torch

    return f"cuda:{distributed.env_local_rank()}" if torch.cuda.is_available() else "cpu"


def _gather(values: list, world: int) -> list:
    """Every rank's ``values``, indexed by rank."""
    if world == 1:
        return [values]
    import torch.distributed as dist

    out: list = [None] * world
    dist.all_gather_object(out, values)
    return out


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1" if args.config in ("small", "medium") else "0")
    cfg, plan = load_plan(args.chapter, args.config, limit=args.limit, only=args.only, shard_rows=args.shard_rows,
                          overrides=args.overrides)
    if args.list:
        print("\n".join(plan.names()))
        return 0
    if args.config == "full" and not args.no_preflight:
        from provision import preflight

        report = preflight.check(args.chapter, args.config, overrides=args.overrides, store_root=args.store,
                                 device=args.device)
        if not report.ok:
            _fail("\n".join(report.lines()))
        if distributed.env_rank() == 0:
            print("\n".join(report.lines()), flush=True)
    from lib.core import paths

    store = FeatureStore(args.store or paths.store_dir(), verify=cfg.store.verify)
    device = args.device or _default_device()
    distributed.init(device, timeout_minutes=BARRIER_TIMEOUT_MINUTES)
    rank, world = distributed.rank(), distributed.world_size()
    try:
        mine = materialise(store, plan, device=device, rank=rank, world_size=world)
        _barrier(world)
        per_rank = _gather([row["computed_shards"] for row in mine.report], world)
        if rank == 0:
            done = materialise(store, plan, device=device)  # manifests, and any shard a rank left
            records = []
            for i, (request, row) in enumerate(zip(plan, done.report)):
                found = done[request.name]
                table = getattr(found, "tokens", found)
                table.shard_arrays()  # every shard read once under the verify policy
                record = {"name": request.name, "key": table.key, "rows": len(table), "dim": table.dim,
                          "shards": len(table.shards), "computed_by_rank": [r[i] for r in per_rank],
                          "completed_by_rank_0": row["computed_shards"]}
                if table is not found:
                    record["items"] = len(found)
                records.append(record)
                computed = sum(map(len, record["computed_by_rank"])) + len(record["completed_by_rank_0"])
                ranks = ",".join(str(len(s)) for s in record["computed_by_rank"])
                late = (f", {len(record['completed_by_rank_0'])} completed by rank 0"
                        if record["completed_by_rank_0"] else "")
                items = f" ({record['items']} sequences)" if "items" in record else ""
                print(f"{args.chapter} {record['name']}: key {record['key'][:12]}, {record['rows']} rows{items} x "
                      f"{record['dim']}, {record['shards']} shards (computed per rank [{ranks}]{late}, "
                      f"{record['shards'] - computed} reused)", flush=True)
            if not records:
                print(f"{args.chapter}: nothing to precompute: this config reads no stored features (its encoders "
                      "train from pixels and token ids)", flush=True)
            if args.report:
                Path(args.report).write_text(json.dumps({"chapter": args.chapter, "config": args.config,
                                                         "world_size": world, "entries": records}, indent=1))
        _barrier(world)  # no rank leaves before the manifests exist
    except StoreError as error:
        _fail(f"rank {rank}: {error}")
    finally:
        distributed.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Precompute a chapter's frozen features into the store, on one process or many (``torchrun``).

    python -m lib.precompute --chapter sharelock --config small
    torchrun --nproc_per_node 8 -m lib.precompute --chapter sharelock --config full
    accelerate launch -m lib.precompute --chapter flame --config full
    python -m lib.precompute --chapter fdt --list

Why a separate entry point: the paper-scale encodings (563k images through DINOv2, 563k captions through
Llama-3-8B or Mistral-Nemo) take GPU-hours, which W GPUs divide by W. The launcher sets ``RANK``/``WORLD_SIZE``/
``LOCAL_RANK``; each rank encodes on ``cuda:LOCAL_RANK`` (or the CPU) the shards ``r, r+W, ...`` of
every entry (``FeatureStore.get_or_compute(rank=, world_size=)``), waits at a barrier, and rank 0 then
completes each entry (writes its manifest, computing any shard still missing) and verifies
every shard's checksum. The entries are built by the very lib calls the chapter's notebook makes, from
the same config section, so their store keys are identical and the notebook then computes nothing:

* ``sharelock``: ``lib.features`` image and text features (notebooks/sharelock.py);
* ``viterb``: ``lib.features`` image features of every image source and text features of every class-text
  kind (notebooks/viterb.py, "Features, from the store");
* ``flame``: ``lib.facets.facet_features`` (the K facet embeddings), ``lib.features`` image features and the
  baselines' text features (notebooks/flame.py, "The frozen features");
* ``fdt``: ``lib.sequences.image_sequences`` / ``text_sequences``, ragged token features (notebooks/fdt.py,
  "Patch and token features"); ``--shard-rows`` sets their tokens per shard (default: the notebook's);
* ``three_towers``: the third tower's ``lib.features`` image features (notebooks/three_towers.py).

Rows map to shards by a fixed rule and each shard is written atomically by exactly one process, so the
store is bit-identical to a single-process run (tests/test_distributed.py). See book/scale_out.md.

Output: one line per entry (on rank 0): its name, store key, rows x dim, and how many shards each rank
computed (the rest were already in the store).
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import fnmatch
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib import distributed
from lib.store import CachedFeatures, FeatureStore, StoreError, spec_key

__all__ = ["Entry", "CHAPTERS", "sharelock_entries", "viterb_entries", "flame_entries", "fdt_entries",
           "three_towers_entries", "main"]

# A rank may wait at the barrier for the slowest rank's whole share of an encoding: allow hours.
BARRIER_TIMEOUT_MINUTES = 24 * 60
# Tokens per shard of a token-sequence entry when --shard-rows is not given: text_sequences' and
# image_sequences' default, which is what notebooks/fdt.py uses (the layout is not part of the key).
SEQUENCE_SHARD_TOKENS = 1 << 16


@dataclass(frozen=True)
class Entry:
    """One store entry of a chapter: ``run(store, rank, world_size)`` is the notebook's own lib call."""

    name: str  # "<kind>:<model>:<set>", matched by --only
    run: Callable[[FeatureStore, int, int], object]  # CachedFeatures, SequenceFeatures, or None (incomplete)


# Every entries builder is ``(cfg, device, shard_tokens=None) -> list[Entry]`` and only *describes* the
# entries (datasets and texts are read, no model is loaded): ``--list`` runs it and computes nothing.
# ``shard_tokens`` is --shard-rows for entries whose shard size is not the store's (lib.sequences' token
# entries); the other entries take it from the store.


def sharelock_entries(cfg, device: str, shard_tokens: int | None = None) -> list[Entry]:
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
    return _unique(entries)


def viterb_entries(cfg, device: str, shard_tokens: int | None = None) -> list[Entry]:
    """The features notebooks/viterb.py caches ("Features, from the store"): every vision model on every
    image source of every dataset (the emoji sources are the ShareLock chapter's entries), and every text
    model on every class-text kind, keyed by ``viterb.text_source`` with the class keys as ids."""
    from lib import features, viterb

    benches = {name: viterb.load_benchmark(name, cfg) for name in cfg.datasets}
    entries = [Entry(f"image:{vision.name}:{source.name}", _image_run(features, vision, source, device))
               for vision in cfg.vision for bench in benches.values() for source in bench.image_sources]
    for text in cfg.text:
        for name, bench in benches.items():
            for kind in cfg.text_kinds:
                entries.append(Entry(f"text:{text.name}:{name}/{kind}",
                                     _text_run(features, text, viterb.class_texts(bench, kind),
                                               viterb.text_source(bench, kind), device, ids=list(bench.class_keys))))
    return _unique(entries)


def flame_entries(cfg, device: str, shard_tokens: int | None = None) -> list[Entry]:
    """The features notebooks/flame.py caches ("The frozen features"): image features of the whole
    train/val/retrieval splits and the zero-shot set (the ShareLock chapter's entries), the FLAME facet
    features of the first ``data.limit`` / ``val_limit`` / ``retrieval_limit`` captions, the zero-shot
    prompts and the CLDR labels in other locales, and each baseline's text features of the same texts."""
    from lib import datasets, facets, features, flame
    from lib.sharelock import prompts

    bench = datasets.build_benchmark(dataclasses.replace(cfg.data, limit=None))
    zero_shot_set = bench.zero_shot[0]
    sizes = {"train": min(cfg.data.limit or len(bench.train), len(bench.train)),
             "val": min(cfg.val_limit or len(bench.val), len(bench.val)),
             "retrieval": min(cfg.retrieval_limit or len(bench.retrieval), len(bench.retrieval))}
    pairs = {"train": bench.train, "val": bench.val, "retrieval": bench.retrieval}
    entries = [Entry(f"image:{cfg.vision.name}:{images.name}", _image_run(features, cfg.vision, images, device))
               for images in (*pairs.values(), zero_shot_set)]
    text_sets = {name: (list(pairs[name].captions[: sizes[name]]),
                        {**pairs[name].source, "captions": cfg.data.captions, "rows": sizes[name]})
                 for name in pairs}
    text_sets["zero-shot"] = (prompts(zero_shot_set), {"prompts_for": zero_shot_set.source})
    locales = ["en", *cfg.locales] if cfg.data.corpus == "emoji" and cfg.locales else []
    n_labels = min(cfg.locale_limit or len(zero_shot_set.classnames), len(zero_shot_set.classnames))
    for locale in locales[1:]:  # English labels are the zero-shot prompts' first rows: no entry of their own
        text_sets[f"labels:{locale}"] = (flame.cldr_labels("unseen", locale, n_labels),
                                         {"cldr_labels": locale, "split": "unseen", "rows": n_labels})
    for name, (texts, source) in text_sets.items():
        entries.append(Entry(f"facets:{cfg.text.name}:{name}", _facet_run(facets, cfg.text, texts, source, device)))
    for baseline in cfg.baselines:
        for name, (texts, source) in text_sets.items():
            entries.append(Entry(f"text:{baseline.name}:{name}", _text_run(features, baseline, texts, source, device)))
    return _unique(entries)


def fdt_entries(cfg, device: str, shard_tokens: int | None = None) -> list[Entry]:
    """The features notebooks/fdt.py caches ("Patch and token features"): the vision model's token
    sequences of every image set, the text model's token sequences of the captions and of the zero-shot
    prompts (``lib.sequences``, ``shard_tokens`` tokens per shard, default the notebook's)."""
    from lib import datasets
    from lib.sharelock import prompts

    tokens = shard_tokens or SEQUENCE_SHARD_TOKENS
    bench = datasets.build_benchmark(cfg.data)
    zero_sets = list({s.name: s for s in [bench.zero_shot[0]]
                      + [s for s in bench.zero_shot if s.name in cfg.data.zero_shot]}.values())
    entries = [Entry(f"image-tokens:{cfg.vision.name}:{images.name}",
                     _image_sequence_run(cfg.vision, images, cfg.image_tokens, device, tokens))
               for images in (bench.train, bench.val, bench.retrieval, *zero_sets)]
    for pairs in (bench.train, bench.val, bench.retrieval):
        entries.append(Entry(f"text-tokens:{cfg.text.name}:{pairs.name}",
                             _text_sequence_run(cfg.text, pairs.captions, pairs.source, device, tokens)))
    for labelled in zero_sets:
        entries.append(Entry(f"text-tokens:{cfg.text.name}:prompts:{labelled.name}",
                             _text_sequence_run(cfg.text, prompts(labelled),
                                                {"prompts_for": labelled.source["dataset"]}, device, tokens)))
    return _unique(entries)


def three_towers_entries(cfg, device: str, shard_tokens: int | None = None) -> list[Entry]:
    """The only cached features of notebooks/three_towers.py: the frozen third tower's image features
    (``three_towers.tensors``) of the training drawings in every ``train_styles`` style, the validation
    and retrieval sets and every zero-shot set. The towers themselves learn from pixels and tokens."""
    from lib import datasets, features
    from lib import three_towers as tt

    bench = datasets.build_benchmark(cfg.data)
    return _unique([Entry(f"image:{cfg.third.name}:{images.name}", _image_run(features, cfg.third, images, device))
                    for images in (*tt.training_pairs(cfg, bench), bench.val, bench.retrieval, *bench.zero_shot)])


def _unique(entries: list[Entry]) -> list[Entry]:
    """One entry per name, in first-seen order (a pairs corpus validates and retrieves on the same set)."""
    return list({e.name: e for e in entries}.values())


def _image_run(features, vision, images, device):
    return lambda store, rank, world: features.image_features(
        store, vision, images.load_image, images.ids, source=images.source, device=device,
        rank=rank, world_size=world)


def _text_run(features, text, texts, source, device, ids=None):
    return lambda store, rank, world: features.text_features(
        store, text, texts, source=source, ids=ids, device=device, rank=rank, world_size=world)


def _facet_run(facets, facet_cfg, texts, source, device):
    return lambda store, rank, world: facets.facet_features(
        store, facet_cfg, texts, source=source, device=device, rank=rank, world_size=world)


def _image_sequence_run(vision, images, tokens, device, shard_tokens):
    from lib.sequences import image_sequences

    return lambda store, rank, world: image_sequences(
        store, vision, images.load_image, images.ids, source=images.source, tokens=tokens, device=device,
        shard_tokens=shard_tokens, rank=rank, world_size=world)


def _text_sequence_run(text, texts, source, device, shard_tokens):
    from lib.sequences import text_sequences

    return lambda store, rank, world: text_sequences(
        store, text, texts, source=source, device=device, shard_tokens=shard_tokens, rank=rank, world_size=world)


def _overrides(limit: int | None) -> dict:
    return {"data": {"limit": limit}} if limit else {}


def _sharelock_config(config: str, limit: int | None):
    from lib import config as configs

    return configs.load("sharelock", config, configs.ShareLockConfig, _overrides(limit))


def _viterb_config(config: str, limit: int | None):
    from lib import viterb

    if limit:
        _fail(f"--limit {limit}: the viterb chapter has no row limit (its class splits are the benchmark, "
              "and the notebook has no `limit` parameter); select entries with --only instead (see --list)")
    return viterb.load_config(config)


def _flame_config(config: str, limit: int | None):
    from lib import flame

    return flame.load_config(config, _overrides(limit))


def _fdt_config(config: str, limit: int | None):
    from lib import fdt

    return fdt.load_config(config, _overrides(limit))


def _three_towers_config(config: str, limit: int | None):
    from lib import three_towers

    return three_towers.load_config(config, _overrides(limit))


# chapter -> (load its config section with --limit as data.limit, list its entries)
CHAPTERS: dict[str, tuple[Callable, Callable]] = {
    "sharelock": (_sharelock_config, sharelock_entries),
    "viterb": (_viterb_config, viterb_entries),
    "flame": (_flame_config, flame_entries),
    "fdt": (_fdt_config, fdt_entries),
    "three_towers": (_three_towers_config, three_towers_entries),
}


@contextmanager
def _counting() -> Iterator[list[dict]]:
    """Record every ``FeatureStore.get_or_compute`` call made meanwhile: its entry key, rows, and which
    shards *this process* computed. The lib functions return ``None`` on ranks whose entry is still
    incomplete, so this cannot come from their result; and ``lib.sequences`` opens its own
    ``FeatureStore`` objects on the same root (a lengths and a token entry), hence the class is
    instrumented rather than the store handed to the entry. The entry's own record is the last call
    (the token entry of a sequence; the only call otherwise)."""
    calls: list[dict] = []
    original = FeatureStore.get_or_compute

    def get_or_compute(self, spec: Mapping, ids: Sequence[str], compute: Callable, **kwargs):
        record = {"key": spec_key(spec), "rows": len(ids), "computed": []}
        calls.append(record)

        def counted(rows: np.ndarray):
            record["computed"].append(int(rows[0]) // self.shard_rows)
            return compute(rows)

        return original(self, spec, ids, counted, **kwargs)

    FeatureStore.get_or_compute = get_or_compute
    try:
        yield calls
    finally:
        FeatureStore.get_or_compute = original


def _run(entry: Entry, store: FeatureStore, rank: int, world: int) -> tuple[object, dict]:
    """The entry's result and the record of its own store call."""
    with _counting() as calls:
        result = entry.run(store, rank, world)
    if not calls:
        raise StoreError(f"entry {entry.name} made no FeatureStore.get_or_compute call: its builder is broken")
    return result, calls[-1]


def _table(result) -> CachedFeatures:
    """The entry's stored table: a ``SequenceFeatures``' token rows, or the ``CachedFeatures`` itself."""
    return getattr(result, "tokens", result)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lib.precompute", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True, help=f"one of: {', '.join(CHAPTERS)}")
    parser.add_argument("--config", default="small",
                        help="section of notebooks/configs/<chapter>.yaml (small, full) or a YAML file")
    parser.add_argument("--limit", type=int, default=None,
                        help="keep the first N training rows: the config's data.limit, so the keys are those "
                             "of the notebook run with that limit (ShareLock: its `limit` parameter); "
                             "not for viterb")
    parser.add_argument("--only", action="append", default=None, metavar="PATTERN",
                        help="only entries whose name matches this glob (repeatable; see --list)")
    parser.add_argument("--list", action="store_true",
                        help="print the entry names, one a line, and exit (computes and loads no model)")
    parser.add_argument("--store", default=None, help="store directory (default: lib.paths.store_dir())")
    parser.add_argument("--shard-rows", type=int, default=None,
                        help="rows per shard of new entries (default: the config's store.shard_rows); for "
                             f"token sequences (fdt) tokens per shard (default: {SEQUENCE_SHARD_TOKENS})")
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
        close = difflib.get_close_matches(args.chapter, CHAPTERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        _fail(f"unknown chapter {args.chapter!r}{hint}: lib.precompute knows {', '.join(sorted(CHAPTERS))}")
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
        entries = _select(list_entries(cfg, device, shard_tokens=args.shard_rows), args.only)
    except manifests.DatasetMissingError as error:
        _fail(f"{args.chapter} config {args.config!r}: {error}")
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
    return [_run(entry, store, rank, world)[1]["computed"] for entry in entries]


def _complete_and_verify(entries: list[Entry], store: FeatureStore) -> list[tuple[object, list[int]]]:
    """Rank 0, after the barrier: each entry's manifest, any shard still missing, every checksum read."""
    done = []
    for entry in entries:
        result, record = _run(entry, store, 0, 1)
        _table(result).shard_arrays()  # opens every shard under the store's verify policy (sha256 on first read)
        done.append((result, record["computed"]))
    return done


def _gather_counts(computed: list[list[int]], world: int) -> list[list[list[int]]]:
    """Every rank's list of computed shards per entry, indexed [rank][entry]."""
    if world == 1:
        return [computed]
    import torch.distributed as dist

    counts: list = [None] * world
    dist.all_gather_object(counts, computed)
    return counts


def _record(entry: Entry, result, per_rank: list[list[int]], late: list[int]) -> dict:
    """``rows``: the stored rows (a sequence entry's tokens; ``items`` then counts its sequences)."""
    table = _table(result)
    record = {"name": entry.name, "key": table.key, "rows": len(table), "dim": table.dim,
              "shards": len(table.shards), "computed_by_rank": per_rank, "completed_by_rank_0": late}
    if table is not result:
        record["items"] = len(result)
    return record


def _summary(chapter: str, record: dict) -> str:
    computed = sum(map(len, record["computed_by_rank"])) + len(record["completed_by_rank_0"])
    reused = record["shards"] - computed
    ranks = ",".join(str(len(shards)) for shards in record["computed_by_rank"])
    late = len(record["completed_by_rank_0"])
    extra = f", {late} completed by rank 0" if late else ""
    items = f" ({record['items']} sequences)" if "items" in record else ""
    return (f"{chapter} {record['name']}: key {record['key'][:12]}, {record['rows']} rows{items} x {record['dim']}, "
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
            for index, (entry, (result, late)) in enumerate(zip(entries, _complete_and_verify(entries, store))):
                records.append(_record(entry, result, [c[index] for c in counts], late))
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

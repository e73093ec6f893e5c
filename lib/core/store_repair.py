"""Checking and repairing one feature-store entry, from Python or from a shell.

    python -m lib.core.store check  <entry dir>   # verify every shard's checksum; exit 1 naming the damage
    python -m lib.core.store repair <entry dir>   # delete what is damaged; the next run recomputes only that

Why a command: a user who meets a damaged entry holds only its path, and the entry keeps its spec. Repair is safe
while others precompute and resumable if killed (book/design.md, "The feature store").
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from lib.core.store_files import (
    StoreError, atomic_write, canonical_bytes, check_sidecar, clean_temp, file_lock, lock_path, open_shard,
    read_manifest, sha256_hex, repair_command, spec_key,
)


def _problem(entry: Path, record, s: int) -> str | None:
    """None if shard ``s`` matches ``record`` in full (size, header, checksum); else what is wrong."""
    try:
        check_sidecar(record, s)
        open_shard(entry, entry.name, record, "always")
    except ValueError:
        return "has a malformed record"
    except StoreError as e:
        return getattr(e, "problem", str(e))
    return None


def _verdicts(entry: Path, s: int, sidecar, listed: Mapping) -> tuple[dict | None, str | None]:
    """(the first of the sidecar and the manifest's record that the shard's data matches, else None;
    the first problem found)."""
    records = [r for r in (sidecar, listed.get(s)) if r is not None]
    first = None
    for i, record in enumerate(records):
        if i and record == records[0]:
            break  # the same record fails the same way
        problem = _problem(entry, record, s)
        if problem is None:
            return record, first
        first = first or problem
    return None, first or "has no record (sidecar or manifest) to be checked against"


def _shard_indices(entry: Path, listed: Mapping) -> set[int]:
    found = {int(p.name[6:11]) for p in entry.glob("shard-?????.*") if p.name[6:11].isdigit()}
    return found | set(listed)


def _stored_spec(entry: Path) -> dict | None:
    """The entry's spec from spec.json or the manifest, whichever hashes to the entry's key."""
    for path, pick in ((entry / "spec.json", lambda d: d), (entry / "manifest.json", lambda d: d.get("spec"))):
        try:
            spec = pick(json.loads(path.read_bytes()))
            if isinstance(spec, dict) and spec_key(spec) == entry.name:
                return spec
        except (OSError, ValueError, AttributeError, StoreError):
            pass
    return None


def _ids_readable(raw: bytes) -> bool:
    try:
        ids = json.loads(raw)
    except ValueError:
        return False
    return isinstance(ids, list) and bool(ids) and all(isinstance(i, str) for i in ids)


def repair(entry: Path, spec: Mapping | None = None) -> dict:
    """Make ``entry`` consistent again; return what was done (see :func:`report`).

    Shards that match neither their sidecar nor the manifest's copy are deleted; a lost sidecar is restored; a
    manifest or ``ids.json`` that disagrees with intact shards is dropped. ``spec``: default read from the entry.
    """
    entry = Path(entry)
    if not entry.is_dir():
        raise StoreError(f"no store entry at {entry}: nothing to repair")
    out = {"entry": str(entry), "deleted": [], "reasons": {}, "restored": [], "notes": []}
    with file_lock(lock_path(entry)):
        temps = clean_temp(entry, meta=True)
        spec = _stored_spec(entry) if spec is None else spec
        spec_path = entry / "spec.json"
        if spec is not None:
            spec_json = json.dumps(json.loads(canonical_bytes(spec)), indent=1, sort_keys=True).encode()
            if not spec_path.is_file() or spec_path.read_bytes() != spec_json:
                atomic_write(spec_path, spec_json, "spec")
                out["notes"].append("rewrote spec.json from the entry's spec")
        elif spec_path.is_file():
            spec_path.unlink()
            out["notes"].append("deleted spec.json (damaged; the next run writes it again)")
        manifest_path, manifest, listed, drop_manifest = entry / "manifest.json", None, {}, None
        had_manifest = manifest_path.is_file()
        if had_manifest:
            try:
                manifest = read_manifest(entry)
                listed = {sc["index"]: sc for sc in manifest["shards"]}
            except StoreError:
                drop_manifest = "it is damaged"
        ids_path = entry / "ids.json"
        orphans = manifest is None and ids_path.is_file() and not _ids_readable(ids_path.read_bytes())

        def drop(reason: str) -> None:  # before any shard goes: a repair killed half-way leaves an incomplete entry
            nonlocal drop_manifest
            drop_manifest = drop_manifest or reason
            if manifest_path.is_file():
                manifest_path.unlink()
        if orphans:
            drop("ids.json is damaged")
            ids_path.unlink()
            out["notes"].append("deleted ids.json: it is damaged and no manifest says which ids the shards hold")
        temps_by_shard = {int(p.name[7:12]) for p in entry.glob(".shard-?????.*.tmp") if p.name[7:12].isdigit()}
        for s in sorted(_shard_indices(entry, listed) | temps_by_shard):
            with file_lock(lock_path(entry, s)):
                temps += clean_temp(entry, shard=s)
                side, npy = entry / f"shard-{s:05d}.json", entry / f"shard-{s:05d}.npy"
                if not side.exists() and not npy.exists() and s not in listed:
                    continue
                try:
                    sidecar = json.loads(side.read_bytes())
                except (OSError, ValueError):
                    sidecar = None
                good, why = _verdicts(entry, s, sidecar, listed)
                if orphans or good is None:
                    drop(f"shard {s} was deleted")
                    for p in (side, npy):
                        p.unlink(missing_ok=True)
                    out["deleted"].append(s)
                    out["reasons"][s] = "has ids nobody records" if orphans else why
                    continue
                if sidecar != good:  # lost or damaged, but the manifest's copy matches the data
                    atomic_write(side, json.dumps(good).encode(), "sidecar")
                    out["restored"].append(s)
                if s in listed and listed[s] != good:
                    drop(f"it disagrees with the intact shard {s}")
        if manifest is not None and not drop_manifest and ids_path.is_file() and \
                sha256_hex(ids_path.read_bytes()) != manifest["ids_sha256"]:
            ids_path.unlink()  # the manifest vouches for the ids: get_or_compute rewrites the file
            out["notes"].append("deleted ids.json (it disagrees with the manifest; the next run rewrites it)")
        elif manifest is not None and not ids_path.is_file():
            out["notes"].append("ids.json is missing: the next run writes it from its ids (checked against the "
                                "manifest's hash of them)")
        if drop_manifest and had_manifest:
            manifest_path.unlink(missing_ok=True)
            out["notes"].append(f"dropped manifest.json ({drop_manifest}; the next run rebuilds it)")
    if temps:
        out["notes"].append(f"removed {temps} temp file(s) left by an interrupted write")
    return out


def check(entry: Path) -> list[str]:
    """What :func:`repair` would fix in ``entry``, each a line naming the file; [] if it is sound.

    Reads only: no lock, nothing written (works on a read-only store). Every shard's checksum is verified.
    """
    entry, problems = Path(entry), []
    listed, manifest = {}, None
    if (entry / "manifest.json").is_file():
        try:
            manifest = read_manifest(entry)
            listed = {sc["index"]: sc for sc in manifest["shards"]}
        except StoreError as e:
            problems.append(str(e).split(": run `")[0])
        ids_path = entry / "ids.json"
        ids_match = ids_path.is_file() and sha256_hex(ids_path.read_bytes()) == (manifest or {}).get("ids_sha256")
        if manifest is not None and not ids_match:
            problems.append(f"{ids_path} is missing or does not match the manifest's ids hash")
    for s in sorted(_shard_indices(entry, listed)):
        side, npy = entry / f"shard-{s:05d}.json", entry / f"shard-{s:05d}.npy"
        try:
            sidecar = json.loads(side.read_bytes())
        except (OSError, ValueError):
            sidecar = None
        good, why = _verdicts(entry, s, sidecar, listed)
        if good is None:
            problems.append(f"shard {s} ({npy}) {why}")
        elif sidecar != good:
            problems.append(f"the sidecar of shard {s} ({side}) is lost or damaged (the manifest's copy matches "
                            "the data)")
        elif s in listed and listed[s] != good:
            problems.append(f"the manifest's record of shard {s} disagrees with the intact shard")
    return problems


def report(done: dict) -> str:
    """The lines ``python -m lib.core.store repair`` prints for :func:`repair`'s result."""
    lines = [f"entry {done['entry']}:"]
    lines += [f"  deleted shard {s} (shard-{s:05d}.npy {done['reasons'][s]})" for s in done["deleted"]]
    lines += [f"  restored the sidecar of shard {s} from the manifest" for s in done["restored"]]
    lines += [f"  {note}" for note in done["notes"]]
    if len(lines) == 1:
        return f"nothing to repair in {done['entry']}: every shard matches its checksum"
    deleted = done["deleted"]
    nxt = "the next run (get_or_compute: the notebook, or python -m provision.precompute)"
    lines.append(f"{nxt} recomputes only shard(s) {', '.join(map(str, deleted))} and reuses the others"
                 if deleted else f"{nxt} recomputes no shard")
    return "\n".join(lines)


def _entry_of(path: str) -> Path:
    """The entry folder that ``path`` is, or holds a file of (a shard, the manifest, a lock)."""
    given = Path(path).expanduser().absolute()
    for p in (given, *given.parents):
        if len(p.name) == 64 and p.parent.name == p.name[:2] and p.is_dir():
            return p
    raise SystemExit(f"{path} is not a feature-store entry (a folder <store>/<ab>/<64-hex key>/ holding spec.json "
                     "and shard-*.npy): pass the folder that the store's message names")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.core.store", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("check", "repair"))
    parser.add_argument("entry", help="the entry folder (or a file in it) that the store's message names")
    args = parser.parse_args(argv)
    entry = _entry_of(args.entry)
    try:
        if args.command == "repair":
            print(report(repair(entry)))
            return 0
        problems = check(entry)
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if problems:
        print(f"entry {entry} is damaged:", *(f"  {p}" for p in problems), sep="\n")
        print(f"repair it with: {repair_command(entry)}")
        return 1
    state = "complete" if (entry / "manifest.json").is_file() else "incomplete (the next run finishes it)"
    n = len(list(entry.glob("shard-?????.npy")))
    print(f"entry {entry}: {n} shard(s), every one matches its checksum; {state}")
    return 0

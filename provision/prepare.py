"""One command per full dataset: the files as released in, the layout the loaders read out.

    python -m provision.prepare cc3m-llava --from ~/downloads/LLaVA-CC3M-Pretrain-595K
    python -m provision.prepare imagenet-1k --from ~/downloads/imagenet        # the val tar + the devkit
    python -m provision.prepare awa2 --from ~/downloads/awa2 --to /scratch/awa2/JPEGImages
    python -m provision.prepare --list                                          # the datasets and what each reads

Why: a full-config run reads each dataset in the layout its loader expects (``corpora.datasets.jsonl_pairs``:
``train.jsonl`` / ``val.jsonl`` + the images in webdataset tar shards (:mod:`provision.shards`);
``folder_labelled``: one folder per class; ``corpora.full_sets``: the
released layouts of AWA2, CUB, FGVC-Aircraft and ImageNet+). Turning a download into that layout by hand is where
a split stops being reproducible (which 10,000 pairs were held out?) and where a half-extracted archive starts
being scored as complete. So each dataset has one command, and it:

* finds the released files in ``--from`` (archives or their extracted folders), prints what it found, and checks
  every checksum the manifest records (``downloads:`` of ``data_manifests/<dataset>.yaml``; md5 or sha256);
* builds the loader's layout in ``.<name>.preparing`` beside the target (``--to``, default the manifest's
  location or ``<NAME>_DIR``), writing each file atomically, so an interrupted run resumes where it stopped
  (a file already there is kept only when its bytes are those the download gives it now, by sha256, never by
  size; the image-caption datasets write their tar shards again), and renames the folder into place only at the
  end: nothing half-prepared ever sits under the final name. A refused download (a hostile member, a file that
  does not decode, a wrong checksum) takes back every file the run wrote, so no rerun can keep any of them; every
  file is a copy, never a link; and one run at a time holds the target (``.<name>.lock`` beside it says who);
* draws every choice it makes (a held-out split, a capped sample) from the manifest's seeded settings, and writes
  them into ``.prepared.json`` with the counts, what was dropped and why, and the sha256 of the index files
  (``train.jsonl``, ``classes.txt``, ...), which ``python -m provision.preflight`` checks before any run
  (:func:`check`).

The per-dataset steps are in :mod:`provision.prepare_sets`; tests/test_prepare.py runs each on a synthetic copy in
the released layout (``tools/standins.py``). See book/scale_out.md, "Pre-flight".
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Callable

from lib.core.atomic import write_json
from lib.core.checksums import file_sha256
from corpora import manifests
from provision import prepare_caltech, prepare_nested, prepare_sets
from provision.archives import ArchiveError
from provision.prepare_sets import Prepared, PrepareError

# Every preparer, by dataset: the flat-archive ones and ImageNet+'s nested archives.
PREPARERS = {**prepare_sets.PREPARERS, "imagenet-plus": prepare_nested.prepare_imagenet_plus,
             "caltech-101": prepare_caltech.prepare_caltech}  # a user's download, checked image by image

__all__ = ["RECORD", "PrepareError", "Prepared", "Staging", "prepare", "check", "target_of", "main"]

RECORD = ".prepared.json"  # inside the prepared folder: what was done, from what, with which settings
FORMAT = 1


# What a killed run leaves in the staging folder: lib.core.atomic's temporary files (mkstemp's ".<name>.XXXXXXXX.tmp"),
# the links of earlier versions (".<name>.link") and unfinished tar shards ("<n>.tar.part").
LEFTOVER = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$|^\..+\.link$|\.tar\.part$")


class Staging:
    """The folder a dataset is built in, beside its target: kept when a run is interrupted (the next run resumes,
    keeping a file only if :meth:`holds` its bytes), emptied of what this run wrote when a download is refused
    (:meth:`discard`), renamed into place by :meth:`commit`. Every file is written atomically (:meth:`write`) and only
    inside the staging folder (:meth:`inside`)."""

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.path = self.target.parent / f".{self.target.name}.preparing"
        # what earlier runs left (path -> inode): the files this run must not take back when it is refused
        self.before = ({p: p.lstat().st_ino for p in self.path.rglob("*") if not p.is_dir()}
                       if self.path.is_dir() else None)
        self.path.mkdir(parents=True, exist_ok=True)
        self.written = self.kept = 0
        self.moved_aside: Path | None = None

    def inside(self, rel: str) -> Path:
        """``rel`` under the staging folder; a path that would leave it (``..``, absolute) is refused."""
        path = (self.path / rel).resolve()
        if not path.is_relative_to(self.path.resolve()) or path == self.path.resolve():
            raise PrepareError(f"refusing to write {rel!r}: it is not a path inside {self.target}")
        return path

    def holds(self, rel: str, data: bytes) -> bool:
        """Whether ``rel`` is already staged with exactly ``data`` (sha256 of both: an earlier run's file of the same
        size may hold another download's bytes)."""
        path = self.inside(rel)
        return (path.is_file() and path.stat().st_size == len(data)
                and file_sha256(path) == hashlib.sha256(data).hexdigest())

    def write(self, rel: str, data: bytes) -> None:
        from lib.core.atomic import write_bytes

        write_bytes(self.inside(rel), data)
        self.written += 1

    def discard(self) -> None:
        """Take back every file this run wrote (a refused download's), nothing an earlier run left: the whole folder
        when this run made it."""
        if self.before is None:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for path in sorted(self.path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.rmdir()  # only an emptied folder
            elif self.before.get(path) != path.lstat().st_ino:
                path.unlink()

    def commit(self) -> Path | None:
        """Rename the staging folder to the target. An existing target is never deleted: it is moved aside to
        ``<target>.replaced-<time>`` beside it (returned, and kept in :attr:`moved_aside`); an empty one is removed.
        First, what a killed earlier run left half-written (:data:`LEFTOVER`) is removed, and every file gets the mode
        the umask gives a new file (``lib.core.atomic`` writes through ``mkstemp``, whose 0600 would hide the dataset
        from a lab's other users)."""
        mode = 0o666 & ~umask()
        for path in self.path.rglob("*"):
            if path.is_symlink() or not path.is_file():
                continue
            if LEFTOVER.search(path.name):
                path.unlink()
            elif stat.S_IMODE(path.stat().st_mode) != mode:
                os.chmod(path, mode)
        old = None
        if self.target.is_dir() and not any(self.target.iterdir()):
            self.target.rmdir()
        elif self.target.exists() or self.target.is_symlink():
            old = _aside(self.target)
            os.replace(self.target, old)
        os.replace(self.path, self.target)
        self.moved_aside = old
        return old


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc/self/status``)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: set and put back at once (prepare runs one thread)
    os.umask(mask)
    return mask


def _aside(target: Path) -> Path:
    """A free name beside ``target`` for its previous contents."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        candidate = target.parent / f"{target.name}.replaced-{stamp}{'' if n == 0 else f'-{n}'}"
        if not candidate.exists():
            return candidate
    raise PrepareError(f"no free name beside {target} to move it aside; clean up {target}.replaced-* first")


def foreign_contents(target: Path) -> list[str]:
    """What is in ``target`` that ``prepare`` did not make: empty when it does not exist, is empty, or holds
    the record (``.prepared.json``) of an earlier preparation."""
    if not target.exists() and not target.is_symlink():
        return []
    if not target.is_dir():
        return [target.name]
    if (target / RECORD).is_file():
        return []
    return sorted(p.name for p in target.iterdir())


def target_of(dataset: str, to: str | Path | None = None) -> Path:
    """Where the prepared dataset goes: ``--to``, else ``<NAME>_DIR``, else the manifest's ``location``."""
    return Path(to).expanduser().resolve() if to else manifests.location(dataset).resolve()


def _digest(path: Path, algorithm: str, memo: dict) -> str:
    """md5 / sha256 of a download, remembered by (path, size, mtime) across resumed runs."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{algorithm}"
    if key not in memo:
        if algorithm == "sha256":
            memo[key] = file_sha256(path)
        else:
            digest = hashlib.new(algorithm)
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(chunk)
            memo[key] = digest.hexdigest()
    return memo[key]


def verify_downloads(dataset: str, found: dict[str, Path], memo: dict, say: Callable[[str], None],
                     skip: bool = False) -> dict:
    """Check each found download against the manifest's ``downloads`` checksums (where known); return what was
    checked, for the record. A download the manifest has no checksum for is reported by size only; ``skip``
    (a rehearsal's synthetic downloads) checks none and says so."""
    known = {} if skip else {d["file"]: d for d in manifests.load(dataset).get("downloads") or []}
    if skip:
        say("  checksums NOT checked (--skip-checksums: synthetic downloads of a rehearsal)")
    out = {}
    for role, path in found.items():
        entry = known.get(path.name, {})
        record = {"file": path.name, "bytes": path.stat().st_size if path.is_file() else None}
        for algorithm in ("sha256", "md5"):
            expected = entry.get(algorithm)
            if expected and path.is_file():
                actual = _digest(path, algorithm, memo)
                if actual != expected:
                    raise PrepareError(f"{path}: {algorithm} {actual} does not match {expected} (data_manifests/"
                                       f"{dataset}.yaml, downloads): a damaged or different download; get it again")
                record[algorithm] = actual
                say(f"  {role}: {path} ({record['bytes']:,} bytes, {algorithm} matches the manifest)")
                break
        else:
            size = f"{record['bytes']:,} bytes" if record["bytes"] is not None else "a folder"
            say(f"  {role}: {path} ({size}; the manifest records no checksum for it)")
        out[role] = record
    return out


def _record_path(folder: Path) -> Path:
    return Path(folder) / RECORD


def _folder_ok(target: Path) -> None:
    """Refuse a ``--to`` below a file (``afile/sub``) in one line, before anything is made."""
    above = target.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise PrepareError(f"--to {target}: {above} is a file, not a folder; point --to at a folder (new or empty)")


@contextlib.contextmanager
def locked(target: Path):
    """Hold ``.<name>.lock`` beside ``target`` (``fcntl.flock``) while preparing it; the file says who holds it (pid,
    host, since when), and a second run on the same target is refused in one line that says so."""
    lock = target.parent / f".{target.name}.lock"
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 500).decode("utf-8", "replace").strip() or "another run"
            os.close(fd)
            raise PrepareError(f"--to {target} is being prepared by {holder} (it holds {lock}): wait for that run to "
                               "finish or stop it; nothing was changed") from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder finished and removed it as this run opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
                 .encode())
        yield lock
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)


def prepare(dataset: str, source: str | Path, to: str | Path | None = None, *, force: bool = False,
            replace: bool = False, options: dict | None = None, skip_checksums: bool = False,
            say: Callable[[str], None] = print) -> Path:
    """Prepare ``dataset`` from the downloads in ``source`` into ``to`` (see the module docstring); returns the target.

    ``to`` must be new, empty, or an earlier preparation's folder: a folder holding anything else is refused unless
    ``replace``, and then moved aside, never deleted (so is an earlier preparation's folder). One run at a time:
    another run preparing ``to`` is refused (:func:`locked`)."""
    if dataset not in PREPARERS:
        raise PrepareError(f"no preparer for {dataset!r}: one of {', '.join(PREPARERS)}")
    source = Path(source).expanduser().resolve()
    if not source.exists():
        raise PrepareError(f"--from {source} does not exist: point it at the folder holding the downloaded files")
    target = target_of(dataset, to)
    _folder_ok(target)
    with locked(target):
        return _prepare(dataset, source, target, force=force, replace=replace, options=options,
                        skip_checksums=skip_checksums, say=say)


def _prepare(dataset: str, source: Path, target: Path, *, force: bool, replace: bool, options: dict | None,
             skip_checksums: bool, say: Callable[[str], None]) -> Path:
    if not force and not check(dataset, target):
        say(f"{dataset}: already prepared at {target} ({RECORD} matches); --force prepares it again")
        return target
    foreign = foreign_contents(target)
    if foreign and not replace:
        raise PrepareError(
            f"--to {target} already holds files that provision.prepare did not write (no {RECORD}; e.g. "
            f"{', '.join(foreign[:3])}): nothing was changed. Point --to at a new or empty folder, or pass --replace "
            f"to move {target} aside to {target.name}.replaced-<time> beside it first (nothing is deleted)")
    started = time.time()
    say(f"{dataset}: preparing {target} from {source}")
    staging = Staging(target)
    memo_path = staging.path / ".checksums.json"
    memo = json.loads(memo_path.read_text()) if memo_path.is_file() else {}
    try:
        result = PREPARERS[dataset](source, staging, dict(options or {}),
                                    lambda found: verify_downloads(dataset, found, memo, say, skip_checksums), say)
    except (PrepareError, ArchiveError):
        staging.discard()  # a refused download: none of what this run wrote may be kept by the next run
        raise
    finally:
        if memo and staging.path.is_dir():
            write_json(memo_path, memo)
    index = {rel: file_sha256(staging.path / rel) for rel in result.index_files}
    write_json(staging.path / RECORD, {
        "format": FORMAT, "dataset": dataset, "prepared_by": "python -m provision.prepare", "source": str(source),
        "checksums": "skipped" if skip_checksums else "checked where the manifest records one",
        "inputs": result.inputs, "settings": result.settings, "counts": result.counts,
        "dropped": {k: {"count": len(v), "examples": sorted(v)[:10]} for k, v in result.dropped.items()},
        "index_sha256": index, "seconds": round(time.time() - started, 1)})
    memo_path.unlink(missing_ok=True)
    if staging.commit() is not None:
        say(f"  the previous {target} was moved aside to {staging.moved_aside}: nothing in it was deleted; remove it "
            "when you no longer need it")
    for reason, items in result.dropped.items():
        say(f"  dropped {len(items):,} ({reason}), e.g. {', '.join(sorted(items)[:3])}")
    say(f"  {', '.join(f'{k}: {v:,}' if isinstance(v, int) else f'{k}: {v}' for k, v in result.counts.items())}")
    say(f"{dataset}: prepared at {target} in {time.time() - started:.0f} s ({staging.written:,} files written, "
        f"{staging.kept:,} kept from an earlier run)")
    return target


def check(dataset: str, folder: str | Path | None = None, *, count_files: bool = True) -> list[str]:
    """Problems that stop a run reading ``dataset`` (one line each, with its fix); empty when it is prepared.

    Checks, in seconds: the folder exists and holds the record of ``python -m provision.prepare``; the index files
    it lists have their recorded sha256; the settings it applied are still the manifest's; and (``count_files``)
    each class folder / the images folder holds the recorded number of files, and none is a link (symbolic, or a
    hard link shared with a file outside: a prepared dataset holds copies only).
    """
    folder = target_of(dataset, folder)
    command = f"python -m provision.prepare {dataset} --from <the downloaded files> --to {folder}"
    how = " ".join(str(manifests.load(dataset).get("obtain", "")).split())
    staging = folder.parent / f".{folder.name}.preparing"
    if not folder.is_dir():
        resume = (f" (an interrupted preparation is in {staging}: the same command resumes it)"
                  if staging.is_dir() else "")
        return [f"dataset {dataset}: {folder} does not exist{resume}: {command}. Get the files: {how}"]
    record_path = _record_path(folder)
    if not record_path.is_file():
        return [f"dataset {dataset}: {folder} was not made by provision.prepare (no {RECORD}): "
                f"run `{command} --replace` (with --from {folder} it checks a copy laid out by hand and builds the "
                f"layout from it; your folder is moved aside to {folder.name}.replaced-<time>, nothing is deleted)"]
    try:
        record = json.loads(record_path.read_text())
    except ValueError:
        return [f"dataset {dataset}: {record_path} is damaged: run `{command} --force`"]
    problems = []
    for rel, expected in (record.get("index_sha256") or {}).items():
        path = folder / rel
        if not path.is_file():
            problems.append(f"dataset {dataset}: {path} is missing (recorded by the preparation): "
                            f"run `{command} --force`")
        elif file_sha256(path) != expected:
            problems.append(f"dataset {dataset}: {path} changed since it was prepared (sha256 differs from "
                            f"{RECORD}): run `{command} --force`")
    wanted = prepare_sets.settings(dataset)
    changed = {k: (record.get("settings", {}).get(k), v) for k, v in wanted.items()
               if record.get("settings", {}).get(k) != v}
    if changed:
        what = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
        problems.append(f"dataset {dataset}: prepared with other settings than data_manifests/{dataset}.yaml now has "
                        f"({what}): run `{command} --force`")
    if count_files and not problems:
        problems += prepare_sets.count_problems(dataset, folder, record, command)
        link = next(linked(folder), None)
        if link is not None and not problems:
            problems.append(f"dataset {dataset}: {link} is a link (symbolic, or a hard link to a file elsewhere): "
                            f"a prepared dataset holds copies only, so nothing else can change it: run `{command} "
                            "--force`")
    return problems


def linked(folder: Path):
    """Every symbolic link and hard-linked file under ``folder`` (never followed)."""
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            info = os.lstat(os.path.join(root, name))
            if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
                yield Path(root) / name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provision.prepare", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", help=f"one of {', '.join(PREPARERS)}")
    parser.add_argument("--from", dest="source", help="the folder holding the released files (archives or extracted)")
    parser.add_argument("--to", default=None, help="where the prepared dataset goes (default: the manifest's location, "
                                                   "or <NAME>_DIR)")
    parser.add_argument("--force", action="store_true", help="prepare again even if the target is prepared")
    parser.add_argument("--replace", action="store_true",
                        help="--to holds files prepare did not write: move that folder aside (never deleted) and "
                             "prepare")
    parser.add_argument("--all-images", action="store_true",
                        help="imagenet-plus: extract every image, not only the manifest's capped sample")
    parser.add_argument("--skip-checksums", action="store_true",
                        help="do not check the downloads' checksums (a rehearsal's synthetic copies; recorded)")
    parser.add_argument("--check", action="store_true",
                        help="only check the prepared dataset (as provision.preflight does)")
    parser.add_argument("--list", action="store_true", help="list the datasets and the files each reads")
    args = parser.parse_args(argv)
    if args.list or not args.dataset:
        for name, reads in prepare_sets.READS.items():
            print(f"{name}: {reads}")
        return 0
    if args.check:
        problems = check(args.dataset, args.to)
        print("\n".join(problems) or f"{args.dataset}: prepared at {target_of(args.dataset, args.to)}")
        return 1 if problems else 0
    if not args.source:
        parser.error(f"--from is required: the folder holding {prepare_sets.READS.get(args.dataset, 'the downloads')}")
    try:
        prepare(args.dataset, args.source, args.to, force=args.force, replace=args.replace,
                options={"all_images": args.all_images}, skip_checksums=args.skip_checksums)
    except (PrepareError, ArchiveError, manifests.DatasetMissingError) as error:
        print(f"provision.prepare {args.dataset}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Reliability of lib.core.store (book/design.md): crashes, corruption, concurrency.

* Crash safety: a precompute in a subprocess is SIGKILLed at 26 named points (inside the writes of
  spec.json, ids.json, shard .npy files, sidecars and the manifest, and between them) and at timed
  points from outside; after each kill nothing under a real name is partial, no finished shard is
  ever computed again, and the final entry is bit-identical to an uninterrupted run.
* Corruption: each kind of damage is reported on read by one StoreError naming the file and the
  remedy, and ``FeatureStore.repair`` + ``get_or_compute`` recompute only what was broken
  (tests/test_store.py covers a flipped shard byte under the three verify policies and a truncated
  shard on resume; the rest is here).
* Concurrency: two processes (and two threads) precomputing one entry at once end with a correct
  entry in which every shard was computed exactly once.
* Advice that works: every message that gives advice gives one command; the tests run it exactly as
  printed (``python -m lib.core.store repair <entry>``, or ``rm -r <entry>`` for a call the entry was
  not built for), rerun, and require an entry bit-identical to a fresh computation, with nothing
  half-written on the way. Deleting a shard of a complete entry and rerunning works too.
* Read-only or full: a read-only store serves hits (no lock, nothing written) and refuses a call
  that must write with one message naming the store and the fix; a full disk (ENOSPC mid-write) is
  one message, leaves no partial file, and the rerun recomputes only what is missing.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import select
import shlex
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import _precompute_worker as W
from lib.core import store as store_mod
from lib.core.store import FeatureStore, StoreError

WORKER = Path(__file__).with_name("_precompute_worker.py")
ROWS, SR, DIM = 30, 4, 5  # 8 shards, the last one 2 rows
N_SHARDS = -(-ROWS // SR)
IDS = W.ids_for(ROWS)
LAYOUT = ("spec.json", "ids.json", "manifest.json")


def fstore(root, **kw) -> FeatureStore:
    return FeatureStore(root, dtype="float16", shard_rows=SR, verify="always", **kw)


def compute(rows):
    return W.features(rows, DIM)


class Recorder:
    def __init__(self):
        self.shards = []

    def __call__(self, rows):
        self.shards.append(int(rows[0]) // SR)
        return compute(rows)


def real_files(entry: Path) -> dict[str, bytes]:
    """The entry's files under their real names (no temp files, no lock files).

    A kill that lands before the first write leaves no entry folder at all: that is nothing partial.
    """
    if not entry.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(entry.iterdir())
            if p.is_file() and not p.name.startswith(".")}


def temp_files(entry: Path) -> list[str]:
    return sorted(p.name for p in entry.glob(".*"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run, in this process: the bytes every other run must end with."""
    root = tmp_path_factory.mktemp("reference")
    res = fstore(root).get_or_compute(W.SPEC, IDS, compute, progress=False)
    files = real_files(res.path)
    assert set(files) == {*LAYOUT, *(f"shard-{s:05d}.{x}" for s in range(N_SHARDS) for x in ("npy", "json"))}
    return files, res.numpy()


def finished(entry: Path) -> set[int]:
    return {int(p.name[6:11]) for p in entry.glob("shard-?????.json")}


def log_shards(log: Path, skip: int = 0) -> list[int]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [int(line.split()[1]) for line in lines[skip:]]


def assert_nothing_partial(entry: Path, ref_files: dict[str, bytes], root: Path) -> None:
    """Every file under a real name is whole (equal to the reference), and `complete` means complete."""
    for name, data in real_files(entry).items():
        assert data == ref_files[name], f"{name} is under its real name but is not the finished file"
    for tmp in temp_files(entry):
        assert tmp.endswith(".tmp"), tmp
    for s in finished(entry):  # a sidecar under its real name vouches for a whole .npy
        assert (entry / f"shard-{s:05d}.npy").exists(), f"shard {s} has a sidecar but no .npy"
    if (entry / "manifest.json").exists():
        got = fstore(root).open(W.SPEC).numpy()  # complete: every shard there and verified
        assert got.shape == (ROWS, DIM)
    else:
        with pytest.raises(StoreError, match="no complete entry"):
            fstore(root).open(W.SPEC)


class Server:
    """tests/_precompute_worker.py --serve: one import of torch, one fork per run."""

    def __init__(self, root: Path, log: Path, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(root), "--log", str(log), "--rows", str(ROWS),
             "--shard-rows", str(SR), "--dim", str(DIM), "--serve", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def run(self, command: str, timeout: float = 90.0) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"worker gave no answer to {command!r} within {timeout} s"
        return self.proc.stdout.readline().strip()

    def close(self) -> str:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        return self.proc.stderr.read()


# Each kill point is (event, n): SIGKILL at the n-th `event` of that run. In order, on one store, each
# run resuming what the previous ones left. Together they kill inside and between every kind of write.
KILL_POINTS = [
    "spec_partial:1", "before_spec_rename:1", "after_spec_rename:1",
    "ids_partial:1", "before_ids_rename:1", "after_ids_rename:1",
    "shard_claimed:1",  # holding shard 0's lock: the next run must not wait for it
    "shard_computed:1", "npy_partial:1", "before_npy_rename:1", "after_npy_rename:1",  # shard 0
    "sidecar_partial:1", "before_sidecar_rename:1", "after_sidecar_rename:1",  # shard 0 finished
    "after_sidecar_rename:2",  # shards 1, 2
    "npy_partial:2", "before_npy_rename:2", "after_npy_rename:2", "sidecar_partial:2",  # 3..6, then 7
    "shard_claimed:1", "shard_computed:1", "before_sidecar_rename:1",  # shard 7, three times
    "after_sidecar_rename:1",  # shard 7 finished; no manifest yet
    "manifest_partial:1", "before_manifest_rename:1",
    "after_manifest_rename:1",  # complete, but killed before returning
]


def test_sigkill_at_26_points_then_resume_is_bit_identical_and_recomputes_no_finished_shard(tmp_path, reference):
    ref_files, ref_rows = reference
    root, log = tmp_path / "store", tmp_path / "computed.log"
    entry = fstore(root).entry_dir(W.SPEC)
    server = Server(root, log)
    kills, history = 0, []
    try:
        for point in [*KILL_POINTS, "-"]:
            done_before, seen = finished(entry) if entry.exists() else set(), len(log_shards(log))
            reply = server.run(point)
            computed = log_shards(log, seen)
            history.append((point, reply, computed))
            if point == "-":
                assert reply == "exit 0", history
            else:
                assert reply == "signal 9", f"kill point {point} was not reached: {history}"
                kills += 1
            assert_nothing_partial(entry, ref_files, root)
            assert not set(computed) & done_before, f"a finished shard was recomputed at {point}: {history}"
    finally:
        stderr = server.close()
    assert "Traceback" not in stderr, stderr
    assert kills == len(KILL_POINTS) >= 20
    assert history[-1][2] == []  # the run after the last kill found a complete entry
    assert real_files(entry) == ref_files  # bit-identical, manifest included
    assert temp_files(entry) == []  # the crash leftovers were cleaned up on the way
    assert np.array_equal(fstore(root).open(W.SPEC).numpy(), ref_rows)
    counts = np.bincount(log_shards(log), minlength=N_SHARDS)
    assert counts.min() >= 1 and counts[0] == 7 and counts[7] == 4, counts  # killed mid-shard: redone


def test_sigkill_from_outside_at_timed_points(tmp_path, reference):
    """SIGKILL sent by another process at arbitrary moments (mostly inside compute or a write)."""
    ref_files, _ = reference
    root, log = tmp_path / "store", tmp_path / "computed.log"
    entry = fstore(root).entry_dir(W.SPEC)
    server = Server(root, log, "--sleep", "0.03")
    replies = []
    try:
        for delay in [0.005, 0.02, 0.035, 0.05, 0.065, 0.08, 0.095, 0.11, 0.125]:
            done_before, seen = finished(entry) if entry.exists() else set(), len(log_shards(log))
            replies.append(server.run(f"ext:{delay}"))
            assert replies[-1] in ("signal 9", "exit 0"), replies
            assert not set(log_shards(log, seen)) & done_before
            assert_nothing_partial(entry, ref_files, root)
        assert server.run("-") == "exit 0"
    finally:
        assert "Traceback" not in server.close()
    assert replies.count("signal 9") >= 5, replies
    assert real_files(entry) == ref_files and temp_files(entry) == []


# ------------------------------------------------------------------------------------------ corruption

def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x20
    path.write_bytes(bytes(data))


def _edit_manifest(entry: Path, change, reseal: bool = False) -> None:
    path = entry / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    if reseal:  # a manifest that is consistent in itself but wrong about a shard
        manifest["manifest_sha256"] = store_mod.manifest_digest(manifest)
    path.write_text(json.dumps(manifest, indent=1))


def _wrong_sha(m):
    m["shards"][1]["xxh3_128"] = "0" * 32


# name: (damage(entry), file named in the message, words in the message, repair's answer, shards recomputed)
CORRUPTIONS = {
    "shard: flipped data byte": (lambda e: _flip(e / "shard-00001.npy", -3), "shard-00001.npy", "checksum", [1], [1]),
    "shard: flipped header byte": (lambda e: _flip(e / "shard-00002.npy", 20), "shard-00002.npy", "checksum",
                                   [2], [2]),
    "shard: truncated": (lambda e: (e / "shard-00003.npy").write_bytes((e / "shard-00003.npy").read_bytes()[:-7]),
                         "shard-00003.npy", "truncated", [3], [3]),
    "shard: emptied": (lambda e: (e / "shard-00000.npy").write_bytes(b""), "shard-00000.npy", "truncated", [0], [0]),
    "shard: deleted": (lambda e: (e / "shard-00004.npy").unlink(), "shard-00004.npy", "missing", [4], [4]),
    "shard and sidecar: deleted": (lambda e: [(e / f"shard-00007.{x}").unlink() for x in ("npy", "json")],
                                   "shard-00007.npy", "missing", [7], [7]),
    "manifest: invalid JSON": (lambda e: (e / "manifest.json").write_text('{"key": "'), "manifest.json",
                               "cannot be read as JSON", [], []),
    "manifest: truncated": (lambda e: (e / "manifest.json").write_bytes((e / "manifest.json").read_bytes()[:100]),
                            "manifest.json", "cannot be read as JSON", [], []),
    "manifest: not an object": (lambda e: (e / "manifest.json").write_text("[]"), "manifest.json",
                                "not a JSON object", [], []),
    "manifest: wrong shard checksum": (lambda e: _edit_manifest(e, _wrong_sha), "manifest.json",
                                       "fails its own sha256", [], []),
    "manifest: wrong shard checksum, resealed": (lambda e: _edit_manifest(e, _wrong_sha, reseal=True),
                                                 "shard-00001.npy", "checksum", [], []),
    "manifest: wrong dim, resealed": (lambda e: _edit_manifest(e, lambda m: m.update(dim=6), reseal=True),
                                      "manifest.json", "malformed", [], []),
    "manifest: old format without checksum, wrong shard checksum": (
        lambda e: _edit_manifest(e, lambda m: (_wrong_sha(m), m.pop("manifest_sha256"))),
        "shard-00001.npy", "checksum", [], []),
    "ids.json: one id changed": (lambda e: (e / "ids.json").write_text((e / "ids.json").read_text().replace(
        "item-0005", "item-0050")), "ids.json", "does not match", [], []),
    "ids.json: deleted": (lambda e: (e / "ids.json").unlink(), "ids.json", "missing", [], []),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_corruption_is_one_clear_message_and_repair_recomputes_only_what_is_broken(tmp_path, reference, name):
    damage, culprit, words, deleted, recomputed = CORRUPTIONS[name]
    ref_files, ref_rows = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    damage(entry)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(StoreError) as info:
            store.open(W.SPEC).numpy()
    message = str(info.value)
    assert caught == [], [str(w.message) for w in caught]  # one message, no warnings around it
    assert "\n" not in message and str(entry / culprit) in message and words in message, message
    assert f"`{store_mod.repair_command(entry)}`" in message, message  # the remedy, runnable from a shell
    assert store.repair(W.SPEC) == deleted
    again = Recorder()
    res = store.get_or_compute(W.SPEC, IDS, again, progress=False)
    assert again.shards == recomputed and res.shards_computed == len(recomputed)
    assert np.array_equal(res.numpy(), ref_rows)
    assert real_files(entry) == ref_files  # bit-identical again, sidecars and manifest included
    assert store.repair(W.SPEC) == [] and real_files(entry) == ref_files


@pytest.mark.parametrize("damage", ["delete", "garble", "empty object"])
def test_lost_or_damaged_sidecar_of_a_complete_entry_is_restored_without_recomputing(tmp_path, reference, damage):
    ref_files, ref_rows = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    side = entry / "shard-00005.json"
    {"delete": side.unlink, "garble": lambda: side.write_text("{not json"),
     "empty object": lambda: side.write_text("{}")}[damage]()
    assert np.array_equal(store.open(W.SPEC).numpy(), ref_rows)  # reads use the manifest's copy
    assert store.repair(W.SPEC) == []
    assert real_files(entry) == ref_files
    assert store.get_or_compute(W.SPEC, IDS, Recorder(), progress=False).shards_computed == 0


def test_damaged_sidecar_of_an_incomplete_entry_means_that_shard_is_recomputed(tmp_path, reference):
    ref_files, _ = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "manifest.json").unlink()  # as if killed before the manifest
    (entry / "shard-00002.json").write_text('{"index": 2}')
    again = Recorder()
    with pytest.warns(UserWarning, match=r"sidecar of shard 2 .*shard-00002\.json"):
        store.get_or_compute(W.SPEC, IDS, again, progress=False)
    assert again.shards == [2] and real_files(entry) == ref_files


def test_corrupt_manifest_is_also_reported_by_get_or_compute(tmp_path):
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "manifest.json").write_text("garbage")
    with pytest.raises(StoreError, match=r"manifest of entry .*manifest\.json.*repair"):
        store.get_or_compute(W.SPEC, IDS, compute, progress=False)


def test_damaged_ids_json_is_told_apart_from_different_ids(tmp_path):
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "ids.json").write_text((entry / "ids.json").read_text().replace("item-0003", "item-0033"))
    with pytest.raises(StoreError, match=r"ids\.json of entry .* is damaged.*repair"):
        store.get_or_compute(W.SPEC, IDS, compute, progress=False)
    with pytest.raises(StoreError, match="different ids"):  # really other ids: the old message
        store.get_or_compute(W.SPEC, IDS[::-1], compute, progress=False)
    (entry / "manifest.json").unlink()
    (entry / "ids.json").write_text("[1, 2")
    with pytest.raises(StoreError, match=r"ids\.json .* damaged .*no manifest.*repair.*recomputed"):  # nothing vouches
        store.get_or_compute(W.SPEC, IDS, compute, progress=False)


def test_repair_cleans_crash_leftovers_and_keeps_the_finished_work(tmp_path, reference):
    ref_files, _ = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "manifest.json").unlink()
    (entry / "shard-00006.json").unlink()
    leftovers = [".shard-00006.npy.1.ab.tmp", ".shard-00009.npy.1.cd.tmp", ".manifest.json.1.ef.tmp"]
    for name in leftovers:
        (entry / name).write_bytes(b"half")
    assert store.repair(W.SPEC) == [6]  # its .npy has no record to be checked against
    assert temp_files(entry) == []
    again = Recorder()
    store.get_or_compute(W.SPEC, IDS, again, progress=False)
    assert again.shards == [6] and real_files(entry) == ref_files


# ------------------------------------------------------------------------------------------ concurrency

def _start(root, log, ready, go, *extra):
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(root), "--log", str(log), "--rows", str(ROWS), "--shard-rows", str(SR),
         "--dim", str(DIM), "--ready", str(ready), "--go", str(go), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _release_together(procs, readies, go):
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in readies):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.01)
    go.touch()
    return [p.communicate(timeout=120) for p in procs]


@pytest.mark.parametrize("mode", ["same shards", "two ranks"])
def test_two_processes_precomputing_one_entry_at_once(tmp_path, reference, mode):
    ref_files, ref_rows = reference
    root, log, go = tmp_path / "store", tmp_path / "computed.log", tmp_path / "go"
    readies = [tmp_path / "ready-a", tmp_path / "ready-b"]
    ranks = [[], []] if mode == "same shards" else [["--rank", "0", "--world-size", "2"],
                                                     ["--rank", "1", "--world-size", "2"]]
    procs = [_start(root, log, r, go, "--sleep", "0.08", *k) for r, k in zip(readies, ranks)]
    outs = _release_together(procs, readies, go)
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in err, err
    results = [json.loads(out) for out, _ in outs]
    counts = np.bincount(log_shards(log), minlength=N_SHARDS)
    assert counts.tolist() == [1] * N_SHARDS, counts  # every shard computed exactly once, in total
    entry = fstore(root).entry_dir(W.SPEC)
    assert real_files(entry) == ref_files and temp_files(entry) == []
    ref_sha = __import__("hashlib").sha256(ref_rows.tobytes()).hexdigest()
    complete = [r for r in results if r["sha256"] is not None]
    assert complete and all(r["sha256"] == ref_sha for r in complete)  # everybody who returned got it all
    if mode == "same shards":
        assert len(complete) == 2 and sum(r["computed"] for r in results) == N_SHARDS
        assert all(r["computed"] + r["reused"] == N_SHARDS for r in results)


def test_two_threads_precomputing_one_entry_at_once(tmp_path, reference):
    _, ref_rows = reference
    computed, results, errors = [], [], []
    lock = threading.Lock()

    def slow(rows):
        with lock:
            computed.append(int(rows[0]) // SR)
        time.sleep(0.02)
        return compute(rows)

    def work():
        try:
            results.append(fstore(tmp_path).get_or_compute(W.SPEC, IDS, slow, progress=False))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 2
    assert sorted(computed) == list(range(N_SHARDS))
    assert sum(r.shards_computed for r in results) == N_SHARDS
    assert all(np.array_equal(r.numpy(), ref_rows) for r in results)


def test_a_lock_held_by_a_live_process_makes_others_wait_not_compute(tmp_path, reference):
    """While another holder keeps shard 3's lock, a precompute does every other shard, then waits."""
    _, ref_rows = reference
    store = fstore(tmp_path)
    entry = store.entry_dir(W.SPEC)
    entry.mkdir(parents=True)
    holder = store_mod.file_lock(FeatureStore.lock_path(entry, 3))
    assert holder.__enter__() is True
    rec, out = Recorder(), []
    t = threading.Thread(target=lambda: out.append(store.get_or_compute(W.SPEC, IDS, rec, progress=False)))
    t.start()
    deadline = time.monotonic() + 30
    while len(rec.shards) < N_SHARDS - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert sorted(rec.shards) == [s for s in range(N_SHARDS) if s != 3] and t.is_alive()
    holder.__exit__(None, None, None)  # the holder died or finished without writing shard 3
    t.join(30)
    assert rec.shards[-1] == 3 and np.array_equal(out[0].numpy(), ref_rows)


def test_pure_hit_takes_no_lock_and_writes_nothing(tmp_path, reference):
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    holder = store_mod.file_lock(FeatureStore.lock_path(entry))  # the entry lock, held elsewhere
    holder.__enter__()
    try:
        before = {p: p.stat().st_mtime_ns for p in entry.rglob("*")}
        res = store.get_or_compute(W.SPEC, IDS, Recorder(), progress=False)
        assert res.shards_computed == 0
        assert {p: p.stat().st_mtime_ns for p in entry.rglob("*")} == before
    finally:
        holder.__exit__(None, None, None)
    os.chmod(entry, 0o555)  # a read-only copy of the store still serves hits
    try:
        assert store.get_or_compute(W.SPEC, IDS, Recorder(), progress=False).shards_computed == 0
    finally:
        os.chmod(entry, 0o755)


# ------------------------------------------------------------------------------------------ advice that works
# Every message of the store that gives advice gives one command in backquotes (the repair command,
# lib.core.store_files.repair_command, or `rm -r <entry>` where the caller asked for something the entry
# was not built for). These tests run that command exactly as printed, in a subprocess, rerun the call,
# and require the entry to end bit-identical to a fresh computation, with nothing half-written on the way.

def _command(message: str) -> list[str]:
    commands = re.findall(r"`([^`]+)`", message)
    assert len(commands) == 1, f"a message must give exactly one command: {message}"
    return shlex.split(commands[0])


def _follow(message: str) -> str:
    """Run the message's command as written (from another working directory); its stdout."""
    argv = _command(message)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/", check=False)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def _fresh(root: Path, ids=IDS, dim=DIM, **kw) -> dict[str, bytes]:
    """The files of a fresh computation of W.SPEC (for these ids, dim and layout) in a store of its own."""

    def fn(r):
        return W.features(r, dim)

    return real_files(fstore(root, **kw).get_or_compute(W.SPEC, ids, fn, **kw.pop("call", {}), progress=False).path)


def _nothing_half_written(entry: Path, ref_files: dict[str, bytes], damaged: dict[str, bytes] | None = None) -> None:
    """No temp file, and every file under a real name is the finished one (or, if given, as the damage left it)."""
    assert temp_files(entry) == [], temp_files(entry)
    for name, data in real_files(entry).items():
        assert data == ref_files.get(name) or (damaged is not None and data == damaged.get(name)), (
            f"{name} is neither absent nor the finished file")


READ = ("read", lambda store, rec: store.open(W.SPEC).numpy())
CALL = ("get_or_compute", lambda store, rec: store.get_or_compute(W.SPEC, IDS, rec, progress=False).numpy())


@pytest.mark.parametrize("trigger", [READ, CALL], ids=lambda t: t[0])
@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_following_a_damage_message_literally_ends_bit_identical(tmp_path, reference, name, trigger):
    damage, _, _, deleted, recomputed = CORRUPTIONS[name]
    ref_files, ref_rows = reference
    store = fstore(tmp_path / "store")
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    damage(entry)
    damaged = real_files(entry)
    rec = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trigger[1](store, rec)
            message = None
        except StoreError as e:
            message = str(e)
    if message is None:  # get_or_compute healed it by itself (a lost shard or ids.json): said so if it recomputed
        assert trigger[0] == "get_or_compute" and (not rec.shards or caught), name
    else:
        assert "repair" in " ".join(_command(message)), message
        _nothing_half_written(entry, ref_files, damaged)
        printed = _follow(message)
        for s in deleted:
            assert f"deleted shard {s}" in printed, printed
        assert "recomputes" in printed, printed
        _nothing_half_written(entry, ref_files)
        res = store.get_or_compute(W.SPEC, IDS, rec, progress=False)
        assert res.shards_computed == len(rec.shards)
    assert rec.shards == recomputed, rec.shards
    assert real_files(entry) == ref_files
    assert np.array_equal(fstore(tmp_path / "store").open(W.SPEC).numpy(), ref_rows)


@pytest.mark.parametrize("files", ["npy", "npy and sidecar"])
def test_deleting_a_shard_of_a_complete_entry_and_rerunning_recomputes_it(tmp_path, reference, files):
    """The old advice ("delete the shard's files and rerun"), which a complete entry used to refuse."""
    ref_files, _ = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    for x in ("npy", "json")[:len(files.split(" and "))]:
        (entry / f"shard-00003.{x}").unlink()
    (entry / "shard-00006.npy").write_bytes((entry / "shard-00006.npy").read_bytes()[:-2])  # truncated: a stat sees it
    rec = Recorder()
    with pytest.warns(UserWarning, match=r"shard\(s\) 3, 6 of the complete entry .*recomputing") as caught:
        res = store.get_or_compute(W.SPEC, IDS, rec, progress=False)
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert rec.shards == [3, 6] and (res.shards_computed, res.shards_reused) == (2, N_SHARDS - 2)
    assert real_files(entry) == ref_files and temp_files(entry) == []


def test_sigkill_while_recovering_a_lost_shard_then_resume_is_bit_identical(tmp_path, reference):
    ref_files, _ = reference
    root, log = tmp_path / "store", tmp_path / "computed.log"
    entry = fstore(root).entry_dir(W.SPEC)
    server = Server(root, log)
    try:
        assert server.run("-") == "exit 0"
        (entry / "shard-00003.npy").unlink()
        for point in ("manifest_dropped:1", "shard_claimed:1", "before_npy_rename:1", "after_sidecar_rename:1",
                      "before_manifest_rename:1"):
            assert server.run(point) == "signal 9", point
            assert all(t.endswith(".tmp") for t in temp_files(entry))  # a kill's leftovers, cleaned by the next run
            for name, data in real_files(entry).items():  # (shard 3's sidecar may outlive its .npy: it is recomputed)
                assert data == ref_files[name], name
        assert server.run("-") == "exit 0"
    finally:
        assert "Traceback" not in server.close()
    assert real_files(entry) == ref_files and temp_files(entry) == []
    counts = np.bincount(log_shards(log), minlength=N_SHARDS)
    assert counts[3] == 1 + 2 and all(counts[s] == 1 for s in range(N_SHARDS) if s != 3), counts


def test_a_hit_hashes_nothing_to_find_a_lost_shard(tmp_path, monkeypatch):
    store = fstore(tmp_path)
    store.get_or_compute(W.SPEC, IDS, compute, progress=False)
    from lib.core import store_files
    monkeypatch.setattr(store_files, "buffer_digest", lambda *a: pytest.fail("a hit must not hash"))
    monkeypatch.setattr(store_files, "file_digest", lambda *a: pytest.fail("a hit must not hash"))
    assert store.get_or_compute(W.SPEC, IDS, Recorder(), progress=False).shards_computed == 0


def _incomplete_with_other_dims(store: FeatureStore) -> Path:
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "manifest.json").unlink()
    for s in range(1, N_SHARDS):
        for x in ("npy", "json"):
            (entry / f"shard-{s:05d}.{x}").unlink()
    return entry


# name: (build the state, the call that fails, the rerun after following, the fresh computation to match)
USER_ERRORS = {
    "different ids": (lambda st: st.get_or_compute(W.SPEC, IDS, compute, progress=False),
                      lambda st: st.get_or_compute(W.SPEC, IDS[::-1], compute, progress=False),
                      {"ids": IDS[::-1]}),
    "another dtype": (lambda st: st.get_or_compute(W.SPEC, IDS, compute, progress=False),
                      lambda st: st.get_or_compute(W.SPEC, IDS, compute, dtype="float32", progress=False),
                      {"dtype": "float32"}),
    "another shard size": (lambda st: _incomplete_with_other_dims(st),
                           lambda st: st.get_or_compute(W.SPEC, IDS, compute, shard_rows=SR + 1, progress=False),
                           {"shard_rows": SR + 1}),
    "another feature dim": (lambda st: _incomplete_with_other_dims(st),
                            lambda st: st.get_or_compute(W.SPEC, IDS, lambda r: W.features(r, DIM + 1),
                                                         progress=False),
                            {"dim": DIM + 1}),
}


@pytest.mark.parametrize("name", list(USER_ERRORS))
def test_following_a_wrong_call_message_literally_ends_as_a_fresh_computation(tmp_path, name):
    build, call, how = USER_ERRORS[name]
    store = fstore(tmp_path / "store")
    build(store)
    entry = store.entry_dir(W.SPEC)
    before = real_files(entry)
    with pytest.raises(StoreError) as info:
        call(store)
    assert real_files(entry) == before and temp_files(entry) == []  # the refused call wrote nothing
    assert _command(str(info.value))[:2] == ["rm", "-r"] and str(entry) in str(info.value)
    _follow(str(info.value))
    assert not entry.exists()
    res = call(store)
    dim = how.get("dim", DIM)
    fresh = FeatureStore(tmp_path / "fresh", dtype=how.get("dtype", "float16"), shard_rows=how.get("shard_rows", SR),
                         verify="always").get_or_compute(W.SPEC, how.get("ids", IDS), lambda r: W.features(r, dim),
                                                         progress=False)
    assert real_files(res.path) == real_files(fresh.path)


def test_repair_of_unreadable_ids_without_a_manifest_recomputes_everything(tmp_path, reference):
    ref_files, _ = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "manifest.json").unlink()
    (entry / "ids.json").write_text("[1, 2")
    with pytest.raises(StoreError) as info:
        store.get_or_compute(W.SPEC, IDS, compute, progress=False)
    printed = _follow(str(info.value))
    assert f"recomputes only shard(s) {', '.join(map(str, range(N_SHARDS)))}" in printed, printed
    rec = Recorder()
    store.get_or_compute(W.SPEC, IDS, rec, progress=False)
    assert rec.shards == list(range(N_SHARDS)) and real_files(entry) == ref_files


def test_check_names_the_damage_and_exits_non_zero(tmp_path, reference):
    ref_files, _ = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    command = [sys.executable, "-m", "lib.core.store", "check", str(entry)]
    ok = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0 and f"{N_SHARDS} shard(s), every one matches its checksum; complete" in ok.stdout
    _flip(entry / "shard-00002.npy", -1)
    (entry / "shard-00005.json").unlink()
    (entry / "shard-00007.npy").unlink()
    bad = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 1, bad
    lines = bad.stdout.splitlines()
    assert any(f"shard 2 ({entry / 'shard-00002.npy'}) fails its checksum" in line for line in lines), bad.stdout
    assert any(f"shard 7 ({entry / 'shard-00007.npy'}) is missing" in line for line in lines), bad.stdout
    assert any("sidecar of shard 5" in line for line in lines) and "shard 3" not in bad.stdout
    assert store_mod.repair_command(entry) in bad.stdout
    assert subprocess.run([*command[:3], "repair", str(entry / "manifest.json")], capture_output=True,
                          timeout=120, check=False).returncode == 0  # a file of the entry names it too
    assert subprocess.run(command, capture_output=True, timeout=120, check=False).returncode == 0  # none left
    store.get_or_compute(W.SPEC, IDS, compute, progress=False)
    assert real_files(entry) == ref_files
    nowhere = subprocess.run([*command[:4], str(tmp_path)], capture_output=True, text=True, timeout=120, check=False)
    assert nowhere.returncode != 0 and "is not a feature-store entry" in nowhere.stderr


def test_repair_killed_half_way_leaves_an_entry_the_next_run_resumes(tmp_path, reference, monkeypatch):
    """repair drops the manifest before it deletes a shard: stopped between two deletions, nothing is lost."""
    ref_files, _ = reference
    store = fstore(tmp_path)
    entry = store.get_or_compute(W.SPEC, IDS, compute, progress=False).path
    _flip(entry / "shard-00001.npy", -1)
    _flip(entry / "shard-00004.npy", -1)
    real_unlink, seen = Path.unlink, []

    def stop_after_first_shard(self, missing_ok=False):
        if self.name.startswith("shard-00004"):
            raise KeyboardInterrupt
        seen.append(self.name)
        return real_unlink(self, missing_ok=missing_ok)
    monkeypatch.setattr(Path, "unlink", stop_after_first_shard)
    with pytest.raises(KeyboardInterrupt):
        store.repair(W.SPEC)
    monkeypatch.undo()
    assert seen[0] == "manifest.json" and not (entry / "manifest.json").exists()  # first of all
    assert temp_files(entry) == [] and not (entry / "shard-00001.npy").exists()
    assert store.repair(W.SPEC) == [4]  # run again, it finishes the job
    rec = Recorder()
    store.get_or_compute(W.SPEC, IDS, rec, progress=False)
    assert rec.shards == [1, 4] and real_files(entry) == ref_files


# ------------------------------------------------------------------------------------------ read-only or full

@contextlib.contextmanager
def unwritable(root: Path, code: int = errno.EROFS):
    """Every write under ``root`` fails with ``code`` (as on a read-only mount; root ignores chmod)."""
    real = {name: getattr(os, name) for name in ("open", "mkdir", "replace", "rename", "unlink", "rmdir")}
    under = str(root)

    def refuse(path):
        raise OSError(code, os.strerror(code), str(path))

    def open_(path, flags, *args, **kwargs):
        if str(path).startswith(under) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real["open"](path, flags, *args, **kwargs)

    def guard(name):
        def call(path, *args, **kwargs):
            if str(path).startswith(under):
                refuse(path)
            return real[name](path, *args, **kwargs)
        return call
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "open", open_)
        for name in ("mkdir", "replace", "rename", "unlink", "rmdir"):
            mp.setattr(os, name, guard(name))
        yield


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_read_only_store_serves_hits_and_refuses_misses_with_one_clear_error(tmp_path, reference, code):
    _, ref_rows = reference
    root = tmp_path / "store"
    fstore(root).get_or_compute(W.SPEC, IDS, compute, progress=False)
    before = _tree(root)
    other = {**W.SPEC, "layer": -2}
    with unwritable(root, code):
        hit = fstore(root).get_or_compute(W.SPEC, IDS, Recorder(), progress=False)  # no lock, nothing written
        assert hit.shards_computed == 0 and np.array_equal(hit.numpy(), ref_rows)
        assert np.array_equal(fstore(root).open(W.SPEC).numpy(), ref_rows)
        calls = [lambda: fstore(root).get_or_compute(other, IDS, compute, progress=False),  # a new entry
                 lambda: fstore(root).repair(W.SPEC)]
        for call in calls:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with pytest.raises(StoreError) as info:
                    call()
            message = str(info.value)
            assert caught == [] and "\n" not in message, message
            assert f"the feature store {root} is read-only" in message, message
            assert "cache hits still read from it" in message and "LIB_CACHE_DIR" in message, message
            assert ("Copy it to a writable disk" if code == errno.EROFS else f"chmod -R u+w {root}") in message
    assert _tree(root) == before  # nothing written, not even a lock file


def test_a_lost_shard_on_a_read_only_store_is_the_read_only_error(tmp_path, reference):
    root = tmp_path / "store"
    entry = fstore(root).get_or_compute(W.SPEC, IDS, compute, progress=False).path
    (entry / "shard-00002.npy").unlink()
    with unwritable(root), pytest.warns(UserWarning, match="shard.* 2 .*recomputing"), \
            pytest.raises(StoreError, match="is read-only"):
        fstore(root).get_or_compute(W.SPEC, IDS, compute, progress=False)
    rec = Recorder()  # writable again: the call recomputes the lost shard
    with pytest.warns(UserWarning):
        fstore(root).get_or_compute(W.SPEC, IDS, rec, progress=False)
    assert rec.shards == [2] and real_files(entry) == reference[0]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes through chmod")
def test_a_chmod_read_only_store_and_following_its_message(tmp_path, reference):
    _, ref_rows = reference
    root = tmp_path / "store"
    fstore(root).get_or_compute(W.SPEC, IDS, compute, progress=False)
    subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
    try:
        assert np.array_equal(fstore(root).get_or_compute(W.SPEC, IDS, Recorder(), progress=False).numpy(), ref_rows)
        with pytest.raises(StoreError, match="is read-only") as info:
            fstore(root).get_or_compute({**W.SPEC, "layer": -2}, IDS, compute, progress=False)
    except BaseException:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=False)
        raise
    _follow(str(info.value))  # its `chmod -R u+w <store>`, as printed
    res = fstore(root).get_or_compute({**W.SPEC, "layer": -2}, IDS, compute, progress=False)
    assert res.shards_computed == N_SHARDS


def test_a_full_disk_is_one_clear_error_and_nothing_half_written(tmp_path, reference, monkeypatch):
    """ENOSPC in the middle of a shard's write: one StoreError, no partial file, finished shards kept."""
    ref_files, _ = reference
    root = tmp_path / "store"
    entry = fstore(root).entry_dir(W.SPEC)
    real_write, budget = os.write, {"bytes": 1500}  # spec, ids and a few shards fit

    def write(fd, data):
        if not os.readlink(f"/proc/self/fd/{fd}").startswith(str(root)):
            return real_write(fd, data)
        if budget["bytes"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data[:budget["bytes"]]))  # a short write, then the disk is full
        budget["bytes"] -= n
        return n
    monkeypatch.setattr(os, "write", write)
    rec = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(StoreError) as info:
            fstore(root).get_or_compute(W.SPEC, IDS, rec, progress=False)
    message = str(info.value)
    assert caught == [] and "\n" not in message
    assert f"the disk holding the feature store {root} is full" in message and f"df -h {root}" in message, message
    assert "nothing was half-written" in message and "LIB_CACHE_DIR" in message
    monkeypatch.undo()  # space freed
    _nothing_half_written(entry, ref_files)
    done = finished(entry)
    assert 0 < len(done) < N_SHARDS and not (entry / "manifest.json").exists()
    again = Recorder()
    res = fstore(root).get_or_compute(W.SPEC, IDS, again, progress=False)
    assert again.shards == [s for s in range(N_SHARDS) if s not in done] and res.shards_reused == len(done)
    assert real_files(entry) == ref_files

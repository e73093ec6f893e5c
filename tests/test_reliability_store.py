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
"""
from __future__ import annotations

import json
import os
import select
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
    """The entry's files under their real names (no temp files, no lock files)."""
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
        manifest["manifest_sha256"] = store_mod._manifest_digest(manifest)
    path.write_text(json.dumps(manifest, indent=1))


def _wrong_sha(m):
    m["shards"][1]["sha256"] = "0" * 64


# name: (damage(entry), file named in the message, words in the message, repair's answer, shards recomputed)
CORRUPTIONS = {
    "shard: flipped data byte": (lambda e: _flip(e / "shard-00001.npy", -3), "shard-00001.npy", "sha256", [1], [1]),
    "shard: flipped header byte": (lambda e: _flip(e / "shard-00002.npy", 20), "shard-00002.npy", "sha256",
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
                                                 "shard-00001.npy", "sha256", [], []),
    "manifest: wrong dim, resealed": (lambda e: _edit_manifest(e, lambda m: m.update(dim=6), reseal=True),
                                      "manifest.json", "malformed", [], []),
    "manifest: old format without checksum, wrong shard checksum": (
        lambda e: _edit_manifest(e, lambda m: (_wrong_sha(m), m.pop("manifest_sha256"))),
        "shard-00001.npy", "sha256", [], []),
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
    assert f"FeatureStore({str(tmp_path)!r}).repair(spec)" in message, message  # the remedy, runnable
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
    with pytest.raises(StoreError, match=r"ids\.json .* damaged .*delete"):  # nothing vouches for the ids
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
    for p, (out, err) in zip(procs, outs):
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
    holder = store_mod._flock(FeatureStore._lock_path(entry, 3))
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
    holder = store_mod._flock(FeatureStore._lock_path(entry))  # the entry lock, held elsewhere
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

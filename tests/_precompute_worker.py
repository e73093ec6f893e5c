"""A deterministic synthetic precompute into a given store root, for the crash and concurrency tests.

Not a test module (no ``test_`` prefix): tests/test_reliability_store.py runs it as a subprocess.

    python tests/_precompute_worker.py ROOT --log LOG [--rows 30 --shard-rows 4 --dim 5 --dtype float16]
        [--sleep S] [--rank R --world-size W] [--ready FILE --go FILE] [--serve]

* One run (default): ``FeatureStore(ROOT).get_or_compute(SPEC, ids, compute)``, then one JSON line on
  stdout: ``{"pid", "computed", "reused", "sha256"}`` (sha256 of the float32 rows). ``compute`` appends
  ``"<pid> <shard>"`` to LOG before computing a shard, so a test counts (re)computations per shard.
* ``KILL_AT=<event>:<n>`` in the environment: SIGKILL this process at the n-th time lib.core.store reports
  ``event`` through its test hook ``lib.core.store_files._FAULT_HOOK`` (events listed there, e.g.
  ``before_npy_rename``, ``sidecar_partial``, ``manifest_partial``).
* ``--ready FILE --go FILE``: after the imports, create FILE and wait for GO before starting, so that
  two processes start their precompute at the same moment.
* ``--serve``: import once, then read commands from stdin, one per line, and answer one line each.
  ``<event>:<n>`` or ``-`` forks a child that runs once with that kill point (``-``: none) and answers
  ``signal 9`` / ``exit 0`` (``timeout`` after 60 s: a lock that was never released). ``ext:<seconds>``
  forks a child and SIGKILLs it from outside after that many seconds (``signal 9``, or ``exit 0`` if it
  finished first). Forking spares the ~2 s import of torch per run, so a test can afford 25+ kills.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

SPEC = {"kind": "synthetic", "model": {"name": "crash-test", "sha256": "0" * 64}, "layer": -1,
        "pooling": "mean", "template": "{c}", "dtype": "float16", "preprocessing": {"size": 7},
        "manifest_sha256": "f" * 64}


def ids_for(rows: int) -> list[str]:
    return [f"item-{i:04d}" for i in range(rows)]


def features(rows: np.ndarray, dim: int) -> np.ndarray:
    """Deterministic, row-dependent features; column 0 is the row index (row order is checkable)."""
    rows = np.asarray(rows, dtype=np.int64)
    x = np.cos(rows[:, None] * 0.731 + np.arange(dim)[None, :] * 0.377).astype(np.float32) * 2.5
    x[:, 0] = rows
    return x


def _kill_hook(spec: str):
    event, _, n = spec.rpartition(":")
    n, seen = int(n), {"count": 0}

    def hook(name: str) -> None:
        if name == event:
            seen["count"] += 1
            if seen["count"] == n:
                os.kill(os.getpid(), signal.SIGKILL)
    return hook


def run_once(args, kill_at: str | None) -> dict:
    from lib.core import store, store_files

    store_files._FAULT_HOOK = _kill_hook(kill_at) if kill_at else None
    log = Path(args.log)

    def compute(rows: np.ndarray) -> np.ndarray:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {int(rows[0]) // args.shard_rows}\n")
        if args.sleep:
            time.sleep(args.sleep)
        return features(rows, args.dim)

    fs = store.FeatureStore(args.root, dtype=args.dtype, shard_rows=args.shard_rows, verify="always")
    res = fs.get_or_compute(SPEC, ids_for(args.rows), compute, rank=args.rank, world_size=args.world_size,
                            progress=False)
    if res is None:
        return {"pid": os.getpid(), "computed": None, "reused": None, "sha256": None}
    return {"pid": os.getpid(), "computed": res.shards_computed, "reused": res.shards_reused,
            "sha256": hashlib.sha256(res.numpy().tobytes()).hexdigest()}


def _child(args, kill_at: str | None, sleep: float | None = None) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: run, never return into the serve loop
        code = 0
        try:
            if sleep is not None:
                args.sleep = sleep
            run_once(args, kill_at)
        except BaseException:  # noqa: BLE001  (reported through the exit code and stderr)
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            sys.stderr.flush()
            os._exit(code)
    return pid


def _wait(pid: int, kill_after: float | None = None, timeout: float = 60.0) -> str:
    start = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return f"signal {os.WTERMSIG(status)}"
            return f"exit {os.WEXITSTATUS(status)}"
        elapsed = time.monotonic() - start
        if kill_after is not None and elapsed >= kill_after:
            os.kill(pid, signal.SIGKILL)
            kill_after = None
        if elapsed > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.002)


def serve(args) -> None:
    import lib.core.store  # noqa: F401  (imported once, before any fork)

    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        if command.startswith("ext:"):
            reply = _wait(_child(args, None, sleep=args.sleep or 0.02), kill_after=float(command[4:]))
        else:
            reply = _wait(_child(args, None if command == "-" else command))
        print(reply, flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--log", required=True)
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--shard-rows", type=int, default=4)
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--ready")
    parser.add_argument("--go")
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args)
        return
    import lib.core.store  # noqa: F401  (the slow import, before the start barrier)

    if args.ready:
        Path(args.ready).touch()
        deadline = time.monotonic() + 120
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                sys.exit("no go signal within 120 s")
            time.sleep(0.005)
    print(json.dumps(run_once(args, os.environ.get("KILL_AT"))), flush=True)


if __name__ == "__main__":
    main()

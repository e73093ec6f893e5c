"""Write-then-rename helpers: nothing half-written is ever where a reader would take it as complete.

Why: a crash in the middle of writing a converted model or a data file would otherwise leave a file that the
next run happily loads.
See notebooks/sharelock.py, section "The frozen encoders and the frozen-feature pipeline" (the store
writes every shard this way).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


def write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj: Any) -> None:
    """Strict JSON (``allow_nan=False``): a NaN or infinity is an error here, never an invalid file."""
    write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode())


@contextlib.contextmanager
def building_dir(target: Path) -> Iterator[Path]:
    """Yield a fresh temporary folder that becomes ``target`` only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

"""Write-then-rename helpers: nothing half-written is ever where a reader would take it as complete.

Why: a crash in the middle of writing a converted model or a data file would otherwise leave a file that the
next run happily loads.
See notebooks/sharelock.py, section "The frozen encoders and the frozen-feature pipeline" (the store
writes every shard this way). Files and folders get the mode the umask gives any new one (``mkstemp``'s 0600
would hide a shared cache or a prepared dataset from a lab's other users).
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Iterator


def write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # less the umask, as open() would
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
    tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    tmp.mkdir()  # 0777 less the umask (mkdtemp's 0700 would hide the folder from other users)
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

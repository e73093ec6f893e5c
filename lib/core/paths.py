"""Where the book keeps what it builds: converted models, extracted data, the feature store.

Under ``<repo>/.cache`` in a checkout, else ``~/.cache/frozen-lip-book``; ``LIB_CACHE_DIR`` overrides both.
See notebooks/sharelock.py, section "The frozen encoders and the frozen-feature pipeline".
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def in_checkout() -> bool:
    """True when ``lib`` is imported from a clone of the book (not from an installed wheel)."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "lib").is_dir()


def cache_root() -> Path:
    override = os.environ.get("LIB_CACHE_DIR")
    if override:
        root = Path(override).expanduser()
    elif in_checkout():
        root = REPO_ROOT / ".cache"
    else:
        root = Path.home() / ".cache" / "frozen-lip-book"
    root.mkdir(parents=True, exist_ok=True)
    return root


def models_dir() -> Path:
    return _sub("models")


def assets_dir() -> Path:
    """Raw data packages (npm tarballs, unpacked) that the small config is built from."""
    return _sub("assets")


def store_dir() -> Path:
    return _sub("store")


def _sub(name: str) -> Path:
    path = cache_root() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def quiet() -> bool:
    """Progress bars are off under CI (``CI`` set and not ``0``/``false``/``no``) and with ``LIB_PROGRESS=0``.

    Why one rule: a bar is noise in a log and a stderr block on a rendered page; ``make book`` sets
    ``LIB_PROGRESS=0`` for the chapters it executes (tools/run_notebooks.py), an interactive session keeps its bars."""
    off = ("", "0", "false", "no", "off")
    return (os.environ.get("CI", "").strip().lower() not in off
            or os.environ.get("LIB_PROGRESS", "").strip().lower() in off[1:])

"""Which project source files a piece of code can run: the modules it imports, and theirs, transitively.

Why: ``make book`` re-runs a chapter and the run cache (:mod:`lib.core.run_cache`) retrains a run only when a
file they can reach changes; both read the answer from the sources (``ast``, nothing imported).
See notebooks/sharelock.py, section "Training the head" (the run cache).
"""
from __future__ import annotations

import ast
from pathlib import Path

from lib.core.paths import REPO_ROOT

__all__ = ["PACKAGES", "lib_modules", "imported", "closure"]

# The checkout's four packages: the library, the chapters' experiments, the book's corpora, the set-up tools.
PACKAGES = ("lib", "chapters", "corpora", "provision")


def lib_modules(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of the checkout's packages (:data:`PACKAGES`) by dotted name (a package by its ``__init__.py``)."""
    out = {}
    for package in PACKAGES:
        for path in (Path(root) / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules a file imports, with every package on the way (importing ``lib.a.b`` runs ``lib`` and
    ``lib.a``)."""
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    with_parents = {".".join(name.split(".")[:i]) for name in found for i in range(1, name.count(".") + 2)}
    return {name for name in with_parents if name in known}


def closure(start: list[Path] | list[str], root: Path = REPO_ROOT) -> list[Path]:
    """The project files reachable from ``start``: source files (a notebook's ``.py``) or dotted module names.

    A start file that cannot be parsed depends on every project module (the safe answer for a cache key)."""
    known = lib_modules(root)
    todo: set[str] = set()
    for item in start:
        if isinstance(item, str) and item in known:
            todo |= {item} | imported(known[item], known)
            continue
        try:
            todo |= imported(Path(item), known)
        except SyntaxError:
            return sorted(known.values())
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo |= imported(known[name], known) - seen
    return sorted(known[name] for name in seen)

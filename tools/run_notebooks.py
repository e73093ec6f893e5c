"""Run every chapter of the book in the config the book shows (the first half of ``make book``).

Each notebook's ``.py`` (jupytext py:percent) is the source: it is synced into the ``.ipynb``, which
papermill then executes in place from the repository root, so the book renders the outputs this
run produced. ``book/configs.yaml`` names the config each chapter is shown in (``medium`` once a
chapter has one, else ``small``); papermill's injected-parameters cell is removed again from the
executed notebook, so that the ``.ipynb`` keeps the cells of its ``.py`` (jupytext would otherwise copy
the injected cell into the source) and nbval, which runs the committed notebooks in CI, runs them in
their default, ``small``. The config a page shows is recorded in its metadata (``book.config``) and
printed by its configuration cell. A chapter shown in ``medium`` first installs the medium data and
models (``tools/setup.sh`` step ``medium``; under a second when they are there).

A notebook whose source, configs, ``lib`` and shown config are unchanged since its last successful
run is skipped (the fingerprint is kept in the notebook's metadata); ``--force`` reruns everything.
Features are cached in the store either way, so a rerun retrains heads but recomputes no feature.

Chapters run side by side, ``--jobs`` at a time (default: one per core), each kernel with its share of the
cores as torch threads (``OMP_NUM_THREADS``, unless already set), the longest first (the seconds its last run
took, from ``book/metrics/<chapter>.json``). Why: a chapter's training steps are small, and two one-thread
processes get more done on two cores than one two-thread process; the longest-first order keeps the last
chapter from running alone. The set-up steps run once, before any chapter, so the chapters running side by
side only read what they built; the feature store locks its own entries (``lib.core.store``).

After a successful run the chapter's ``metrics.json`` (written by its last cells into
``runs/<chapter>/``) is copied to ``book/metrics/<chapter>.json``, next to the executed notebook in the
repository, so the results page (``tools/results_page.py``) shows the numbers of the very run the book
renders. A notebook that did not write a fresh ``metrics.json`` fails the run. Each cell's seconds go to
``runs/<chapter>/cells.json`` (:func:`record_cell_seconds`): where the chapter's time went, on this machine.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import multiprocessing
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import papermill
import yaml

from lib.core import atomic, code_closure

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "frozen-lip"
SHOWN = ROOT / "book" / "configs.yaml"
CONFIGS = ("small", "medium", "full")


def shown_configs() -> dict[str, str]:
    """Chapter name -> the config its committed outputs show (``book/configs.yaml``), checked."""
    try:
        shown = yaml.safe_load(SHOWN.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise SystemExit(f"{SHOWN.relative_to(ROOT)} is missing: it names the config each chapter is shown in "
                         "(e.g. `sharelock: medium`); restore it from git") from None
    names = {source.stem for source in chapters()}
    if not isinstance(shown, dict) or set(shown) != names or not set(shown.values()) <= set(CONFIGS[:2]):
        raise SystemExit(f"{SHOWN.relative_to(ROOT)} must map every chapter ({', '.join(sorted(names))}) to "
                         f"`small` or `medium`; it reads {shown!r}")
    return shown


def toc_files() -> list[str]:
    """Every page of ``_toc.yml`` in reading order (root first), as source paths without suffix."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(str(node["file"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(toc.get("parts", toc.get("chapters", [])))
    return found


def chapters() -> list[Path]:
    """Notebook sources in ``_toc.yml`` order."""
    return [ROOT / f"{file}.py" for file in toc_files() if file.startswith("notebooks/")]


# Set-up-time code: dataset preparation, model conversion, pre-flight and precompute. A chapter's offline run never
# executes it: its notebook imports ``provision.preflight.require`` and calls it only under ``config == "full"``,
# where it checks and refuses, never computes; what set-up produces (converted models, prepared data) keys the
# features by content (the store's key: the model files' sha256, the dataset manifest's hash), not by its source.
SETUP_TIME_PACKAGES = ("provision",)


def lib_closure(source: Path, config: str = "small") -> list[Path]:
    """The project files a notebook can run in ``config``: the modules its cells import and theirs, transitively
    (:func:`lib.core.code_closure.imported`), without the set-up-time packages (:data:`SETUP_TIME_PACKAGES`)
    unless ``config`` is ``full``.

    Why: a chapter is re-executed when *its* inputs change, not when another chapter's module does (a medium
    chapter takes half an hour), nor when a dataset preparer it never runs does. A notebook that cannot be parsed
    depends on every module."""
    known = code_closure.lib_modules(ROOT)
    if config != "full":
        known = {name: path for name, path in known.items() if name.split(".")[0] not in SETUP_TIME_PACKAGES}
    try:
        todo = code_closure.imported(source, known)
    except SyntaxError:
        return sorted(known.values())
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo |= code_closure.imported(known[name], known) - seen
    return sorted(known[name] for name in seen)


def config_section(source: Path, config: str) -> bytes:
    """The section of the chapter's config file that its committed outputs were computed from, canonical.

    Why only that section: a chapter shown in ``medium`` does not read its ``small`` section, so making CI's
    ``small`` run lighter must not force half an hour of ``medium`` re-execution."""
    path = ROOT / "notebooks" / "configs" / f"{source.stem}.yaml"
    sections = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if config not in sections:
        raise SystemExit(f"{path.relative_to(ROOT)} has no `{config}` section, but book/configs.yaml shows "
                         f"{source.stem} in `{config}`: add the section or show the chapter in another config.")
    return json.dumps(sections[config], sort_keys=True, default=str).encode()


def fingerprint(source: Path, config: str = "small") -> str:
    """What the committed outputs depend on: the notebook's source, the section of its config file it is shown
    in (:func:`config_section`) and the project files it can run there (:func:`lib_closure`)."""
    digest = hashlib.sha256(f"config={config}\n".encode())
    digest.update(config_section(source, config))
    for path in [source, *lib_closure(source, config)]:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def ensure_medium_setup() -> None:
    """The medium config's data and models (``make setup-medium``), installed once; idempotent."""
    subprocess.run(["bash", "tools/setup.sh"], cwd=ROOT, check=True, env={**os.environ, "SETUP_STEPS": "medium"})


def without_injected_parameters(notebook):
    """The executed notebook minus papermill's injected-parameters cell (see the module docstring)."""
    notebook.cells = [c for c in notebook.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    return notebook


def unsized_images(notebook):
    """The notebook with every image output's fixed ``width``/``height`` dropped, in place.

    Why: matplotlib's ``retina`` format records half the PNG's pixel size as the displayed size; the book's theme
    then shrinks the width to its column but keeps that height, stretching every figure (1.4-2x). Without a fixed
    size the image scales with the column and keeps its aspect ratio."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            for kind in [k for k in output.get("metadata", {}) if k.startswith("image/")]:
                sized = output["metadata"][kind]
                if isinstance(sized, dict):
                    for axis in ("width", "height"):
                        sized.pop(axis, None)
                    if not sized:
                        del output["metadata"][kind]
    return notebook


def is_current(source: Path, config: str) -> bool:
    """Whether the committed notebook was executed from the chapter's current inputs (:func:`fingerprint`)."""
    notebook_path = source.with_suffix(".ipynb")
    if not notebook_path.exists():
        return False
    existing = nbformat.read(notebook_path, as_version=4)
    return existing.metadata.get("book", {}).get("fingerprint") == fingerprint(source, config)


def last_seconds(source: Path) -> float:
    """How long the chapter's last recorded run took (``book/metrics/<chapter>.json``; 0 when unknown)."""
    try:
        return float(json.loads((ROOT / "book" / "metrics" / f"{source.stem}.json").read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def longest_first(sources: list[Path]) -> list[Path]:
    """The order that keeps a pool of workers busy to the end: the longest chapter first (ties: reading order)."""
    return sorted(sources, key=lambda source: -last_seconds(source))


def cell_seconds(notebook) -> list[dict]:
    """Each executed code cell's wall-clock seconds (papermill's ``duration``), the slowest first, with the cell's
    position among the notebook's cells and its first line. Why: the committed notebook drops papermill's metadata
    (it would change every cell on every run), yet where a chapter's time goes is what decides how to make the
    book cheaper (a feature cell, a sweep, the seeds); see the README's budgets."""
    found = []
    for index, cell in enumerate(notebook.cells):
        seconds = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if cell.get("cell_type") == "code" and isinstance(seconds, (int, float)):
            first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
            found.append({"cell": index, "seconds": round(float(seconds), 1), "first_line": first[:100]})
    return sorted(found, key=lambda c: -c["seconds"])


def record_cell_seconds(notebook, source: Path, config: str) -> Path:
    """Write :func:`cell_seconds` of an executed chapter to ``runs/<chapter>/cells.json`` (beside its
    ``metrics.json``; not committed: the time is this machine's) and print its three slowest cells."""
    cells = cell_seconds(notebook)
    out = ROOT / "runs" / source.stem / "cells.json"
    atomic.write_json(out, {"chapter": source.stem, "config": config, "cells": cells})  # never half a file
    slowest = "; ".join(f"cell {c['cell']} {c['seconds']:.0f} s ({c['first_line'][:40]})" for c in cells[:3])
    print(f"{source.stem}: slowest cells: {slowest or 'none timed'} (all in {out.relative_to(ROOT)})", flush=True)
    return out


def run(source: Path, force: bool, config: str = "small") -> float:
    """Execute one chapter in ``config`` unless it is current; returns the seconds it took (0 when skipped)."""
    notebook_path = source.with_suffix(".ipynb")
    stamp = fingerprint(source, config)
    if not force and is_current(source, config):
        print(f"{source.stem}: unchanged since its last run, skipped (use --force to rerun)")
        return 0.0
    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (frozen-lip)", "language": "python"}
    partial = notebook_path.with_name(f".{notebook_path.stem}.running.ipynb")
    nbformat.write(notebook, partial)
    start = time.time()
    try:
        papermill.execute_notebook(
            str(partial), str(partial), kernel_name=KERNEL, cwd=str(ROOT), progress_bar=False, log_output=False,
            parameters={"config": config},
        )
    except BaseException:
        print(f"{source.stem}: FAILED; the executed notebook with the error is {partial}", file=sys.stderr)
        raise
    executed = unsized_images(without_injected_parameters(nbformat.read(partial, as_version=4)))
    record_cell_seconds(executed, source, config)
    executed.metadata.pop("papermill", None)
    for cell in executed.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    executed.metadata["book"] = {"fingerprint": stamp, "config": config}
    metrics = ROOT / "runs" / source.stem / "metrics.json"
    if not metrics.is_file() or metrics.stat().st_mtime < start:
        raise RuntimeError(f"{source.stem}: the run wrote no fresh {metrics}; its results cell must write metrics.json")
    nbformat.write(executed, notebook_path)  # only a complete run replaces the committed notebook
    atomic.write_bytes(ROOT / "book" / "metrics" / f"{source.stem}.json", metrics.read_bytes())  # never half a file
    partial.unlink()
    seconds = time.time() - start
    print(f"{source.stem}: executed in the {config} config in {seconds:.0f} s "
          f"({os.environ.get('OMP_NUM_THREADS') or os.cpu_count()} torch threads)", flush=True)
    return seconds


def run_all(sources: list[Path], shown: dict[str, str], force: bool, jobs: int) -> dict[str, float]:
    """Run ``sources`` (each in its shown config), ``jobs`` at a time, longest first; chapter -> seconds.

    A chapter that fails does not stop the others (they are independent); the run then ends with an error
    naming every chapter that failed, each of whose partly executed notebook is kept beside it."""
    todo = [source for source in sources if force or not is_current(source, shown[source.stem])]
    for source in sorted(set(sources) - set(todo)):
        print(f"{source.stem}: unchanged since its last run, skipped (use --force to rerun)")
    if any(shown[source.stem] == "medium" for source in todo):
        ensure_medium_setup()  # once, before any chapter: the chapters side by side only read what it built
    jobs = max(1, min(jobs, len(todo)))
    if jobs > 1:
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    seconds, failed = {}, []
    if jobs == 1:
        for source in longest_first(todo):
            seconds[source.stem] = run(source, True, shown[source.stem])
        return seconds
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: no inherited threads or locks
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = {pool.submit(run, source, True, shown[source.stem]): source for source in longest_first(todo)}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future].stem
            try:
                seconds[name] = future.result()
            except Exception as error:  # noqa: BLE001  (reported below, after the other chapters finish)
                failed.append(name)
                print(f"{name}: FAILED ({type(error).__name__}: {error})", file=sys.stderr, flush=True)
    if failed:
        raise SystemExit(f"{len(failed)} chapter(s) failed: {', '.join(sorted(failed))}; each one's executed "
                         "notebook with the error is notebooks/.<chapter>.running.ipynb")
    return seconds


def main() -> None:
    # Training runs already done are read back (lib.core.run_cache): a chapter re-executed with its features in the
    # store and its runs cached costs its figures, not its training. LIB_RUN_CACHE=0 retrains everything.
    os.environ.setdefault("LIB_RUN_CACHE", "1")
    # A progress bar on a book page is a stderr block (and the pages are checked for none): off in the kernels.
    os.environ.setdefault("LIB_PROGRESS", "0")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rerun notebooks even if unchanged")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="chapters run side by side (default: one per core; 1 runs them one after another)")
    parser.add_argument("names", nargs="*", help="only these chapters (e.g. sharelock)")
    args = parser.parse_args()
    if args.jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {args.jobs}")
    shown = shown_configs()
    unknown = set(args.names) - set(shown)
    if unknown:
        raise SystemExit(f"no chapter named {', '.join(sorted(unknown))}; the chapters are {', '.join(shown)}")
    start = time.time()
    seconds = run_all([s for s in chapters() if not args.names or s.stem in args.names], shown, args.force, args.jobs)
    if seconds:
        print(f"{len(seconds)} chapter(s) executed in {time.time() - start:.0f} s of wall time "
              f"({sum(seconds.values()):.0f} s of chapter time, {args.jobs} at a time)", flush=True)


if __name__ == "__main__":
    main()

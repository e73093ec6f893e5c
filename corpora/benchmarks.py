"""The one entry point from a chapter's ``data:`` section to its benchmark, whatever the corpus.

Why a module of its own: the emoji corpus and the full configs' image-caption pairs are assembled by
:func:`corpora.datasets.build_benchmark`, the ``medium`` config's pooled corpus by :func:`corpora.medium.benchmark`,
and ``corpora.medium`` builds on ``corpora.datasets``; dispatching here keeps the imports one-way. See
notebooks/sharelock.py, section "The data".
"""
from __future__ import annotations

from corpora import datasets, medium
from corpora.datasets import Benchmark

__all__ = ["build"]


def build(data) -> Benchmark:
    """The benchmark that a ``corpora.datasets.DataConfig`` describes (``corpus``: emoji, pairs or medium)."""
    if data.corpus == "medium":
        return medium.benchmark(data)
    return datasets.build_benchmark(data)

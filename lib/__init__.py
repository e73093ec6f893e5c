"""Language-image pre-training on frozen features: the library behind the book.

What a researcher imports, in layers, each importing only the ones above it: ``lib.core`` (configs, encoders,
the feature store, training, evaluation, results), ``lib.data``, ``lib.nn`` (heads, losses, towers) and
``lib.methods`` (ShareLock, FLAME, Three Towers, FDT, LiT). The book's experiments, data and set-up tools live
beside it and are never imported by it. See book/design.md, "Three parts".
"""
import warnings as _warnings

from lib.core import torchvision_fix as _torchvision_fix

_torchvision_fix.apply()
# tqdm.auto warns on import in a Jupyter kernel without ipywidgets; the book's bars are off under CI and
# plain text otherwise, so the warning (which prints a machine path) is noise on every page.
_warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.2.0"

"""Language-image pre-training on frozen features: the library behind the book.

What a researcher imports, in layers, each importing only the ones above it (tests/test_layout.py checks it):

* ``lib.core``: validated configs, frozen encoders, the cached-feature store and the feature plans it serves,
  one training loop, zero-shot and retrieval metrics, results and the comparison rule;
* ``lib.data``: decoding an image safely, the resident pixel cache;
* ``lib.nn``: building blocks: heads, every loss, sparsemax, towers trained from scratch;
* ``lib.methods``: the papers' methods (ShareLock, FLAME, Three Towers, FDT, LiT), importable on their own.

The book's experiments (``chapters``), its data (``corpora``) and its set-up tools (``provision``) live beside
the library and are never imported by it. See book/design.md, "Three parts".
"""
import warnings as _warnings

from lib.core import torchvision_fix as _torchvision_fix

_torchvision_fix.apply()
# tqdm.auto warns on import in a Jupyter kernel without ipywidgets; the book's bars are off under CI and
# plain text otherwise, so the warning (which prints a machine path) is noise on every page.
_warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.2.0"

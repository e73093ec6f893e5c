"""Language-image pre-training on frozen features: the library behind the book.

Layers, each importing only the ones above it in this list (tests/test_layout.py checks it):

* ``lib.core``: the infrastructure no paper owns: validated configs, frozen encoders, the cached-feature
  store and the feature plans it serves, one training loop, zero-shot and retrieval metrics, results;
* ``lib.data``: the datasets (emoji, Fashion-MNIST, WordNet, the full configs' loaders) and manifests;
* ``lib.nn``: building blocks: heads, every loss, sparsemax, towers trained from scratch;
* ``lib.methods``: the papers' methods (ShareLock, FLAME, Three Towers, FDT), importable on their own;
* ``chapters``: one module per chapter of the book: its config schema, benchmark, feature plan,
  experiments and claims (a chapter never imports another chapter);
* ``provision.precompute``: a chapter's feature plan on one process or many.

See ``book/intro.md`` for the map and book/design.md for the store.
"""
import warnings as _warnings

from lib.core import torchvision_fix as _torchvision_fix

_torchvision_fix.apply()
# tqdm.auto warns on import in a Jupyter kernel without ipywidgets; the book's bars are off under CI and
# plain text otherwise, so the warning (which prints a machine path) is noise on every page.
_warnings.filterwarnings("ignore", message="IProgress not found")

__version__ = "0.2.0"

"""Language-image pre-training on frozen features: the library behind the book.

One module per concern (see ``book/intro.md`` for the map):
``encoders`` (frozen text and vision models -> features), ``store`` (the cached-feature store),
``heads`` and ``losses`` (what is trained), ``train`` (one loop for every method),
``evaluate`` (zero-shot classification and retrieval), ``data`` (corpora and manifests),
``config`` (validated small/full configs), ``models`` (where each named model's weights come from).
"""
from lib import torchvision_fix as _torchvision_fix

_torchvision_fix.apply()

__version__ = "0.1.0"

"""Make ``import torchvision`` (and so ``timm`` and ``open_clip``) work beside a CPU-only torch.

Why: the only torchvision for ``torch==2.13.0`` is a CUDA build whose compiled ops cannot load next to the CPU
torch wheel (``operator torchvision::nms does not exist``). The book uses only torchvision's transforms, so when
the extension cannot load the two op schemas it needs are declared (``site-packages`` is never touched).
See notebooks/sharelock.py, section "The frozen encoders and the frozen-feature pipeline".
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # keeps the Library object (and so the schema definitions) alive
applied = False


def _extension_loads(package_dir: Path) -> bool:
    import torch

    candidates = sorted(package_dir.glob("_C*.so")) + sorted(package_dir.glob("_C*.pyd"))
    for candidate in candidates:
        try:
            torch.ops.load_library(str(candidate))
            return True
        except OSError:
            return False
    return False


def apply() -> bool:
    """Declare torchvision's op schemas if (and only if) its compiled extension cannot load.

    Returns True when the schemas were declared by this call or an earlier one.
    """
    global _library, applied
    if applied:
        return True
    if "torchvision" in sys.modules:  # already imported (it worked, or it is too late to help)
        return False
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    if _extension_loads(package_dir):
        return False
    import torch

    if hasattr(torch.ops, "torchvision") and hasattr(torch.ops.torchvision, "nms"):
        return False
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)
    applied = True
    return True

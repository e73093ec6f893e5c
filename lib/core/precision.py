"""``auto``: the floating-point format a frozen encoder or a training loop runs in, decided by the machine.

Why: bfloat16 is much faster than float32 on a CPU with bfloat16 matrix units (AMX, AVX512-BF16) and much
slower on one without (book/performance.md), so a config may say ``dtype: auto`` (encoders) or
``precision: auto`` (``train:``) and the run resolves it here, on the machine that runs it. The resolved name,
never ``auto``, goes into the store's and the run cache's keys. See notebooks/sharelock.py, section "Configuration".
"""
from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["BF16_UNITS", "cpu_bf16_units", "bf16_is_fast", "resolve_dtype", "resolve_precision"]

BF16_UNITS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of the CPU's bfloat16 matrix instructions
CPUINFO = Path("/proc/cpuinfo")


@functools.lru_cache(maxsize=None)
def cpu_bf16_units(cpuinfo: Path = CPUINFO) -> tuple[str, ...]:
    """The CPU's bfloat16 matrix units named in ``cpuinfo``'s ``flags`` line (empty without them, or off Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return tuple(sorted(set(BF16_UNITS) & set(flags)))


def bf16_is_fast(device: str = "cpu") -> bool:
    """Whether bfloat16 is faster than float32 on ``device``: a CUDA GPU that supports it, or a CPU with
    bfloat16 units (:func:`cpu_bf16_units`). Any other device (MPS, a CPU without them): no."""
    kind = str(device).split(":")[0]
    if kind == "cuda":
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    return kind == "cpu" and bool(cpu_bf16_units())


def resolve_dtype(dtype: str, device: str = "cpu", *, backend: str = "eager") -> str:
    """An encoder's ``dtype`` with ``auto`` resolved: ``bfloat16`` where :func:`bf16_is_fast`, else ``float32``.

    ``backend="onnx"`` (ONNX Runtime's float32 graphs, ``lib.core.onnx_vision``) always resolves to ``float32``.
    Any other name is returned unchanged."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if backend == "eager" and bf16_is_fast(device) else "float32"


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """A training ``precision`` with ``auto`` resolved: ``bf16`` (autocast) where :func:`bf16_is_fast`, else
    ``fp32``."""
    if precision != "auto":
        return precision
    return "bf16" if bf16_is_fast(device) else "fp32"

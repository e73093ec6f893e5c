"""What every chapter writes at its end: ``metrics.json`` (the findings, the claims with their verdicts, every run,
the versions and arithmetic it ran with) and the findings table a page shows first.

Why here and not in the library: the file's schema is the book's (the results page and the tests read it).
See notebooks/sharelock.py, section "What reproduced, what did not".
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lib.core.results import VERDICTS, Claim, Runs

__all__ = ["SCHEMA", "json_safe", "versions", "arithmetic", "validate_metrics", "write_metrics", "findings_table"]


def findings_table(claims: Sequence["Claim"]) -> str:
    """A chapter's key findings as one Markdown table: claim (A vs B), this run (A − B with its 95 % interval),
    the paper (its numbers and where they are printed, or "the book's own question"), the verdict."""
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = ["| claim | this run: A − B [95 % interval] | paper | verdict |", "|---|---|---|---|"]
    for c in claims:
        paper = c.paper_column if c.origin == "paper" else "the book's own question"
        rows.append(f"| {cell(c.names[0])} vs {cell(c.names[1])} | {cell(c.short_evidence)} | {cell(paper)} | "
                    f"**{c.verdict}** |")
    return "\n".join(rows)



SCHEMA = 2
_REQUIRED = {"schema": int, "chapter": str, "config": str, "settings": dict, "versions": dict, "seconds": float,
             "features": dict, "findings": dict, "claims": list, "runs": list, "extra": dict}


def json_safe(value: Any) -> Any:
    """Plain JSON values: numpy/torch scalars to numbers, tuples to lists, NaN and infinities to None."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return json_safe(value.item())
    if hasattr(value, "tolist"):
        return json_safe(value.tolist())
    return str(value)


def versions() -> dict[str, str]:
    """The versions a result depends on."""
    out = {"python": platform.python_version()}
    for module in ("torch", "transformers", "timm", "open_clip", "numpy"):
        try:
            out[module] = __import__(module).__version__
        except ImportError:  # pragma: no cover
            out[module] = "not installed"
    return out


def arithmetic() -> dict:
    """What a config's ``dtype: auto`` and ``precision: auto`` resolved to on this machine, and why (its CPU's
    bfloat16 units; :mod:`lib.core.precision`): the same config computes in bfloat16 on one machine and in float32
    on another, and a result must say which."""
    from lib.core.precision import cpu_bf16_units, resolve_dtype, resolve_precision

    return {"cpu_bf16_units": list(cpu_bf16_units()), "auto_dtype": resolve_dtype("auto"),
            "auto_precision": resolve_precision("auto")}


def validate_metrics(metrics: Mapping) -> None:
    """Raise ValueError naming the first field that breaks :data:`SCHEMA`."""
    for name, kind in _REQUIRED.items():
        if name not in metrics:
            raise ValueError(f"metrics.json: field {name!r} is missing")
        value = metrics[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind):
            raise ValueError(f"metrics.json: field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    if metrics["schema"] != SCHEMA:
        raise ValueError(f"metrics.json: schema {metrics['schema']} is not {SCHEMA}")
    for key, value in metrics["findings"].items():
        if value is not None and not isinstance(value, (int, float)):
            raise ValueError(f"metrics.json: finding {key!r} must be a number or null, got {value!r}")
    for claim in metrics["claims"]:
        if claim.get("verdict") not in VERDICTS:
            raise ValueError(f"metrics.json: claim {claim.get('id')!r} has verdict {claim.get('verdict')!r}, "
                             f"not one of {VERDICTS}")
    json.dumps(metrics, allow_nan=False)  # strict JSON: raises on NaN or infinity


def write_metrics(output_dir: str | os.PathLike, *, chapter: str, config: str, settings: Any, started: float,
                  runs: Runs | Sequence[Mapping] = (), findings: Mapping[str, Any] | None = None,
                  claims: Sequence[Claim] = (), features: Any = None, extra: Mapping | None = None) -> Path:
    """Write ``<output_dir>/metrics.json`` (atomically) in :data:`SCHEMA`, and return its path.

    ``settings``: the chapter's validated config (a dataclass); ``started``: ``time.time()`` at the start
    of the run; ``features``: the :class:`lib.core.features.Features` of the run (its shard counts are
    recorded); ``extra``: anything else the chapter's tests or the results page read.
    """
    from lib.core import run_cache
    from lib.core.atomic import write_json

    computed, reused = features.counts() if features is not None else (0, 0)
    metrics = json_safe({
        "schema": SCHEMA, "chapter": chapter, "config": config, "settings": settings, "versions": versions(),
        "arithmetic": arithmetic(),
        "seconds": round(time.time() - started, 1),
        "features": {"shards_computed": computed, "shards_reused": reused,
                     "entries": len(features.report) if features is not None else 0},
        "training": run_cache.counts(),  # runs trained here and runs read back (lib.core.run_cache)
        "findings": dict(findings or {}),
        "claims": [c.as_dict() for c in claims],
        "runs": list(runs.rows if isinstance(runs, Runs) else runs),
        "extra": dict(extra or {}),
    })
    if isinstance(metrics["seconds"], int):
        metrics["seconds"] = float(metrics["seconds"])
    validate_metrics(metrics)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    write_json(path, metrics)
    return path


"""What every benchmark shares: the machine it ran on, a fair timer, one JSON layout, common flags.

Why one module: a speed-up means nothing without the machine and the load it was measured under,
and the performance page (``bench/render.py``) reads every result the same way. Each benchmark
writes ``bench/results/<name>.json`` holding

* ``benchmark``: its name; ``machine``: :func:`machine_info` (CPU model, cores, torch threads,
  library versions, GPU if any, date, load average when it started);
* ``ratios``: a list of :func:`ratio` records, each a candidate measured against a baseline *in the
  same run* (never a number from elsewhere);
* whatever else the benchmark measured (absolute rates, sizes, agreement of the outputs).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Callable

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line of ``/proc/cpuinfo`` (``None`` where there is no such file or line)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo``), or what ``platform`` knows elsewhere."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def bf16_units() -> list[str]:
    """The CPU's bfloat16 matrix units (``amx_bf16``, ``avx512_bf16``; empty where it has none or no
    ``/proc/cpuinfo``): bfloat16 on the CPU is fast with them and several times slower without
    (``bench.text_precision``). The same reader decides the configs' ``dtype: auto`` (lib.core.precision)."""
    from lib.core.precision import cpu_bf16_units

    return list(cpu_bf16_units())


def machine_info(device: str = "cpu") -> dict:
    """Everything about the machine that changes a timing; recorded in every result JSON."""
    import numpy
    import torch

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {
        "cpu": cpu_model(),
        "arch": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "device": device,
        "bf16_units": bf16_units(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        # Other processes share this machine: the 1-minute load when the benchmark started says how many.
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return info


def ratio(name: str, value: float, *, baseline: str, candidate: str, measure: str,
          baseline_value: float | None = None, candidate_value: float | None = None, unit: str = "",
          target: float | None = None) -> dict:
    """One measured ratio: ``value`` = candidate / baseline for rates (> 1 is better for the candidate).

    ``target``, when given, is the value the project promises (e.g. store reads >= 0.8 of raw memmap).
    """
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"ratio {name!r} is {value!r}: a measured ratio must be a positive finite number")
    record = {"name": name, "value": float(value), "baseline": baseline, "candidate": candidate, "measure": measure}
    if baseline_value is not None:
        record.update(baseline_value=float(baseline_value), candidate_value=float(candidate_value), unit=unit)
    if target is not None:
        record["target"] = float(target)
    return record


def sync(device: str) -> None:
    """Wait for queued GPU work, so a timer measures the work and not its launch."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def best_times(functions: dict[str, Callable[[], object]], repeats: int, device: str = "cpu") -> dict[str, float]:
    """Best wall time of each function over ``repeats`` rounds, the functions interleaved in each round.

    Interleaving means a burst of load from another process on a shared machine lands on every
    candidate alike; the minimum is the time least disturbed by it.
    """
    best = {name: math.inf for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            sync(device)
            start = time.perf_counter()
            function()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def parser(description: str, name: str) -> argparse.ArgumentParser:
    """The flags every benchmark takes: ``--quick`` (tiny sizes, for tests), ``--device``, ``--threads``, ``--out``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes (seconds): checks the benchmark runs, not its numbers")
    p.add_argument("--device", default="cpu", help="cpu or cuda (GPU runs use bf16 autocast and resident tensors)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--out", default=str(RESULTS_DIR / f"{name}.json"))
    return p


def setup_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def write_report(report: dict, out: str | os.PathLike) -> Path:
    """Write the result JSON (refusing NaN/inf: every number on the page must be a real measurement).

    Atomically (``lib.core.atomic.write_bytes``): a benchmark stopped mid-write never leaves a truncated JSON
    that ``bench.render`` would read as a result."""
    from lib.core.atomic import write_bytes

    path = Path(out)
    write_bytes(path, (json.dumps(report, indent=2, allow_nan=False) + "\n").encode())
    return path


def publish(name: str, config: dict, ratios: list[dict], out: str | os.PathLike, device: str = "cpu",
            **measured) -> dict:
    """One benchmark's report (its name, the machine, its config, its ratios, then what else it ``measured``),
    written to ``out`` and its ratios printed; returned."""
    report = {"benchmark": name, "machine": machine_info(device), "config": config, "ratios": ratios, **measured}
    write_report(report, out)
    print_ratios(report)
    return report


def print_ratios(report: dict) -> None:
    for r in report.get("ratios", []):
        print(f"{r['value']:8.3g}x  {r['name']}  ({r['candidate']} vs {r['baseline']}, {r['measure']})")

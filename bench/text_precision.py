"""Benchmark: text features in bfloat16 vs float32 on the CPU, same model, same texts, same process.

Why: the language models are most of the book's CPU time (the ``medium`` ladder's features take over an hour on
two cores, and the small config's decoders most of CI's feature time). Every text model entry of a config takes
``dtype: float32 | bfloat16 | float16`` (``lib.core.encoders.TextEncoder``), and the dtype is part of the store
key. On a CPU with bfloat16 matrix units (Intel AMX or AVX512-BF16) a bfloat16 forward pass is several times
faster; on one without them PyTorch emulates bfloat16 and it is several times *slower*. This benchmark measures
both on the machine it runs on: the float32 eager path is the baseline; bfloat16 runs beside it natively, and
once more in a subprocess with oneDNN held to AVX512_CORE (``ONEDNN_MAX_CPU_ISA``), which is what a CPU without
the bfloat16 units runs. The features' agreement (max |difference|, cosine) says what bfloat16 costs in accuracy.

    .venv/bin/python -m bench.text_precision --n 256             # the small config's three models
    .venv/bin/python -m bench.text_precision --n 256 --ladder    # and the medium ladder's four (make setup-medium)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from bench import _common
from lib.core.encoders import TextEncoder
from corpora import emoji

NAME = "text_precision"
# (model, pooling): the small config's two decoders, read at the last token as ShareLock and ViTeRB do, and its
# encoder; ``--ladder`` adds the rest of the medium config's ladder (``make setup-medium`` installs it).
MODELS = (("offline/smollm2-135m-instruct", "last_token"), ("offline/gemma-3-270m", "last_token"),
          ("offline/all-MiniLM-L6-v2", "mean"))
LADDER = (("offline/paraphrase-MiniLM-L3-v2", "mean"), ("offline/all-mpnet-base-v2", "mean"),
          ("offline/qwen2.5-coder-0.5b-instruct", "last_token"), ("offline/qwen2.5-coder-1.5b-instruct", "last_token"))
NO_BF16_ISA = "AVX512_CORE"  # oneDNN's instruction set without AVX512-BF16 and AMX


def captions(n: int) -> list[str]:
    """The first ``n`` emoji captions (label and keywords): the small config's training text."""
    return [emoji.caption(c, "label_tags") for c in emoji.load_concepts()[:n]]


def measure(model: str, pooling: str, texts: list[str], batch_size: int, repeats: int, dtypes: tuple[str, ...],
            device: str = "cpu") -> dict:
    """Texts per second of each dtype (best of ``repeats`` rounds, the dtypes interleaved in each round) and the
    features of each."""
    encoders = {d: TextEncoder(model, pooling=pooling, batch_size=batch_size, dtype=d, device=device) for d in dtypes}
    features = {}
    with torch.no_grad():
        for _dtype, encoder in encoders.items():  # warm-up: allocator, oneDNN's kernels for these shapes
            encoder.encode(texts[: min(8, len(texts))], progress=False)

        def run(dtype):
            return lambda: features.__setitem__(dtype, encoders[dtype].encode(texts, progress=False))

        seconds = _common.best_times({d: run(d) for d in dtypes}, repeats, device)
    return {"seconds": seconds, "texts_per_s": {d: len(texts) / s for d, s in seconds.items()}, "features": features}


def agreement(reference: torch.Tensor, other: torch.Tensor) -> dict:
    """How far ``other`` is from ``reference`` (both ``(N, D)``): max |difference|, the same relative to the
    reference's largest entry, the smallest and mean cosine between matching rows, and the share of texts whose
    nearest other text is the same under both."""
    reference, other = reference.float(), other.float()
    cosine = torch.nn.functional.cosine_similarity(reference, other, dim=-1)

    def nearest(x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.normalize(x, dim=-1)
        similarity = x @ x.T
        similarity.fill_diagonal_(-2.0)
        return similarity.argmax(dim=-1)

    return {"max_abs_difference": float((reference - other).abs().max()),
            "max_relative_difference": float((reference - other).abs().max() / reference.abs().max()),
            "min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()),
            "same_nearest_neighbour": float((nearest(reference) == nearest(other)).float().mean())}


def without_bf16_units(model: str, pooling: str, n: int, batch_size: int, repeats: int, threads: int | None) -> dict:
    """The same measurement in a subprocess whose oneDNN may not use AVX512-BF16 or AMX: what a CPU without them
    runs (the instruction set is fixed when oneDNN starts, so it cannot change inside this process)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        command = [sys.executable, "-m", "bench.text_precision", "--child", model, pooling, str(out), "--n", str(n),
                   "--batch-size", str(batch_size), "--repeats", str(repeats)]
        command += ["--threads", str(threads)] if threads else []
        env = {**os.environ, "ONEDNN_MAX_CPU_ISA": NO_BF16_ISA}
        subprocess.run(command, env=env, check=True, cwd=Path(__file__).resolve().parents[1])
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--n", type=int, default=None, help="captions per model (default 256; --quick 8)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None, help="rounds per dtype (default 3; --quick 1)")
    parser.add_argument("--models", nargs="+", default=None,
                        help="model:pooling pairs (default: the small config's three)")
    parser.add_argument("--ladder", action="store_true", help="add the medium ladder's four (make setup-medium)")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "POOLING", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _common.setup_threads(args.threads)
    n = args.n or (8 if args.quick else 256)
    repeats = args.repeats or (1 if args.quick else 3)
    texts = captions(n)
    if args.child:  # the subprocess of without_bf16_units: timings only
        model, pooling, out = args.child
        found = measure(model, pooling, texts, args.batch_size, repeats, ("float32", "bfloat16"), args.device)
        Path(out).write_text(json.dumps({"texts_per_s": found["texts_per_s"], "seconds": found["seconds"]}))
        return found
    models = [tuple(m.split(":", 1)) for m in args.models] if args.models else list(MODELS)
    models += list(LADDER) if args.ladder else []
    results = []
    for model, pooling in models:
        found = measure(model, pooling, texts, args.batch_size, repeats, ("float32", "bfloat16"), args.device)
        row = {"model": model, "pooling": pooling, "texts": len(texts), "texts_per_s": found["texts_per_s"],
               "seconds": found["seconds"], **agreement(found["features"]["float32"], found["features"]["bfloat16"])}
        print(f"{model}: float32 {row['texts_per_s']['float32']:.1f}/s, "
              f"bfloat16 {row['texts_per_s']['bfloat16']:.1f}/s,"
              f" min cosine {row['min_cosine']:.5f}", flush=True)
        results.append(row)
    emulated = None
    if args.device == "cpu":
        model, pooling = models[0]
        child = without_bf16_units(model, pooling, n, args.batch_size, repeats, args.threads)
        emulated = {"model": model, "isa": NO_BF16_ISA, **child}
    report = {"benchmark": NAME, "captions": len(texts), "batch_size": args.batch_size, "repeats": repeats,
              "quick": args.quick, "results": results, "without_bf16_units": emulated,
              "machine_info": _common.machine_info(args.device)}
    report["ratios"] = ratios(report)
    _common.write_report(report, args.out)
    _common.print_ratios(report)
    return report


def ratios(report: dict) -> list[dict]:
    """bfloat16 against float32 per model (texts/s; > 1: bfloat16 is faster), and on the emulated CPU without
    bfloat16 units (the machine's ``bf16_units`` and the report's ``without_bf16_units`` say which; the page's
    section says so)."""
    out = [_common.ratio(f"text features {r['model'].removeprefix('offline/')}: bfloat16 vs float32",
                         r["texts_per_s"]["bfloat16"] / r["texts_per_s"]["float32"], baseline="float32 (eager PyTorch)",
                         candidate="bfloat16 (eager PyTorch)", measure="texts/s",
                         baseline_value=r["texts_per_s"]["float32"], candidate_value=r["texts_per_s"]["bfloat16"],
                         unit="texts/s") for r in report["results"]]
    emulated = report.get("without_bf16_units")
    if emulated:
        speed = emulated["texts_per_s"]
        out.append(_common.ratio(
            f"text features {emulated['model'].removeprefix('offline/')}: bfloat16 vs float32, no bf16 units",
            speed["bfloat16"] / speed["float32"],
            baseline="float32 (eager PyTorch)", candidate="bfloat16 (eager PyTorch)", measure="texts/s",
            baseline_value=speed["float32"], candidate_value=speed["bfloat16"], unit="texts/s"))
    return out


if __name__ == "__main__":
    main()

"""Benchmark: batched, length-sorted text features vs one caption at a time (the official loop).

ShareLock's official precompute runs the LLM on one caption per forward pass (8 GPU-hours for 563k
captions with Llama-3-8B). ``lib.core.encoders.TextEncoder`` tokenises once, sorts by length and pads
per batch. Both paths run here on the same captions and model, in the same process, and the report
is their ratio (and the padding each batching wastes), never an absolute number alone.

    .venv/bin/python -m bench.text_features --model offline/smollm2-135m-instruct --n 256
"""
from __future__ import annotations

import platform
import time

import torch

from bench import _common
from corpora import emoji
from lib.core.encoders import TextEncoder

NAME = "text_features"


def padding_waste(lengths: list[int], batch_size: int, sort: bool) -> float:
    """Fraction of token slots that are padding when batching ``lengths`` (sorted or not)."""
    order = sorted(lengths) if sort else list(lengths)
    slots = sum(max(order[i : i + batch_size]) * len(order[i : i + batch_size])
                for i in range(0, len(order), batch_size))
    return 1.0 - sum(lengths) / slots


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--model", default="offline/smollm2-135m-instruct")
    parser.add_argument("--pooling", default="last_token")
    parser.add_argument("--n", type=int, default=None, help="captions to encode (default 256; --quick 8)")
    parser.add_argument("--batch-size", type=int, default=None, help="default 64; --quick 4")
    args = parser.parse_args(argv)
    _common.setup_threads(args.threads)
    n = args.n or (8 if args.quick else 256)
    batch_size = args.batch_size or (4 if args.quick else 64)

    captions = [emoji.caption(c, "label_tags") for c in emoji.load_concepts()[:n]]
    encoder = TextEncoder(args.model, pooling=args.pooling, batch_size=batch_size, device=args.device)
    encoder.encode(captions[:8], progress=False)  # warm-up

    _common.sync(args.device)
    start = time.perf_counter()
    one_by_one = torch.cat([encoder.encode([text], progress=False) for text in captions])
    _common.sync(args.device)
    baseline_s = time.perf_counter() - start

    start = time.perf_counter()
    batched = encoder.encode(captions, progress=False)
    _common.sync(args.device)
    batched_s = time.perf_counter() - start

    lengths = [len(ids) for ids in encoder.tokenize(captions)]
    report = {
        "benchmark": NAME,
        "model": args.model,
        "captions": len(captions),
        "batch_size": batch_size,
        "device": args.device,
        "quick": args.quick,
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "baseline_one_at_a_time_captions_per_s": len(captions) / baseline_s,
        "lib_batched_sorted_captions_per_s": len(captions) / batched_s,
        "speedup": baseline_s / batched_s,
        "padding_waste_sorted": padding_waste(lengths, batch_size, sort=True),
        "padding_waste_unsorted": padding_waste(lengths, batch_size, sort=False),
        "max_abs_difference": float((one_by_one - batched).abs().max()),
        "machine_info": _common.machine_info(args.device),
    }
    report["ratios"] = ratios(report)
    _common.write_report(report, args.out)
    for key, value in report.items():
        if key not in ("ratios", "machine_info"):
            print(f"{key:>40}: {value:.4g}" if isinstance(value, float) else f"{key:>40}: {value}")
    return report


def ratios(report: dict) -> list[dict]:
    """The speed-up as a ratio record (also derived by ``bench.render`` from JSONs written before it existed)."""
    return [_common.ratio(
        f"text features {report['model'].split('/')[-1]}: batched, length-sorted vs one caption at a time",
        report["speedup"], baseline="one caption per forward pass (official loop)",
        candidate="lib TextEncoder (batched, sorted)", measure="captions/s",
        baseline_value=report["baseline_one_at_a_time_captions_per_s"],
        candidate_value=report["lib_batched_sorted_captions_per_s"], unit="captions/s")]


if __name__ == "__main__":
    main()

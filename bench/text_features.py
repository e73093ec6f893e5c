"""Benchmark: batched, length-sorted text features vs one caption at a time (the official loop).

ShareLock's official precompute runs the LLM on one caption per forward pass (8 GPU-hours for 563k
captions with Llama-3-8B). ``lib.encoders.TextEncoder`` tokenises once, sorts by length and pads
per batch. Both paths run here on the same captions and model, in the same process, and the report
is their ratio (and the padding each batching wastes), never an absolute number alone.

    .venv/bin/python -m bench.text_features --model offline/smollm2-135m-instruct --n 256
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from lib import emoji
from lib.encoders import TextEncoder


def padding_waste(lengths: list[int], batch_size: int, sort: bool) -> float:
    """Fraction of token slots that are padding when batching ``lengths`` (sorted or not)."""
    order = sorted(lengths) if sort else list(lengths)
    slots = sum(max(order[i : i + batch_size]) * len(order[i : i + batch_size]) for i in range(0, len(order), batch_size))
    return 1.0 - sum(lengths) / slots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="offline/smollm2-135m-instruct")
    parser.add_argument("--pooling", default="last_token")
    parser.add_argument("--n", type=int, default=256, help="captions to encode")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default="bench/results/text_features.json")
    args = parser.parse_args()

    captions = [emoji.caption(c, "label_tags") for c in emoji.load_concepts()[: args.n]]
    encoder = TextEncoder(args.model, pooling=args.pooling, batch_size=args.batch_size)
    encoder.encode(captions[:8], progress=False)  # warm-up

    start = time.perf_counter()
    one_by_one = torch.cat([encoder.encode([text], progress=False) for text in captions])
    baseline_s = time.perf_counter() - start

    start = time.perf_counter()
    batched = encoder.encode(captions, progress=False)
    batched_s = time.perf_counter() - start

    lengths = [len(ids) for ids in encoder.tokenize(captions)]
    report = {
        "model": args.model,
        "captions": len(captions),
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "baseline_one_at_a_time_captions_per_s": len(captions) / baseline_s,
        "lib_batched_sorted_captions_per_s": len(captions) / batched_s,
        "speedup": baseline_s / batched_s,
        "padding_waste_sorted": padding_waste(lengths, args.batch_size, sort=True),
        "padding_waste_unsorted": padding_waste(lengths, args.batch_size, sort=False),
        "max_abs_difference": float((one_by_one - batched).abs().max()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for key, value in report.items():
        print(f"{key:>40}: {value:.4g}" if isinstance(value, float) else f"{key:>40}: {value}")


if __name__ == "__main__":
    main()

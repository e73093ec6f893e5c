"""Benchmark: facet-decoupled attention vs K separate passes vs one K-times-larger batched pass.

FLAME embeds every caption under K facet prompts. Run naively that is K forward passes over the same
caption (``separate``: one left-padded batch per facet) or one pass over a K-times-larger batch of the
N*K full prompts (``stacked``). ``lib.core.facets`` runs the caption once and the K short suffixes beside
it (``decoupled``). All three run here on the same captions and model, in the same process; the report
is their ratios (and the tokens each pushes through the model), never an absolute number alone.

    .venv/bin/python -m bench.facets --n 64 --facets long
"""
from __future__ import annotations

import os
import platform
import time

import torch

from bench import _common
from corpora import emoji
from lib.core.facets import FACET_SETS, FacetEncoder

NAME = "facets"
MODELS = ("offline/smollm2-135m-instruct", "offline/gemma-3-270m")


def token_slots(encoder: FacetEncoder, captions: list[str], method: str) -> int:
    """Token positions (real + padding) each method sends through the model for these captions."""
    prefixes = encoder.tokenize_prefixes(captions)
    suffixes = [len(s) for s in encoder.suffix_ids]
    k, b = len(suffixes), encoder.batch_size

    def padded(lengths: list[int], rows: int) -> int:
        lengths = sorted(lengths)
        return sum(max(lengths[i : i + rows]) * len(lengths[i : i + rows]) for i in range(0, len(lengths), rows))

    if method == "decoupled":
        return padded([len(p) for p in prefixes], b) + len(prefixes) * sum(suffixes)
    if method == "separate":
        return sum(padded([len(p) + s for p in prefixes], b) for s in suffixes)
    return padded([len(p) + s for p in prefixes for s in suffixes], b * k)


def measure(name: str, captions: list[str], facets: tuple[str, ...], batch_size: int, repeats: int,
            device: str) -> dict:
    """Best of ``repeats`` rounds, the methods interleaved within each round, so a burst of load from
    another process on a shared machine does not land on one method only."""
    encoder = FacetEncoder(name, facets=facets, batch_size=batch_size, device=device)
    methods = ("decoupled", "separate", "stacked")
    with torch.no_grad():
        for method in methods:  # warm-up: allocator, kernels
            encoder.encode(captions[:4], method=method, progress=False)
        seconds, outputs = {m: float("inf") for m in methods}, {}
        for _ in range(repeats):
            for method in methods:
                _common.sync(device)
                start = time.perf_counter()
                outputs[method] = encoder.encode(captions, method=method, progress=False)
                _common.sync(device)
                seconds[method] = min(seconds[method], time.perf_counter() - start)
    n, k = len(captions), len(facets)
    return {
        "model": name,
        "captions": n,
        "facets": k,
        "batch_size_captions": batch_size,
        "repeats": repeats,
        "device": device,
        "embeddings_per_s": {m: n * k / s for m, s in seconds.items()},
        "seconds": seconds,
        "speedup_vs_separate": seconds["separate"] / seconds["decoupled"],
        "speedup_vs_stacked": seconds["stacked"] / seconds["decoupled"],
        "token_slots": {m: token_slots(encoder, captions, m) for m in seconds},
        "max_abs_difference_vs_separate": float((outputs["decoupled"] - outputs["separate"]).abs().max()),
        "max_abs_difference_vs_stacked": float((outputs["decoupled"] - outputs["stacked"]).abs().max()),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--models", nargs="+", default=None, help=f"default {list(MODELS)}; --quick the first")
    parser.add_argument("--n", type=int, default=None, help="captions to embed (default 64; --quick 4)")
    parser.add_argument("--facets", default="long", choices=sorted(FACET_SETS))
    parser.add_argument("--captions", default="long", choices=("label", "label_tags", "long"))
    parser.add_argument("--batch-size", type=int, default=16, help="captions per decoupled pass")
    parser.add_argument("--repeats", type=int, default=None, help="rounds; the best time of each method counts "
                        "(default 2; --quick 1)")
    args = parser.parse_args(argv)
    _common.setup_threads(args.threads)
    models = args.models or (list(MODELS[:1]) if args.quick else list(MODELS))
    n = args.n or (4 if args.quick else 64)
    repeats = args.repeats or (1 if args.quick else 2)

    concepts = emoji.load_concepts()
    step = max(1, len(concepts) // n)
    captions = [emoji.caption(c, args.captions) for c in concepts[::step][:n]]
    facets = FACET_SETS[args.facets]
    report = {
        "benchmark": NAME,
        "quick": args.quick,
        "captions_kind": args.captions,
        "facet_set": args.facets,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "results": [
            measure(name, captions, facets, min(args.batch_size, n), repeats, args.device) for name in models
        ],
        "machine_info": _common.machine_info(args.device),
    }
    report["ratios"] = ratios(report)
    _common.write_report(report, args.out)
    for result in report["results"]:
        print(f"{result['model']}: {result['captions']} captions x {result['facets']} facets")
        for key in ("speedup_vs_separate", "speedup_vs_stacked", "max_abs_difference_vs_separate"):
            print(f"{key:>40}: {result[key]:.4g}")
        for method, rate in result["embeddings_per_s"].items():
            slots = result["token_slots"][method]
            print(f"{method:>40}: {rate:.3g} embeddings/s, {slots} token slots")
    return report


def ratios(report: dict) -> list[dict]:
    """The two speed-ups per model as ratio records (``bench.render`` derives them for older JSONs too)."""
    out = []
    for r in report["results"]:
        rates = r["embeddings_per_s"]
        for other, label in (("separate", "K separate passes"), ("stacked", "one K-times-larger batch")):
            out.append(_common.ratio(
                f"facets {r['model'].split('/')[-1]}: decoupled attention vs {label}", r[f"speedup_vs_{other}"],
                baseline=f"{label} ({other})", candidate="lib.core.facets decoupled attention", measure="embeddings/s",
                baseline_value=rates[other], candidate_value=rates["decoupled"], unit="embeddings/s"))
    return out


if __name__ == "__main__":
    main()

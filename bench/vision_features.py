"""Benchmark: vision feature extraction, eager PyTorch vs the fast path ``lib`` offers.

On CPU the fast path is ``VisionEncoder(..., backend="onnx")`` (``lib.core.onnx_vision``: the same network
exported once to ONNX and run by ONNX Runtime); on a CUDA GPU it is bf16 autocast with channels-last
memory. Both paths run here on the same real images (emoji drawings) and the same preprocessing, in
the same process, interleaved; the report is their ratio, for the network alone (pixels already
prepared) and for ``encode`` end to end (PIL decoding and resizing included, which both paths share),
with the largest feature difference between them.

    .venv/bin/python -m bench.vision_features                # CPU: eager vs ONNX Runtime
    .venv/bin/python -m bench.vision_features --device cuda  # GPU: fp32 vs bf16 autocast
"""
from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bench import _common  # noqa: E402

NAME = "vision_features"
# name, library, input size: the small config's two models at its sizes, and at the 224 px of the papers.
CASES = {
    "efficientnet-lite0@128": ("offline/efficientnet-lite0", "timm", 128),
    "dinov2-small@112": ("offline/dinov2-small", "transformers", 112),
    "efficientnet-lite0@224": ("offline/efficientnet-lite0", "timm", 224),
    "dinov2-small@224": ("offline/dinov2-small", "transformers", 224),
}
QUICK_CASES = ("efficientnet-lite0@128",)


def load_images(n: int) -> list:
    """``n`` real emoji drawings (Noto, 64 px RGBA), spread over the whole set."""
    from corpora import emoji

    concepts = emoji.load_concepts()
    step = max(1, len(concepts) // n)
    return [c.image("google") for c in concepts[::step][:n]]


class GpuFastForward:
    """The GPU fast path: bf16 autocast, and channels-last memory for convolutional (timm) networks."""

    def __init__(self, encoder):
        self.encoder = encoder
        if encoder.library == "timm":
            encoder.model.to(memory_format=torch.channels_last)

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        if self.encoder.library == "timm":
            pixels = pixels.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.encoder._forward(pixels).float()


def run_all(forward, pixels: torch.Tensor, batch_size: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([forward(pixels[i:i + batch_size]).float().cpu() for i in range(0, len(pixels), batch_size)])


def measure_case(case: str, images: list, batch_size: int, repeats: int, device: str) -> dict:
    from lib.core.encoders import VisionEncoder, to_rgb

    name, library, size = CASES[case]
    common = dict(library=library, image_size=size, crop_pct=1.0, batch_size=batch_size, device=device)
    eager = VisionEncoder(name, **common)
    start = time.perf_counter()
    if device == "cpu":
        fast_encoder = VisionEncoder(name, backend="onnx", **common)
        fast_forward, fast_label = fast_encoder._forward, "ONNX Runtime (lib backend='onnx')"
    else:  # a second encoder, so the eager one keeps its contiguous fp32 layout
        fast_encoder = VisionEncoder(name, **common)
        fast_forward, fast_label = GpuFastForward(fast_encoder), "bf16 autocast + channels-last"
    setup_s = time.perf_counter() - start  # ONNX: export (first run) or load of the cached graph
    pixels = torch.stack([eager.transform(to_rgb(image)) for image in images]).to(device)

    run_all(eager._forward, pixels[:batch_size], batch_size)  # warm-up: allocator, kernels, graph
    run_all(fast_forward, pixels[:batch_size], batch_size)
    outputs = {}
    network = _common.best_times({
        "eager": lambda: outputs.__setitem__("eager", run_all(eager._forward, pixels, batch_size)),
        "fast": lambda: outputs.__setitem__("fast", run_all(fast_forward, pixels, batch_size)),
    }, repeats, device)
    if device == "cpu":  # end to end through encode(): PIL -> transform -> network, as a user calls it
        end_to_end = _common.best_times({
            "eager": lambda: eager.encode(images, progress=False),
            "fast": lambda: fast_encoder.encode(images, progress=False),
        }, repeats, device)
    else:
        end_to_end = None
    difference = (outputs["fast"] - outputs["eager"]).abs()
    cosine = torch.nn.functional.cosine_similarity(outputs["fast"], outputs["eager"])
    n = len(images)
    result = {
        "case": case, "model": name, "library": library, "image_size": size, "images": n,
        "batch_size": batch_size, "repeats": repeats, "device": device, "fast_path": fast_label,
        "fast_setup_s": setup_s,
        "network_images_per_s": {"eager": n / network["eager"], "fast": n / network["fast"]},
        "network_speedup": network["eager"] / network["fast"],
        "max_abs_difference": float(difference.max()),
        "max_abs_feature": float(outputs["eager"].abs().max()),
        "min_cosine": float(cosine.min()),
    }
    if end_to_end:
        result["encode_images_per_s"] = {"eager": n / end_to_end["eager"], "fast": n / end_to_end["fast"]}
        result["encode_speedup"] = end_to_end["eager"] / end_to_end["fast"]
    return result


def ratios(results: list[dict]) -> list[dict]:
    out = []
    for r in results:
        baseline = "eager PyTorch fp32"
        for key, what in (("network", "network only (pixels prepared)"), ("encode", "encode() end to end")):
            if f"{key}_speedup" in r:
                rates = r[f"{key}_images_per_s"]
                out.append(_common.ratio(
                    f"vision {r['case']}: {what}", r[f"{key}_speedup"], baseline=baseline, candidate=r["fast_path"],
                    measure="images/s", baseline_value=rates["eager"], candidate_value=rates["fast"], unit="images/s"))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--cases", nargs="+", default=None, choices=sorted(CASES))
    parser.add_argument("--n", type=int, default=None, help="images per case (default 64; --quick 8)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=None, help="rounds; the best time counts (default 3)")
    args = parser.parse_args(argv)
    _common.setup_threads(args.threads)
    cases = args.cases or (QUICK_CASES if args.quick else tuple(CASES))
    n = args.n or (8 if args.quick else 64)
    repeats = args.repeats or (1 if args.quick else 3)
    images = load_images(n)
    results = [measure_case(case, images, min(args.batch_size, n), repeats, args.device) for case in cases]
    report = {
        "benchmark": NAME,
        "machine": _common.machine_info(args.device),
        "config": {"cases": list(cases), "images": n, "batch_size": args.batch_size, "repeats": repeats,
                   "quick": args.quick},
        "ratios": ratios(results),
        "results": results,
    }
    _common.write_report(report, args.out)
    _common.print_ratios(report)
    for r in results:
        print(f"{r['case']}: max |diff| {r['max_abs_difference']:.2g} (features up to {r['max_abs_feature']:.3g}), "
              f"min cosine {r['min_cosine']:.7f}")
    return report


if __name__ == "__main__":
    main()

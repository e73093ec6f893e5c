"""The GPU check: what one GPU does with the papers' shapes, in one call of a few minutes (``tools/gpu_check.sh``).

Why it exists: the full configs are rehearsed on CPU stand-ins in CI, but their speed and memory at the papers' sizes
can only be measured on a GPU, and a GPU is lent to this project rarely, briefly and without internet. So the check
is one prepared command that needs only what such a machine has (PyTorch, timm, transformers) and reports:

1. ``environment``: the card, its memory, bfloat16 support, the library versions;
2. the measurements (``--only measure``; ``tools/gpu_measure.py``, issue 65): each chapter's dominant step at the
   papers' sizes, the models built from their published configurations with random weights directly on the GPU
   (time and memory do not depend on the weights' values), through the library's own code paths: Llama-3-8B's
   last-token features of CC3M-length captions, DINOv2-B/14's and DINOv2-L/14's image features, ShareLock's head at
   batch 16,384 and the LiT baseline, Mistral-Nemo-12B's 7 facets in one decoupled pass against 7 separate passes,
   FLAME's ViT-B/16 from scratch at 224 px with and without gradient checkpointing, one step of Three Towers' and of
   FDT's towers, Flan-UL2's encoder. Each sweeps its batch until memory or its time budget runs out (``--budget``
   seconds for all of them), and records the best rate, the peak memory and the chapter's full run in GPU-hours on
   this card; ``chapters`` in the JSON adds them up beside the cost model's and the paper's figures. They need
   open_clip on the GPU machine: wheels of open_clip_torch, ftfy and wcwidth in ``GPU_CHECK_WHEELS``;
3. ``bench``: ``python -m bench --device <device> --skip-slow`` for the storage, vision and scaling benchmarks;
4. ``rehearsals``: every chapter's full-config rehearsal (``tools/standins.py``: prepare, pre-flight, precompute
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
from tools import gpu_measure

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
         **{name: None for name in gpu_measure.STEPS},  # each within what is left of --budget (see main)
         "bench": bench_suite,
         "rehearsals": None}  # needs --world (see main)
GROUPS = {"measure": list(gpu_measure.STEPS)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="gpu_check", help="folder for gpu_check.json (and bench/ results)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that every step runs (CPU, seconds)")
    parser.add_argument("--skip", nargs="*", default=[], choices=list(STEPS) + list(GROUPS),
                        help="steps to leave out (measure: every measurement)")
    parser.add_argument("--only", nargs="*", default=None, choices=list(STEPS) + list(GROUPS),
                        help="run only these steps (measure: every measurement)")
    parser.add_argument("--budget", type=float, default=420.0,
                        help="seconds for all the measurements: each stops sweeping at its own budget or at this")
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
    skip = {n for name in args.skip for n in GROUPS.get(name, [name])}
    only = None if args.only is None else {n for name in args.only for n in GROUPS.get(name, [name])}
    report: dict = {"benchmark": "gpu_check", "quick": args.quick, "steps": {}}
    began = time.perf_counter()
    for name, run in STEPS.items():
        if name in skip or (only is not None and name not in only and name != "environment"):
            continue  # the environment always runs (seconds): a result must name its card
        if name in gpu_measure.STEPS:
            left = args.budget - (time.perf_counter() - began)
            if left < 20 and not args.quick:
                report["steps"][name] = {"seconds": 0.0, "result": None, "error": None,
                                         "skipped": f"past the {args.budget:.0f} s budget"}
                continue
            run = lambda d, q, o, name=name, left=left: gpu_measure.run_step(name, d, q, left)  # noqa: E731
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
    if any(name in gpu_measure.STEPS for name in report["steps"]):
        report["chapters"] = gpu_measure.chapters(report["steps"])
    write_bytes(out / "gpu_check.json", json.dumps(report, indent=1, default=str).encode())
    return report


if __name__ == "__main__":
    main()

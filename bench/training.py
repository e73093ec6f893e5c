"""Benchmark: one training step of the ShareLock head, resident tensors vs a DataLoader, and its FLOP/s.

``lib.core.train.fit`` keeps the features resident as tensors and slices each batch out of them with a
seeded permutation. The baseline is the usual PyTorch loop: ``DataLoader`` over a
``TensorDataset`` of the same tensors (``shuffle=True``, same batch size, no workers), with the same
model, optimiser (Adam), cosine schedule and gradient clipping. Both run here on the same synthetic
features, in the same process, interleaved; the report is their steps/s ratio, and the ratio of
their data paths alone (batches/s without the model), which is all that differs between them.

It also reports how much of the machine the step uses: the step's matmul FLOPs (counted below,
:func:`step_flops`) times steps/s, against the FLOP/s of a plain ``torch.matmul`` of the head's largest
layer shape measured in the same run.

    .venv/bin/python -m bench.training
    .venv/bin/python -m bench.training --device cuda --cases paper   # bf16 autocast, batch 16,384
"""
from __future__ import annotations

import contextlib
import time

import torch

from bench import _common

NAME = "training"
# text width, image width, head hidden width, head layers, batch, rows, steps measured
CASES = {
    # the small config: Gemma 3 270M (640) -> EfficientNet-Lite0 (1280), head 512 wide
    # (notebooks/configs/sharelock.yaml)
    "small-config": dict(text_dim=640, image_dim=1280, hidden_dim=512, num_layers=4, batch_size=256, rows=8192,
                         steps=60),
    # the paper's head (4,096 wide, 4 layers) on Llama-3-8B (4096) -> DINOv2-B (768) widths, a CPU-sized batch
    "paper-head": dict(text_dim=4096, image_dim=768, hidden_dim=4096, num_layers=4, batch_size=256, rows=2048, steps=3),
    # the paper's setting (GPU): 563k CC3M pairs, batch 16,384
    "paper": dict(text_dim=4096, image_dim=768, hidden_dim=4096, num_layers=4, batch_size=16384, rows=563_000,
                  steps=20),
}
CPU_CASES, QUICK_CASES = ("small-config", "paper-head"), ("small-config",)
QUICK = dict(rows=1024, steps=4, batch_size=128)


def build(case: dict, device: str):
    from lib.core.config import HeadConfig, LossConfig
    from lib.methods.sharelock import ShareLock
    from lib.core.train import seed_everything

    seed_everything(0)
    head = HeadConfig(hidden_dim=case["hidden_dim"], num_layers=case["num_layers"], dropout=0.2)
    return ShareLock(case["text_dim"], case["image_dim"], head, LossConfig()).to(device)


def features(case: dict) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"text": torch.randn(case["rows"], case["text_dim"], generator=generator),
            "image": torch.randn(case["rows"], case["image_dim"], generator=generator)}


def autocast(device: str):
    """bf16 autocast on a GPU (as a paper-scale run would train); nothing on CPU (fp32)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else contextlib.nullcontext()


def run_fit(case: dict, data: dict, steps: int, device: str, precision: str = "fp32") -> None:
    """``precision="bf16"``: fit's own bfloat16 autocast (``train.precision: bf16``), the CPU comparison below."""
    from lib.core.config import TrainSettings
    from lib.core.train import fit

    config = TrainSettings(steps=steps, batch_size=case["batch_size"], warmup_steps=min(10, steps), eval_every=steps,
                           precision=precision)
    with autocast(device):
        fit(build(case, device), data, None, config, device=device, progress=False)


def run_dataloader(case: dict, data: dict, steps: int, device: str) -> None:
    """The baseline: what fit does per step, with batches from a DataLoader instead of resident slices."""
    from torch.utils.data import DataLoader, TensorDataset

    from lib.core.train import cosine_with_warmup

    method = build(case, device)
    params = [p for p in method.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-3, weight_decay=1e-4)
    warmup = min(10, steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_with_warmup(s, warmup, steps))
    loader = DataLoader(TensorDataset(data["text"], data["image"]), batch_size=case["batch_size"], shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(0),
                        pin_memory=device.startswith("cuda"))
    method.train()
    step = 0
    while step < steps:
        for text, image in loader:
            optimizer.zero_grad(set_to_none=True)
            with autocast(device):
                loss = method.loss({"text": text.to(device, non_blocking=True),
                                    "image": image.to(device, non_blocking=True)})
            loss.backward()
            float(loss.detach())
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            if step == steps:
                break


def batches_resident(case: dict, data: dict, steps: int) -> None:
    """fit's data path alone: a seeded permutation, each batch an index into the resident tensors."""
    generator, b = torch.Generator().manual_seed(0), case["batch_size"]
    per_epoch, perm, done = case["rows"] // b, None, 0
    while done < steps:
        perm = torch.randperm(case["rows"], generator=generator).to(data["text"].device)
        for i in range(min(per_epoch, steps - done)):
            index = perm[i * b:(i + 1) * b]
            {k: v[index] for k, v in data.items()}
        done += per_epoch


def batches_dataloader(case: dict, data: dict, steps: int, device: str) -> None:
    """The baseline's data path alone: DataLoader(TensorDataset) batches, moved to the device."""
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(data["text"], data["image"]), batch_size=case["batch_size"], shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(0))
    done = 0
    while done < steps:
        for text, image in loader:
            text.to(device), image.to(device)
            done += 1
            if done == steps:
                break


def linear_shapes(case: dict) -> list[tuple[int, int]]:
    widths = [case["text_dim"]] + [case["hidden_dim"]] * (case["num_layers"] - 1) + [case["image_dim"]]
    return list(zip(widths[:-1], widths[1:]))


def step_flops(case: dict) -> float:
    """Matmul FLOPs of one training step (a multiply-add counts 2).

    Forward: ``2*B*in*out`` per Linear, plus ``2*B*B*D`` for the CLIP logits (image @ text.T).
    Backward: the weight gradient of every Linear (``2*B*in*out``) and the input gradient of every
    Linear but the first (the frozen features need none); the logits' gradient towards the text side
    only (the image side has no parameters). BatchNorm, ReLU, softmax and Adam are not counted.
    """
    b = case["batch_size"]
    shapes = linear_shapes(case)
    forward = sum(2 * b * i * o for i, o in shapes) + 2 * b * b * case["image_dim"]
    backward = sum(2 * b * i * o for i, o in shapes) + sum(2 * b * i * o for i, o in shapes[1:]) \
        + 2 * b * b * case["image_dim"]
    return float(forward + backward)


def matmul_flops_per_s(case: dict, device: str, repeats: int) -> tuple[float, list[int]]:
    """FLOP/s of ``torch.matmul`` at the head's largest layer shape ``(B, in) @ (in, out)``, this run."""
    b = case["batch_size"]
    i, o = max(linear_shapes(case), key=lambda s: s[0] * s[1])
    x, w = torch.randn(b, i, device=device), torch.randn(i, o, device=device)
    calls = max(1, int(2e9 // (2 * b * i * o)))  # ~2 GFLOP per timing, so a tiny shape is timed over many calls

    def work():
        with autocast(device):
            for _ in range(calls):
                torch.matmul(x, w)

    work()
    seconds = _common.best_times({"matmul": work}, repeats, device)["matmul"]
    return 2 * b * i * o * calls / seconds, [b, i, o]


def measure_case(name: str, case: dict, repeats: int, device: str) -> dict:
    data = features(case)
    if device.startswith("cuda"):
        data = {k: v.to(device) for k, v in data.items()}  # resident on the GPU, as fit keeps them
    steps = case["steps"]
    run_fit(case, data, 2, device)  # warm-up: allocator, kernels
    cpu_data = {k: v.cpu() for k, v in data.items()}
    run_dataloader(case, cpu_data, 2, device)
    timed = {"fit (resident tensors)": lambda: run_fit(case, data, steps, device),
             "DataLoader(TensorDataset)": lambda: run_dataloader(case, cpu_data, steps, device)}
    if not device.startswith("cuda"):  # the same fit under bfloat16 autocast: fast only on CPUs with bf16 units
        run_fit(case, data, 2, device, "bf16")
        timed["fit, bf16 autocast"] = lambda: run_fit(case, data, steps, device, "bf16")
    seconds = _common.best_times(timed, repeats, device)
    rates = {k: steps / s for k, s in seconds.items()}
    data_steps = max(steps, 50)
    batch_seconds = _common.best_times({
        "resident slices": lambda: batches_resident(case, data, data_steps),
        "DataLoader(TensorDataset)": lambda: batches_dataloader(case, cpu_data, data_steps, device),
    }, repeats, device)
    flops = step_flops(case)
    peak, shape = matmul_flops_per_s(case, device, repeats)
    achieved = flops * rates["fit (resident tensors)"]
    return {
        "case": name, **case, "device": device, "precision": "bf16 autocast" if device.startswith("cuda") else "fp32",
        "repeats": repeats, "steps_per_s": rates,
        "speedup": rates["fit (resident tensors)"] / rates["DataLoader(TensorDataset)"],
        "batches_per_s": {k: data_steps / s for k, s in batch_seconds.items()},
        "data_path_speedup": batch_seconds["DataLoader(TensorDataset)"] / batch_seconds["resident slices"],
        "step_flops": flops, "achieved_flop_per_s": achieved,
        "matmul_flop_per_s": peak, "matmul_shape": shape,
        "fraction_of_matmul": achieved / peak,
    }


def ratios(results: list[dict]) -> list[dict]:
    out = []
    for r in results:
        rates = r["steps_per_s"]
        out.append(_common.ratio(
            f"training {r['case']}: resident tensors vs DataLoader", r["speedup"],
            baseline="DataLoader(TensorDataset, shuffle=True)", candidate="lib.core.train.fit (resident tensors)",
            measure="optimiser steps/s", baseline_value=rates["DataLoader(TensorDataset)"],
            candidate_value=rates["fit (resident tensors)"], unit="steps/s"))
        batches = r["batches_per_s"]
        out.append(_common.ratio(
            f"training {r['case']}: data path alone, resident slices vs DataLoader", r["data_path_speedup"],
            baseline="DataLoader(TensorDataset, shuffle=True)", candidate="index into resident tensors",
            measure="batches/s (no model)", baseline_value=batches["DataLoader(TensorDataset)"],
            candidate_value=batches["resident slices"], unit="batches/s"))
        if "fit, bf16 autocast" in rates:
            out.append(_common.ratio(
                f"training {r['case']}: bf16 autocast vs fp32 (CPU)",
                rates["fit, bf16 autocast"] / rates["fit (resident tensors)"], baseline="lib.core.train.fit, fp32",
                candidate="lib.core.train.fit, precision bf16", measure="optimiser steps/s",
                baseline_value=rates["fit (resident tensors)"], candidate_value=rates["fit, bf16 autocast"],
                unit="steps/s"))
        out.append(_common.ratio(
            f"training {r['case']}: step FLOP/s vs dense matmul", r["fraction_of_matmul"],
            baseline=f"torch.matmul {'x'.join(map(str, r['matmul_shape']))}", candidate="head training step (fit)",
            measure="FLOP/s", baseline_value=r["matmul_flop_per_s"] / 1e9,
            candidate_value=r["achieved_flop_per_s"] / 1e9, unit="GFLOP/s"))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = _common.parser(__doc__.splitlines()[0], NAME)
    parser.add_argument("--cases", nargs="+", default=None, choices=sorted(CASES))
    parser.add_argument("--rows", type=int, default=None, help="override the rows of every case")
    parser.add_argument("--steps", type=int, default=None, help="override the steps timed per case")
    parser.add_argument("--batch-size", type=int, default=None, help="override the batch of every case")
    parser.add_argument("--repeats", type=int, default=None, help="rounds; the best time counts (default 3)")
    args = parser.parse_args(argv)
    _common.setup_threads(args.threads)
    names = args.cases or (QUICK_CASES if args.quick else CPU_CASES)
    repeats = args.repeats or (1 if args.quick else 3)
    results = []
    for name in names:
        case = dict(CASES[name])
        if args.quick:
            case.update(QUICK)
        for key in ("rows", "steps", "batch_size"):
            if getattr(args, key) is not None:
                case[key] = getattr(args, key)
        start = time.perf_counter()
        results.append(measure_case(name, case, repeats, args.device))
        print(f"{name}: {time.perf_counter() - start:.1f} s")
    report = {
        "benchmark": NAME,
        "machine": _common.machine_info(args.device),
        "config": {"cases": list(names), "repeats": repeats, "quick": args.quick},
        "flop_count_rule": step_flops.__doc__.split("\n\n")[1].replace("\n    ", " ").strip(),
        "ratios": ratios(results),
        "results": results,
    }
    _common.write_report(report, args.out)
    _common.print_ratios(report)
    return report


if __name__ == "__main__":
    main()

"""How often ViTeRB's recipe sweep picks the same learning rate in float32 and in bfloat16, under today's rule and
under a rule that keeps the configured rate unless another beats it by more than ``k`` standard errors.

Why: a verdict that moves with the arithmetic can move because the sweep chose another recipe (book/design.md,
"Arithmetic is not a finding"). ``lib.core.recipes.choose`` takes the best validation score, however small its lead;
on emoji's 64 validation images one image is 1.6 points, so its choices are mostly noise. This reads the two runs'
sweep records (``book/metrics/viterb.json`` and the kept run beside it) and replays the choice with a margin of
``k`` binomial standard errors of the best score (``sqrt(p (1 - p) / n)``, ``n`` the validation images of seed 0's
split, the split the sweep trains on), so the margin can be chosen from data before ``lib`` changes. Nothing here is
trained: the scores are those the runs recorded.

    python -m tools.sweep_steadiness            # a table: k, choices equal in both runs, default kept in each
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from lib.core.recipes import lead_needed

ROOT = Path(__file__).resolve().parents[1]
METRICS = ROOT / "book" / "metrics"
# What a sweep row says about its candidate; the rest of the row names the head.
RECORD_KEYS = {"lr", "weight_decay", "score", "chosen", "extended", "at_edge", "lead"}


def heads(sweep: list[dict]) -> dict[tuple, list[dict]]:
    """The sweep's rows by head: every field of a row that is not about the candidate (dataset, model, pooling)."""
    out: dict[tuple, list[dict]] = {}
    for row in sweep:
        out.setdefault(tuple(sorted((k, v) for k, v in row.items() if k not in RECORD_KEYS)), []).append(row)
    return out


def replay(rows: list[dict], default_lr: float, n: int | None, k: float | None) -> float:
    """The learning rate chosen among ``rows``: the run's own choice when ``k`` is None; else the configured rate
    unless the best candidate's score beats it by more than ``k`` standard errors of the best score over ``n``."""
    if k is None:
        return next(r["lr"] for r in rows if r["chosen"])
    judged = [r for r in rows if r["score"] is not None]
    best = max(judged, key=lambda r: r["score"])
    default = next((r for r in judged if math.isclose(r["lr"], default_lr)), None)
    if default is None:
        return best["lr"]
    return default["lr"] if best["score"] - default["score"] <= lead_needed(best["score"], n, k) else best["lr"]


def validation_images() -> dict[str, int]:
    """Validation images per medium dataset in seed 0's split (what the sweep scores on)."""
    from chapters.viterb.config import load_config
    from chapters.viterb.experiments import benchmark, seed_benchmark

    cfg = load_config("medium")
    benches = benchmark(cfg)
    return {name: len(seed_benchmark(cfg, benches, name, cfg.seeds[0]).images("val")) for name in benches}


def steadiness(shown: dict, kept: dict, n: dict[str, int], ks=(None, 1.0, 1.5, 2.0, 3.0)) -> list[dict]:
    """For each rule (``k`` None: the runs' own choices), how many heads chose the same rate in both runs and how
    many kept the configured rate in each."""
    default_lr = shown["settings"]["train"]["lr"]
    a, b = heads(shown["extra"]["sweep"]), heads(kept["extra"]["sweep"])
    common = sorted(set(a) & set(b))
    out = []
    for k in ks:
        pick = {name: [replay(rows[h], default_lr, n.get(dict(h).get("dataset")), k) for h in common]
                for name, rows in (("shown", a), ("kept", b))}
        out.append({"k": k, "heads": len(common),
                    "same": sum(math.isclose(x, y) for x, y in zip(pick["shown"], pick["kept"])),
                    "default_shown": sum(math.isclose(x, default_lr) for x in pick["shown"]),
                    "default_kept": sum(math.isclose(x, default_lr) for x in pick["kept"])})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kept", type=Path, default=None, help="the kept run (default: float32/ or bfloat16/)")
    args = parser.parse_args()
    shown = json.loads((METRICS / "viterb.json").read_text())
    kept_path = args.kept or next(p for p in (METRICS / "float32" / "viterb.json", METRICS / "bfloat16" / "viterb.json")
                                  if p.is_file())
    kept = json.loads(kept_path.read_text())
    n = validation_images()
    print(f"validation images (seed 0's split): {n}")
    print("| rule | heads chosen alike in both runs | configured lr kept (shown run, kept run) |")
    print("|---|---|---|")
    for row in steadiness(shown, kept, n):
        rule = "the runs' own choices" if row["k"] is None else f"configured lr unless beaten by > {row['k']:g} SE"
        print(f"| {rule} | {row['same']} of {row['heads']} | {row['default_shown']}, {row['default_kept']} |")


if __name__ == "__main__":
    main()

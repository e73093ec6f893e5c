"""Render ``book/performance.md`` (and its figures) from the benchmarks' JSON, never by hand.

Input: ``bench/results/*.json`` (CPU runs) and ``bench/results/gpu/*.json`` (GPU runs, when someone
has made them), each written by one benchmark of ``python -m bench``. Every number on the page is
read from those files; the page says which machine each file came from. ``tests/test_bench.py``
checks that rendering the committed results reproduces the committed page exactly and that every
ratio in every JSON is on it.

    .venv/bin/python -m bench.render            # writes book/performance.md and book/figures/performance-*.png
    .venv/bin/python -m bench.render --check    # fails if the committed page differs from a fresh rendering
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "book" / "performance.md"
FIGURES = ROOT / "book" / "figures"
ORDER = ("vision_features", "store", "image_shards", "training", "scaling", "text_features", "text_precision", "facets",
         "gpu_check")
TITLES = {
    "vision_features": "Vision feature extraction",
    "store": "Feature store throughput",
    "image_shards": "Training images from tar shards",
    "training": "Training step",
    "scaling": "Scaling with the dataset",
    "text_features": "Text feature extraction",
    "text_precision": "Text features in bfloat16 on the CPU",
    "facets": "FLAME facets: decoupled attention",
    "gpu_check": "The GPU check",
}
GPU_COMMANDS = """\
# vision: fp32 eager vs bf16 autocast + channels-last, 1,024 images, batch 256
python -m bench.vision_features --device cuda --n 1024 --batch-size 256 --out bench/results/gpu/vision_features.json
# training: the paper's setting, synthetic 563k x 4096 text and 563k x 768 image features resident on the GPU,
# head 4096 wide x 4 layers, batch 16,384, bf16 autocast; vs DataLoader batches from host memory
python -m bench.training --device cuda --cases paper --out bench/results/gpu/training.json
# text features at paper batch sizes (the LLM on the GPU)
python -m bench.text_features --device cuda --batch-size 256 --out bench/results/gpu/text_features.json
python -m bench.facets --device cuda --out bench/results/gpu/facets.json
# then re-render this page
python -m bench.render"""


# ----------------------------------------------------------------------------- reading the results

def load(results: Path = RESULTS) -> list[tuple[str, dict]]:
    """``(label, report)`` for every result file, in the page's order; GPU files are labelled ``gpu/<name>``."""
    found = []
    for folder, prefix in ((results, ""), (results / "gpu", "gpu/")):
        for path in sorted(folder.glob("*.json")):
            report = json.loads(path.read_text())
            if path.with_suffix(".log").is_file():  # the GPU check's printed log: its nvidia-smi line names the card
                report["nvidia_smi"] = _nvidia_smi(path.with_suffix(".log").read_text())
            found.append((prefix + path.stem, report))
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda item: (item[0].startswith("gpu/"), rank.get(_name(item), 99), item[0]))


def _nvidia_smi(log: str) -> str | None:
    """The card line ``tools/gpu_check.sh`` prints first (``nvidia-smi --query-gpu=name,memory.total,...``)."""
    lines = log.splitlines()
    for header, row in zip(lines, lines[1:]):
        if header.startswith("name, memory.total"):
            return row.split(",")[0].strip()
    return None


def _name(item: tuple[str, dict]) -> str:
    stem = item[0].split("/")[-1]
    return item[1].get("benchmark") or ("gpu_check" if stem.startswith(("gpu_check", "check-")) else stem)


def ratios_of(name: str, report: dict) -> list[dict]:
    """The ratio records of a report; those written before reports carried them are derived the same
    way the benchmark derives them now (``bench.text_features.ratios``, ``bench.facets.ratios``)."""
    if "ratios" in report:
        return report["ratios"]
    if name in ("text_features", "facets"):
        import importlib

        return importlib.import_module(f"bench.{name}").ratios(report)
    return []


def machine_of(report: dict) -> dict:
    """The machine block; older reports recorded only a few fields, the rest shows as 'not recorded'."""
    if isinstance(report.get("machine"), dict):
        return report["machine"]
    if isinstance(report.get("machine_info"), dict):
        return report["machine_info"]
    if isinstance(report.get("steps"), dict):  # tools/gpu_check.py: its environment step, when it ran
        found = (report["steps"].get("environment") or {}).get("result")
        return found or {"device": "cuda", "gpu": report.get("nvidia_smi")}  # the card, from its log
    return {"arch": report.get("machine"), "cpu_count": report.get("cpu_count"),
            "torch_threads": report.get("threads"), "torch": report.get("torch"),
            "python": report.get("python"), "device": report.get("device", "cpu")}


# ----------------------------------------------------------------------------- formatting

def fmt_ratio(value: float) -> str:
    """How a ratio appears on the page (tests look for exactly this string)."""
    return f"{value:.0f}×" if value >= 100 else f"{value:#.3g}×"


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) >= 10 ** digits:
            return f"{value:,.0f}"
        return f"{value:#.{digits}g}".rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return lines + [""]


# ----------------------------------------------------------------------------- sections

def machines_section(loaded) -> list[str]:
    rows = []
    shown = shown_checks(loaded)
    for label, report in loaded:
        if _name((label, report)) == "gpu_check" and label not in shown:
            continue  # a GPU check the page does not show (a later one ran every chapter it ran): bench/results/gpu/
        m = machine_of(report)
        cpu = m.get("cpu") or m.get("arch")
        cores = m.get("cpu_count") if m.get("cpus_usable") in (None, m.get("cpu_count")) else \
            f"{m.get('cpus_usable')} of {m.get('cpu_count')}"
        gpu = (m.get("gpu") or "none").removeprefix("NVIDIA ")  # "H200": the column fits the page
        rows.append([f"`{label}.json`", cpu, cores, m.get("torch_threads"), m.get("torch"), gpu,
                     m.get("date"), m.get("load_average_1min")])
    return ["## The machines", "",
            "Each result file records the machine it was measured on. The load average (processes "
            "competing for the cores when the benchmark started) says how shared the machine was: "
            "every benchmark interleaves its baseline and its candidate and keeps the best of several "
            "rounds, so load slows both alike, but absolute rates on a loaded machine are lower bounds.", "",
            *table(["result", "CPU", "cores", "torch threads", "torch", "GPU", "date", "load (1 min)"], rows)]


def ratios_section(loaded, figure: str | None) -> list[str]:
    rows = []
    for label, report in loaded:
        for r in ratios_of(_name((label, report)), report):
            values = (f"{fmt(r['baseline_value'])} → {fmt(r['candidate_value'])} {r['unit']}"
                      if "baseline_value" in r else "")
            target = f" (target ≥ {fmt_ratio(r['target'])})" if "target" in r else ""
            rows.append([r["name"], r["candidate"], r["baseline"], values, f"**{fmt_ratio(r['value'])}**{target}"])
    lines = ["## Every ratio measured", "",
             "Each ratio is the candidate's rate divided by the baseline's, both measured in the same run "
             "on the same inputs (> 1× means the candidate is faster). The rates column gives baseline → "
             "candidate.", ""]
    if figure:
        lines += [f"```{{figure}} {figure}", ":name: fig-performance-ratios",
                  ":alt: horizontal bars, one per measured ratio, on a log scale with a line at 1x", "",
                  "Every ratio on this page (log scale). Bars right of the line at 1× are the candidate "
                  "(the path `lib` takes) being faster than its baseline; the FLOP/s rows are the training "
                  "step's share of the machine's dense matmul rate, where 1× would be that peak.", "```", ""]
    # Two narrow tables rather than one wider than the page's column: the ratios, then what each compares.
    return (lines + table(["what", "rates", "ratio"], [[r[0], r[3], r[4]] for r in rows])
            + ["", "What each ratio compares:", ""] + table(["what", "candidate", "baseline"], [r[:3] for r in rows]))


def vision_section(report: dict) -> list[str]:
    rows = []
    for r in report["results"]:
        net, enc = r["network_images_per_s"], r.get("encode_images_per_s", {})
        rows.append([r["case"], r["fast_path"].replace(" (lib backend='onnx')", ""), net["eager"], net["fast"],
                     enc.get("eager"), enc.get("fast"), r["max_abs_difference"], r["max_abs_feature"],
                     1.0 - r["min_cosine"]])
    c = report["config"]
    return [f"{c['images']} real emoji drawings per case, batch {c['batch_size']}, best of {c['repeats']} "
            "interleaved rounds. *network*: the forward pass on prepared pixels (what the backend changes); "
            "*encode*: `VisionEncoder.encode` from PIL images, preprocessing included (the same for both). "
            "The two paths' features agree to the difference shown (`tests/test_fast_vision.py` asserts "
            "max |diff| < 1e-4 and cosine > 0.99999 on real images); because they are not bit-identical, "
            "`backend='onnx'` is part of the feature-store key. Rates are images per second.", "",
            *table(["case", "fast path", "network eager", "network fast", "encode eager",
                    "encode fast", "max abs diff", "max abs feature", "1 − min cosine"], rows)]


def store_section(report: dict) -> list[str]:
    r = report["result"]
    reads = r["read_mb_per_s"]
    rows = [[name, reads["warm"][name], reads["cold"][name]] for name in reads["warm"]]
    writes = [[name, rate] for name, rate in r["write_mb_per_s"].items()]
    raw = next(name for name in reads["warm"] if name.startswith("raw"))
    verdict = []
    for cache in ("warm", "cold"):
        met = [name.removeprefix("store ") for name, rate in reads[cache].items()
               if name != raw and rate >= 0.8 * reads[cache][raw]]
        missed = [name.removeprefix("store ") for name, rate in reads[cache].items()
                  if name != raw and rate < 0.8 * reads[cache][raw]]
        verdict.append(f"{cache} cache: {', '.join(met) or 'none'} reach the target of 80 % of raw"
                       + (f"; {', '.join(missed)} do not (they hash every byte)" if missed else ""))
    cold = ("The *cold* rows first asked the kernel to drop the files' cached pages "
            "(`posix_fadvise(DONTNEED)`, no root needed), so they include reading from the disk; the kernel "
            "may keep some pages, and the disk is a virtual one whose host may cache it."
            if r["cold_cache_dropped_with_fadvise"] else
            "The page cache could not be dropped here, so the *cold* rows are warm too.")
    return [f"{r['rows']:,} rows × {r['dim']} {r['dtype']} ({r['bytes_on_disk'] / 1e6:.1f} MB on disk in "
            f"{r['shards']} shards), best of {r['repeats']} rounds; MB/s count the bytes on disk, read into "
            "one float32 array. The *warm* rows read files whose pages are in RAM (just written or read). "
            + cold + " `verify=once` hashes a shard the first time a process opens it and trusts it after; "
            "`always` hashes on every open; `never` only checks sizes and headers.", "",
            *table(["read", "warm cache (MB/s)", "cold cache (MB/s)"], rows),
            "Against the target: " + "; ".join(verdict) + ".", "",
            "Writes: the store computes shards, converts to float16, hashes each shard, writes it beside its "
            "name, fsyncs and renames; `np.save` returns once the bytes are in the page cache.", "",
            *table(["write", "MB/s"], writes)]


def training_section(report: dict) -> list[str]:
    rows = []
    for r in report["results"]:
        rows.append([r["case"], f"{r['text_dim']}→{r['hidden_dim']}×{r['num_layers'] - 1}→{r['image_dim']}",
                     r["batch_size"], r["rows"], r["precision"], r["steps_per_s"]["fit (resident tensors)"],
                     r["steps_per_s"].get("fit, bf16 autocast", "–"),
                     r["steps_per_s"]["DataLoader(TensorDataset)"], r["batches_per_s"]["resident slices"],
                     r["batches_per_s"]["DataLoader(TensorDataset)"], r["achieved_flop_per_s"] / 1e9,
                     r["matmul_flop_per_s"] / 1e9])
    return ["The ShareLock head (`lib.methods.sharelock.ShareLock`, CLIP loss) on synthetic features. *steps/s*: full "
            "optimiser steps (forward, backward, clipping, Adam); *batches/s*: the data path alone, no model. "
            "FLOP/s of the step count its matmuls: " + report["flop_count_rule"], "",
            *table(["case", "head (in→hidden×k→out)", "batch", "rows", "precision"], [r[:5] for r in rows]), "",
            "*loader*: `DataLoader(TensorDataset)`; *resident*: slices of tensors held in memory; *fit bf16*: the "
            "same `fit` with `precision: bf16` (bfloat16 autocast; measured on the CPU only, where it pays only with "
            "bfloat16 units, see the text features in bfloat16 below).", "",
            *table(["case", "fit steps/s", "fit bf16 steps/s", "loader steps/s", "resident batches/s",
                    "loader batches/s", "step GFLOP/s", "matmul GFLOP/s"], [[r[0], *r[5:]] for r in rows])]


def scaling_section(report: dict, figure: str | None) -> list[str]:
    c = report["config"]
    rows = [[p["task"], p["rows"], p["seconds"], p["peak_added_mb"], p["peak_rss_mb"]] for p in report["points"]]
    fits = []
    for task, fit in report["fits"].items():
        fits.append([task, fit["seconds"]["per_1000_rows"], fit["seconds"]["loglog_exponent"],
                     fit["peak_added_mb"]["per_1000_rows"], fit["peak_added_mb"]["loglog_exponent"]])
    lines = [f"Synthetic features {c['widths']['image']}-d (image) and {c['widths']['text']}-d (text), stored as "
             f"{c['store_dtype']}; *precompute* writes both entries with a near-free compute function, so the "
             f"store's cost is what grows; *train* reads them into resident float32 tensors and trains the "
             f"small-config head ({c['head']['hidden_dim']} wide, {c['head']['num_layers']} layers) for "
             f"{c['epochs']} epoch at batch {c['batch_size']}. Memory: {report['memory_measure']}. Resident "
             f"features take {fmt(report['resident_feature_mb_per_1000_rows'])} MB per 1,000 rows "
             f"(stored: {fmt(report['stored_feature_mb_per_1000_rows'])} MB), so training memory should grow "
             "by about that, and precompute memory, which holds one shard at a time, should not grow at all.", ""]
    if figure:
        lines += [f"```{{figure}} {figure}", ":name: fig-performance-scaling",
                  ":alt: two panels: seconds versus rows and peak added memory versus rows, for precompute and "
                  "train", "",
                  "Time (left) and peak added memory (right) of precompute into the store and of one training "
                  "epoch, each size in a fresh process. A straight line means a cost linear in the rows; a flat "
                  "one, a cost that does not grow.", "```", ""]
    return lines + table(["step", "rows", "seconds", "peak added (MB)", "peak RSS (MB)"], rows) + [
        "Least-squares fits over the sizes: cost per 1,000 rows, and the exponent of a log-log fit "
        "(1 = linear; below 1 where a fixed start-up cost dominates the small sizes).", "",
        *table(["step", "seconds per 1,000 rows", "time exponent", "MB per 1,000 rows", "memory exponent"], fits)]


def text_section(report: dict) -> list[str]:
    return [f"{report['captions']} emoji captions through `{report['model']}`, batch {report['batch_size']}: one "
            "caption per forward pass (ShareLock's official loop) vs `lib.core.encoders.TextEncoder` (tokenise once, "
            "sort by length, pad per batch). Padding wasted: "
            f"{fmt(100 * report['padding_waste_sorted'])} % of token slots sorted vs "
            f"{fmt(100 * report['padding_waste_unsorted'])} % unsorted; max |diff| of the features "
            f"{fmt(report['max_abs_difference'])}.", "",
            f"The book's target for this ratio is 5×; on this CPU it is {fmt(report['speedup'])}×. Both paths are "
            "bound by the model's arithmetic here: the official loop pads nothing, so batching can only save the "
            "per-call overhead, while sorted batches still pad "
            f"{fmt(100 * report['padding_waste_sorted'])} % of their slots. A GPU is the opposite case: one "
            "caption per forward pass leaves it mostly idle (the paper reports 8 GPU-hours for 563k "
            "captions with Llama-3-8B); the GPU command below measures the gap.", ""]


def facets_section(report: dict) -> list[str]:
    rows = [[r["model"].removeprefix("offline/"), r["facets"], r["embeddings_per_s"]["decoupled"],
             r["embeddings_per_s"]["separate"], r["embeddings_per_s"]["stacked"], r["token_slots"]["decoupled"],
             r["token_slots"]["separate"], r["max_abs_difference_vs_separate"]] for r in report["results"]]
    return [f"FLAME's K facet prompts per caption ({report['captions_kind']} captions, facet set "
            f"`{report['facet_set']}`): `lib.core.facets` runs the caption once and the K suffixes beside it. "
            f"{report['results'][0]['captions']} captions per model; */s*: embeddings per second; *slots*: token "
            "slots processed.", "",
            *table(["model", "facets", "decoupled /s", "separate /s", "stacked /s",
                    "slots decoupled", "slots separate", "max abs diff"], rows)]


def precision_section(report: dict) -> list[str]:
    rows = [[r["model"].removeprefix("offline/"), r["pooling"], r["texts_per_s"]["float32"],
             r["texts_per_s"]["bfloat16"], r["max_abs_difference"], r["max_relative_difference"],
             f"{r['min_cosine']:.5f}", r["same_nearest_neighbour"]]
            for r in report["results"]]
    units = ", ".join(f"`{u}`" for u in machine_of(report)["bf16_units"]) or "none"
    lines = [f"{report['captions']} emoji captions (label and keywords), batch {report['batch_size']}, through each "
             "model twice in the same process: float32 (the eager baseline every config uses unless it says "
             "otherwise) and bfloat16 (`dtype: bfloat16` in a text model's config entry; the dtype is part of the "
             f"store key). This CPU's bfloat16 units: {units}. *cos*: cosine between a text's float32 and bfloat16 "
             "features; *same NN*: share of texts whose nearest other text is the same in both: the features move "
             "little, but enough to reorder close neighbours, so a chapter that switches a model to bfloat16 "
             "re-measures its results.", "",
             *table(["model", "pooling", "float32 /s", "bfloat16 /s", "max abs diff", "max rel diff", "min cos",
                     "same NN"], rows), ""]
    emulated = report.get("without_bf16_units")
    if emulated:
        speed = emulated["texts_per_s"]
        lines += [f"The same measurement of `{emulated['model']}` in a process whose oneDNN is held to "
                  f"`{emulated['isa']}` (no AVX512-BF16, no AMX), as on a CPU without bfloat16 units: float32 "
                  f"{fmt(speed['float32'])} /s, bfloat16 {fmt(speed['bfloat16'])} /s "
                  f"({fmt_ratio(speed['bfloat16'] / speed['float32'])}). bfloat16 is a speed-up only where the "
                  "hardware has the units; elsewhere keep float32.", ""]
    return lines


def _first_line(error: str) -> str:
    """The informative line of a failure: the last exception line of a traceback, else its first line."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    found = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception): ", line)]
    return (found[-1] if found else lines[0])[:240] if lines else ""


def _step_outcome(name: str, step: dict) -> str:
    """A GPU check step's outcome in a few words: ok, failed with its error's line, skipped, or the rehearsals'
    count."""
    if step.get("error"):
        return "failed: " + _first_line(step["error"])
    if step.get("skipped"):
        return "skipped: " + step["skipped"]
    if name == "rehearsals":
        chapters = ((step.get("result") or {}).get("chapters") or {}).values()
        return f"{sum(bool(c.get('ok')) for c in chapters)} of {len(chapters)} chapters ran end to end"
    return "ok"


def gpu_check_section(report) -> list[str]:
    """``tools/gpu_check.py``'s record: the card, each step's seconds and outcome; the rehearsals chapter by
    chapter. (The page shows :func:`gpu_check_current` instead: what works now, over every run.)"""
    rehearsals = (report["steps"].get("rehearsals") or {}).get("result")
    outcome = _step_outcome
    rows = [[name, fmt(step["seconds"]), outcome(name, step)] for name, step in report["steps"].items()]
    card = machine_of(report).get("gpu")
    lines = ([f"Card: {card}" + ("" if "environment" in report["steps"] else " (the nvidia-smi line of its log; this "
                                 "early run did not record its environment)"), ""] if card else [])
    lines += table(["step", "seconds", "outcome"], rows)
    if rehearsals:
        lines += ["", "Each chapter's full config rehearsed on the GPU (stand-in models with the full configs' "
                  "float16, bf16 autocast, one torchrun rank per GPU; `tools/standins.py`), after "
                  f"{fmt(rehearsals['world_seconds'])} s of building the stand-ins:", ""]
        rows = []
        for chapter, got in rehearsals["chapters"].items():
            steps = got.get("steps", {})
            precompute = next((v for k, v in steps.items() if k.startswith("precompute")), None)
            outcome = ("ok" if got.get("ok") else got.get("skipped") or "failed: " + _first_line(got.get("error", "")))
            rows.append([chapter, outcome, fmt(steps.get("pre-flight")) if "pre-flight" in steps else "",
                         fmt(precompute) if precompute is not None else "",
                         fmt(steps["the notebook (papermill)"]) if "the notebook (papermill)" in steps else "",
                         got.get("runs", "")])
        lines += table(["chapter", "outcome", "pre-flight s", "precompute s", "notebook s", "runs trained"], rows)
    return lines + [""]


def shards_section(report: dict) -> list[str]:
    r = report["result"]
    fetch, decoded = r["fetch_images_per_s"], r["decoded_images_per_s"]
    rows = [[name, fetch["warm"][name], fetch["cold"][name], decoded[name]] for name in decoded]
    return [f"{r['images']:,} synthetic JPEGs (256 px, {fmt(r['image_bytes_mean'] / 1000)} kB each) read in a random "
            f"order, in batches of {r['batch_size']}, as a streamed training run reads them: one file per image "
            f"({r['files_loose']:,} files) against {r['shards']} tar shards of {r['per_shard']:,} images written by "
            "`provision.shards` and read by `lib.data.shards` (seek, check the tar header, read). *Fetch*: the bytes "
            "only, the page cache warm or dropped first (cold); *decoded*: decoded and resized to 224 px "
            "(`three_towers.pixels`), where decoding dominates. Best of "
            f"{r['repeats']} interleaved rounds; rates in images per second. Both layouts give the same pixels "
            "(the benchmark asserts it).", "",
            *table(["layout", "fetch, warm", "fetch, cold", "decoded 224 px"], rows)]


def _check_number(label: str) -> int:
    """``gpu/check-12`` -> 12: the GPU checks in the order they ran (a name's text order puts check-10 first)."""
    found = re.search(r"(\d+)$", label)
    return int(found.group(1)) if found else 0


def gpu_checks(loaded) -> list[tuple[str, dict]]:
    """The GPU check's runs (``tools/gpu_check.py``, not ``--quick``), oldest first."""
    runs = [(label, report) for label, report in loaded
            if label.startswith("gpu/") and _name((label, report)) == "gpu_check" and not report.get("quick")]
    return sorted(runs, key=lambda item: _check_number(item[0]))


def latest_rehearsals(loaded) -> dict[str, tuple[str, dict, dict]]:
    """Per chapter, its latest full-config rehearsal on a GPU: ``(label, report, what the rehearsal recorded)``. A
    chapter a check skipped (past its deadline) keeps its earlier rehearsal."""
    latest = {}
    for label, report in gpu_checks(loaded):
        rehearsals = (report["steps"].get("rehearsals") or {}).get("result") or {}
        for chapter, got in (rehearsals.get("chapters") or {}).items():
            if got.get("ok") is not None or got.get("error"):
                latest[chapter] = (label, report, got)
    return latest


def shown_checks(loaded) -> set[str]:
    """The GPU checks the page shows: the latest, and those holding a chapter's latest rehearsal."""
    checks = gpu_checks(loaded)
    return ({label for label, _, _ in latest_rehearsals(loaded).values()} | ({checks[-1][0]} if checks else set()))


def gpu_check_current(loaded) -> list[str]:
    """One section for the GPU check: what works now (each chapter's latest full-config rehearsal: outcome, card,
    date), the latest check's steps, and what is measured and what is computed. Every run stays in
    bench/results/gpu/."""
    checks = gpu_checks(loaded)
    if not checks:
        return []
    latest = latest_rehearsals(loaded)
    ok = sorted(chapter for chapter, (_, _, got) in latest.items() if got.get("ok"))
    cards = sorted({(machine_of(report).get("gpu") or "a GPU") for _, report, _ in latest.values()})
    lines = ["## The GPU check", ""]
    if latest:
        failed = [f"{chapter} ({_first_line(got.get('error', '')) or 'failed'}, `{label}`)"
                  for chapter, (label, _, got) in sorted(latest.items()) if not got.get("ok")]
        lines += [f"**What works now:** {len(ok)} of {len(latest)} chapters' full configs run end to end on "
                  f"{' and '.join(cards)}, each in its latest rehearsal"
                  + (f"; the latest rehearsal of {', '.join(failed)} failed." if failed else "."), ""]
        rows = []
        for chapter, (label, report, got) in sorted(latest.items()):
            steps = got.get("steps", {})
            precompute = next((v for k, v in steps.items() if k.startswith("precompute")), None)
            machine = machine_of(report)
            seconds = [fmt(steps["pre-flight"]) if "pre-flight" in steps else "–",
                       fmt(precompute) if precompute is not None else "–",
                       fmt(steps["the notebook (papermill)"]) if "the notebook (papermill)" in steps else "–"]
            rows.append([chapter, "ok" if got.get("ok") else "failed: " + _first_line(got.get("error", "")),
                         f"{(machine.get('gpu') or 'card not recorded').removeprefix('NVIDIA ')}, "
                         f"{machine.get('date') or 'date not recorded'} (`{label}.json`)",
                         " / ".join(seconds), got.get("runs", "")])
        lines += table(["chapter", "outcome", "card, date (result)", "seconds: pre-flight / precompute / notebook",
                        "runs trained"], rows)
    label, report = checks[-1]
    machine = machine_of(report)
    steps = [[name, fmt(step.get("seconds")), _step_outcome(name, step)]
             for name, step in report["steps"].items() if name not in ("rehearsals", "environment")]
    if steps:
        lines += [f"The latest check (`bench/results/{label}.json`, {machine.get('gpu') or 'card not recorded'}, "
                  f"{machine.get('date') or 'date not recorded'}), its steps beside the rehearsals:", "",
                  *table(["step", "seconds", "outcome"], steps)]
    lines += ["**What is measured, and what is computed.** A rehearsal measures that a chapter's full config runs "
              "on a GPU through its pre-flight, its feature precompute and its notebook, with stand-in models of the "
              "full configs' kinds (`tools/standins.py`: float16 features, bf16 autocast, one torchrun rank per GPU), "
              "and how long each step took with the stand-ins. It does not measure the papers' models: the GPU-hours "
              "and memory in each chapter's launch box are computed by the cost model (`provision.preflight`) until "
              "the section below has measured them. Every run of the check is kept in `bench/results/gpu/`; this "
              "section shows each chapter's latest.", ""]
    return lines


SECTIONS = {"vision_features": vision_section, "store": store_section, "image_shards": shards_section,
            "training": training_section,
            "text_features": text_section, "text_precision": precision_section, "facets": facets_section,
            "gpu_check": gpu_check_section}


# The measurements of issue 65 (tools/gpu_measure.py), as one device call: run from the repository root on the lent
# GPU with the wheels open_clip needs carried along (.cache/ is ignored by git: the device tool's `carry` takes it).
MEASURE_WHEELS = (".venv/bin/pip download --no-deps -d .cache/gpu-wheels open_clip_torch==3.3.0 ftfy==6.3.1 "
                  "wcwidth==0.9.5")
MEASURE_COMMAND = ('GPU_CHECK_WHEELS=.cache/gpu-wheels bash tools/gpu_check.sh --only measure 2>&1 '
                   '| tee "$OUT/gpu_check.log"')


def measured_section(loaded) -> list[str]:
    """The full route measured (``tools/gpu_measure.py``): each chapter's GPU-hours on the latest card that ran it,
    beside the cost model's computed figure; until a GPU has run it, the command that will."""
    lines = ["## The full route measured", ""]
    runs = [(label, r) for label, r in loaded if label.startswith("gpu/") and r.get("chapters") and not r.get("quick")]
    if not runs:
        return lines + [
            "**Pending a GPU.** Every launch box's GPU-hours are still computed by the cost model, not measured. "
            "`tools/gpu_measure.py` measures each chapter's dominant step at the papers' sizes: Llama-3-8B's "
            "last-token features, DINOv2-B/14's and DINOv2-L/14's image features, ShareLock's head at batch 16,384 "
            "and the LiT baseline, Mistral-Nemo-12B's 7 facets in one pass against 7 passes, FLAME's ViT-B/16 "
            "trained from scratch with and without gradient checkpointing, one step of Three Towers' and of FDT's "
            "towers, Flan-UL2's encoder. The models are built on the GPU from their published configurations "
            "with random weights (nothing is downloaded): time and memory do not depend on the weights' values, "
            "only on the shapes and the kernels, which are the real ones. Each step sweeps its batch until memory "
            "or its time budget runs out and projects the chapter's full run (items / measured rate) in GPU-hours "
            "on that card. `--quick` runs the same code at tiny widths on a CPU (`tests/test_gpu_check.py`).", "",
            "One device call of about 8 minutes, from the repository root, with `.cache/gpu-wheels` carried along "
            "(the GPU machine has PyTorch, timm and transformers; open_clip and its two dependencies travel as "
            "wheels):", "",
            "```bash", MEASURE_WHEELS + "   # here, once", MEASURE_COMMAND + "   # on the GPU",
            "```", "",
            "Its `$OUT/gpu_check.json` and `gpu_check.log` go to `bench/results/gpu/` as the next `check-N`, and "
            "this section then shows what it measured.", ""]
    label, report = max(runs, key=lambda item: machine_of(item[1]).get("date") or "")
    machine = machine_of(report)
    lines += [f"Measured on {machine.get('gpu') or 'a GPU'}, {machine.get('date') or 'date not recorded'} "
              f"(`bench/results/{label}.json`), with the papers' models at their published dimensions and random "
              "weights: time and memory do not depend on the weights' values.", ""]
    rows = []
    for chapter, found in report["chapters"].items():
        rows.append([chapter, fmt(found["gpu_hours_the_cost_model_counts"]), fmt(found["gpu_hours"]),
                     "yes" if found["complete"] else "no", fmt(found["cost_model_gpu_hours"]),
                     found.get("paper") or "none stated"])
    lines += table(["chapter", "GPU-hours, what the cost model counts", "GPU-hours, every part", "all parts measured",
                    "cost model (computed)", "the paper"], rows)
    rows = []
    for step, record in report["steps"].items():
        for name, m in ((record.get("result") or {}).get("measurements") or {}).items():
            if "items_per_s" in m:
                rows.append([f"{step} / {name}", m.get("best_batch"), fmt(m["items_per_s"]),
                             fmt(m.get("peak_memory_gib")), fmt(m.get("projection", {}).get("gpu_hours"))])
    return lines + table(["step / measurement", "best batch", "items per s", "peak GiB", "projected GPU-hours"], rows)


def gpu_section(loaded) -> list[str]:
    gpu = [label for label, report in loaded if label.startswith("gpu/") and ratios_of(_name((label, report)), report)]
    lines = ["## GPU figures", ""]
    if gpu:
        lines += ["Measured on a GPU: " + ", ".join(f"`{g}.json`" for g in gpu) +
                  " (their ratios are in the table above, their machines in the machine table).", ""]
    elif gpu_checks(loaded):
        lines += ["**No benchmark ratio has been measured on a GPU yet:** every ratio above is a CPU's. The GPU check "
                  "(above) has rehearsed the chapters on one; on a machine with a CUDA GPU, these commands measure "
                  "the GPU paths (bf16 autocast, features resident on the GPU, the paper's sizes) and this page "
                  "picks the results up:", ""]
    else:
        lines += ["**Not run here: needs a CUDA GPU.** No GPU was available to the session that produced "
                  "these results. On a machine with one, these commands measure the GPU paths (bf16 autocast, "
                  "features resident on the GPU, the paper's sizes) and this page picks the results up:", ""]
    lines += ["The GPU check runs them in one call of a few minutes on a lent GPU without internet, with the "
              "chapters' full-config rehearsals (`tools/gpu_check.py` says what travels):", "",
              "```bash", "bash tools/gpu_check.sh        # results: $OUT/gpu_check.json -> bench/results/gpu/", "```",
              "", "or one benchmark at a time:", ""]
    return lines + ["```bash", GPU_COMMANDS, "```", ""]


# ----------------------------------------------------------------------------- figures

def figure_paths(loaded) -> dict[str, str]:
    """The figures the page shows for these results (page-relative paths), drawn or not yet."""
    paths = {}
    if any(ratios_of(_name(item), item[1]) for item in loaded):
        paths["ratios"] = "figures/performance-ratios.png"
    if any(_name(item) == "scaling" and not item[0].startswith("gpu/") for item in loaded):
        paths["scaling"] = "figures/performance-scaling.png"
    return paths


def draw_figures(loaded, folder: Path) -> None:
    """Draw the figures of :func:`figure_paths` (bar chart of every ratio, scaling curves) into ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    folder.mkdir(parents=True, exist_ok=True)
    sns.set_theme(style="whitegrid", context="paper")
    rows = [{"ratio": r["name"], "value": r["value"], "benchmark": _name((label, report))}
            for label, report in loaded for r in ratios_of(_name((label, report)), report)]
    if rows:
        frame = pd.DataFrame(rows)
        colours = dict(zip(frame["benchmark"].unique(), sns.color_palette(n_colors=frame["benchmark"].nunique())))
        # Legible where the book shows it: the column is about 750 px wide, so a figure of W inches is shown at
        # 750 / (W * 72) px per point; at about 8 in in all (labels wrapped to 52 characters) a 10 pt label is about
        # 13 px (it was 7 pt at 6.9 px).
        labels = ["\n".join(textwrap.wrap(name, 52)) for name in frame["ratio"]]
        heights = [0.2 + 0.2 * label.count("\n") for label in labels]
        fig, ax = plt.subplots(figsize=(4.3, sum(heights) + 0.09 * len(frame) + 1.0))
        y, top = [], 0.0  # first ratio on top; a wrapped label gets its row the room of its lines
        for height in heights:
            y.append(-(top + height / 2))
            top += height + 0.09
        # bars grow from 1x: to the right where the candidate is faster, to the left where it is slower
        ax.barh(y, frame["value"] - 1.0, left=1.0, height=0.16, color=[colours[b] for b in frame["benchmark"]])
        for row, value in zip(y, frame["value"]):
            ax.annotate(fmt_ratio(value), (value, row), xytext=(3 if value >= 1 else -3, 0), textcoords="offset points",
                        va="center", ha="left" if value >= 1 else "right", fontsize=10)
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(y, labels, fontsize=10)
        ax.set_ylim(-(top + 0.1), 0.1)
        low, high = frame["value"].min(), frame["value"].max()
        ax.set_xlim(min(low, 1.0) / 3, max(high, 1.0) * 3)
        ax.tick_params(axis="x", labelsize=10)
        ax.set_xlabel("candidate rate / baseline rate\n(log scale; 1× = as fast as the baseline)", fontsize=10)
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
        ax.legend(handles, list(colours), loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=10,
                  frameon=False)
        fig.savefig(folder / "performance-ratios.png", dpi=110, bbox_inches="tight")
        plt.close(fig)
    scaling = [report for label, report in loaded
               if _name((label, report)) == "scaling" and not label.startswith("gpu/")]
    if scaling:
        points = pd.DataFrame(scaling[0]["points"])
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        for ax, column, label in ((axes[0], "seconds", "seconds"),
                                  (axes[1], "peak_added_mb", "peak added memory (MB)")):
            sns.lineplot(points, x="rows", y=column, hue="task", marker="o", ax=ax)
            ax.set_xlabel("rows (synthetic features)")
            ax.set_ylabel(label)
        fig.tight_layout()
        fig.savefig(folder / "performance-scaling.png", dpi=110, bbox_inches="tight")
        plt.close(fig)


# ----------------------------------------------------------------------------- the page

def render(loaded, figures: dict[str, str]) -> str:
    lines = ["% Generated by `python -m bench.render` from bench/results/*.json (written by `python -m bench`):",
             "% do not edit (tests/test_bench.py checks that the data reproduce this page exactly).", "",
             "# Performance", "",
             "Speed is a feature of this book's library. Each benchmark in `bench/` runs a path that `lib` "
             "takes beside the baseline a user would otherwise write, **in the same run, on the same inputs**, "
             "and reports their ratio; absolute rates depend on the machine, so each result names its machine. "
             "Reproduce every number on this page with", "",
             "```bash", "make bench                 # = .venv/bin/python -m bench  (--quick: tiny sizes; --only NAME)",
             ".venv/bin/python -m bench.render   # this page and its figures", "```", ""]
    quick = [label for label, report in loaded if report.get("config", {}).get("quick") or report.get("quick")]
    if quick:
        lines += ["```{warning}", "These results were made with `--quick` (tiny sizes): "
                  + ", ".join(quick) + ". Their ratios say nothing about speed.", "```", ""]
    lines += ratios_section(loaded, figures.get("ratios"))
    lines += machines_section(loaded)
    for label, report in loaded:
        name = _name((label, report))
        if (name not in SECTIONS and name != "scaling") or name == "gpu_check":
            continue  # the GPU check's runs: one section, gpu_check_current
        device = machine_of(report).get("device") or "cpu"
        lines += [f"## {TITLES.get(name, name)}" + (f" ({device})" if label.startswith("gpu/") else ""), "",
                  f"From `bench/results/{label}.json`.", ""]
        lines += scaling_section(report, figures.get("scaling")) if name == "scaling" else SECTIONS[name](report)
    lines += gpu_check_current(loaded)
    lines += measured_section(loaded)
    lines += gpu_section(loaded)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--page", default=str(PAGE))
    parser.add_argument("--figures", default=str(FIGURES), help="folder for the PNGs (beside the page: figures/)")
    parser.add_argument("--check", action="store_true", help="only compare with the committed page")
    args = parser.parse_args(argv)
    loaded = load(Path(args.results))
    text = render(loaded, figure_paths(loaded))
    if args.check:
        same = Path(args.page).is_file() and Path(args.page).read_text() == text
        print(f"{args.page} is up to date" if same else f"{args.page} differs: run python -m bench.render")
        return 0 if same else 1
    draw_figures(loaded, Path(args.figures))
    Path(args.page).write_text(text)
    print(f"wrote {args.page} and {', '.join(figure_paths(loaded).values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

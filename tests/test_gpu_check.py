"""tools/gpu_check.py, the check a lent GPU runs, at tiny sizes on this CPU: every step runs and reports numbers."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _measurements(steps):
    for step in steps.values():
        for name, found in ((step["result"] or {}).get("measurements") or {}).items():
            yield name, found


def test_the_gpu_check_runs_every_step_and_reports_its_figures(tmp_path):
    """--quick: every measurement of issue 65 (tools/gpu_measure.py) at tiny widths on this CPU, through the same
    code as on a GPU: positive rates, the projection's arithmetic, each chapter's parts added up."""
    from bench import render
    from tools import gpu_measure

    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "OUT": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", "tools/gpu_check.sh", "--quick", "--skip", "bench"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = report["steps"]
    assert set(steps) == {"environment", *gpu_measure.STEPS}
    assert all(step["error"] is None for step in steps.values()), {k: v["error"] for k, v in steps.items()}
    found = dict(_measurements(steps))
    assert set(found) == {"last_token", "dinov2_b_forward", "dinov2_b_encode", "dinov2_l_forward", "head", "lit",
                          "decoupled", "separate", "last_token_baseline", "plain", "checkpointed", "3t", "fdt"}
    for name, m in _measurements(steps):
        assert m["items_per_s"] > 0 and m["best_batch"] >= 1, name
        assert any(row.get("items_per_s") == m["items_per_s"] for row in m["sweep"]), name
        p = m["projection"]
        assert p["items"] > 0 and p["items_per_s"] > 0 and p["gpu_hours"] == p["items"] / p["items_per_s"] / 3600
    for step in ("sharelock_text", "dinov2_images", "flame_facets", "flan_ul2_encoder"):
        assert steps[step]["result"]["card"] == "cpu" and steps[step]["result"]["date"]
    assert steps["flame_facets"]["result"]["decoupled_speedup_same_batch"] > 0
    head = found["head"]
    assert head["projection"]["items_per_s"] == head["steps_per_s"] == head["items_per_s"] / head["best_batch"]
    for chapter, summary in report["chapters"].items():
        assert summary["complete"], chapter
        hours = [part["gpu_hours"] for part in summary["parts"]]
        assert all(h > 0 for h in hours) and math.isclose(summary["gpu_hours"], sum(hours)), chapter
        counted = [p["gpu_hours"] for p in summary["parts"] if p["in_cost_model"]]
        assert math.isclose(summary["gpu_hours_the_cost_model_counts"], sum(counted)), chapter
    # the page's section, once a GPU has run it (a quick run never reaches the page: here as if it were one)
    page = "\n".join(render.measured_section([("gpu/check-x", {**report, "quick": False})]))
    assert "Measured on" in page and "Pending" not in page and "| fdt |" in page and "flame_facets / decoupled" in page


def test_a_failing_step_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    from tools import gpu_check, gpu_measure

    def broken(*args):
        raise RuntimeError("no such card")

    monkeypatch.setitem(gpu_check.STEPS, "environment", broken)
    monkeypatch.setitem(gpu_measure.STEPS, "dinov2_images", (broken, 40))
    report = gpu_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--only", "dinov2_images",
                             "sharelock_head"])
    assert report["steps"]["environment"]["error"].startswith("RuntimeError: no such card")
    assert report["steps"]["dinov2_images"]["error"].startswith("RuntimeError: no such card")
    assert report["steps"]["sharelock_head"]["error"] is None
    sharelock = report["chapters"]["sharelock"]
    assert not sharelock["complete"] and sharelock["gpu_hours"] > 0
    assert [p["what"] for p in sharelock["parts"] if "missing" in p] == [
        "Llama-3-8B features", "DINOv2-B features, preprocessing included"]


def test_the_measurements_stop_at_their_budget(tmp_path):
    """Past --budget no further measurement starts: it is recorded as skipped (no model is built on this CPU)."""
    from tools import gpu_check, gpu_measure

    report = gpu_check.main(["--device", "cpu", "--out", str(tmp_path), "--only", "measure", "--budget", "0"])
    assert set(report["steps"]) == {"environment", *gpu_measure.STEPS}
    assert all(report["steps"][n]["skipped"] == "past the 0 s budget" for n in gpu_measure.STEPS)
    assert all(s["gpu_hours"] is None for s in report["chapters"].values())


def test_the_cost_models_figures_are_the_launch_boxes_and_the_device_command_fits_one_call():
    """Each chapter's computed figure beside a measurement is still what its launch box says (book/papers.yaml), and
    the command book/performance.md gives for the GPU is one device call (under 2,000 characters, flags the check
    takes)."""
    import shlex

    import yaml

    from bench import render
    from tools import gpu_check, gpu_measure

    papers = yaml.safe_load((ROOT / "book" / "papers.yaml").read_text())["chapters"]
    for chapter, figures in gpu_measure.COST_MODEL.items():
        for phrase in figures["phrases"]:
            assert phrase in papers[chapter]["full_config"]["time"], (chapter, phrase)
    command = render.MEASURE_COMMAND
    assert len(command) < 2000 and "$OUT" in command and ".cache/gpu-wheels" in render.MEASURE_WHEELS
    words = shlex.split(command.split("2>&1")[0])
    flags = words[words.index("tools/gpu_check.sh") + 1:]
    assert flags == ["--only", "measure"]
    assert set(gpu_check.GROUPS["measure"]) == set(gpu_measure.STEPS)
    assert sum(budget for _, budget in gpu_measure.STEPS.values()) <= 8 * 60 - 30  # inside one 8-minute call


def test_a_gpu_rehearsal_keeps_the_full_configs_float16_and_names_the_gpu():
    import yaml

    from tools import standins

    on_cpu = yaml.safe_load(standins.rehearsal_overrides("sharelock", ROOT))
    on_gpu = yaml.safe_load(standins.rehearsal_overrides("sharelock", ROOT, device="cuda"))
    assert on_cpu["device"] == "cpu" and on_gpu["device"] == "cuda"
    assert {m["dtype"] for m in on_cpu["vision"] + on_cpu["text"]} == {"bfloat16"}  # a CPU has no fast float16
    assert "vision" not in on_gpu and "text" not in on_gpu  # the full config's float16 models, unchanged


def test_carried_tokenizers_are_read_and_a_missing_one_says_how_to_save_it(tmp_path, monkeypatch):
    import pytest

    from tools import gpu_check, standins

    monkeypatch.setenv(standins.TOKENIZERS_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="--save-tokenizers"):
        standins._tokenizer("offline/all-MiniLM-L6-v2")
    monkeypatch.delenv(standins.TOKENIZERS_ENV)
    assert gpu_check.save_tokenizers(tmp_path) == standins.standin_tokenizers()
    monkeypatch.setenv(standins.TOKENIZERS_ENV, str(tmp_path))
    carried = standins._tokenizer("offline/all-MiniLM-L6-v2")
    monkeypatch.delenv(standins.TOKENIZERS_ENV)
    original = standins._tokenizer("offline/all-MiniLM-L6-v2")
    text = "a photo of a cat"
    assert carried(text)["input_ids"] == original(text)["input_ids"] and len(carried) == len(original)

"""tools/gpu_check.py, the check a lent GPU runs, at tiny sizes on this CPU: every step runs and reports numbers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_every_step_and_reports_its_figures(tmp_path):
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "OUT": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", "tools/gpu_check.sh", "--quick", "--skip", "bench"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = report["steps"]
    assert set(steps) == {"environment", "sharelock_paper_shapes", "vit_b16_from_scratch"}
    assert all(step["error"] is None for step in steps.values()), {k: v["error"] for k, v in steps.items()}
    sharelock, vit = steps["sharelock_paper_shapes"]["result"], steps["vit_b16_from_scratch"]["result"]
    assert sharelock["steps_per_s"] > 0 and sharelock["minutes_for_5000_steps"] == 5000 / sharelock["steps_per_s"] / 60
    assert vit["micro_batch"] == 8 and vit["images_per_s"] > 0 and vit["flame_table3_gpu_hours"] > 0


def test_a_failing_step_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    from tools import gpu_check

    def broken(device, quick, out):
        raise RuntimeError("no such card")

    monkeypatch.setitem(gpu_check.STEPS, "environment", broken)
    report = gpu_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--skip", "bench",
                             "vit_b16_from_scratch"])
    assert report["steps"]["environment"]["error"].startswith("RuntimeError: no such card")
    assert report["steps"]["sharelock_paper_shapes"]["error"] is None



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

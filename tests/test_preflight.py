"""``python -m provision.preflight``: a full run's needs checked in seconds, one line per problem, each with its fix.

Run as a user runs it (a subprocess, so that the Hugging Face cache and the hub switch are the process's own), against
the rehearsal's stand-in cache (``tools/standins.py``: tiny models of the same classes under the real hub ids, the
hub off) and datasets prepared from synthetic released files. It passes there; it names a model that is not cached,
a model whose config is cached but not its weights, a dataset never prepared, a store that cannot be written, a
missing GPU and a renamed config key, all in one run when they come together; and its estimates are computed from
the models' configs (parameters on the meta device) and the plan's own inputs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision import preflight
from tools import standins

ROOT = Path(__file__).resolve().parents[1]
CPU = "{device: cpu}"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("preflight-world")
    hf = standins.build_models(root / "hf", ["facebook/dinov2-base", "meta-llama/Meta-Llama-3-8B"])
    downloads = standins.build_downloads(root / "downloads", ["cc3m-llava", "imagenet-1k"])
    data = root / "data"
    env = standins.rehearsal_env(root, hf_cache=hf, data=data)
    env["PYTHONPATH"] = str(ROOT)
    standins.prepare_all(["cc3m-llava", "imagenet-1k"], root / "downloads", data, env, ROOT, sys.executable)
    return {"root": root, "hf": hf, "data": data, "env": env, "downloads": downloads}


def _preflight(world, tmp_path, *args, env=None):
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "provision.preflight", "--chapter", "sharelock", "--config", "full",
                           "--store", str(tmp_path / "store"), *args], cwd=ROOT, env=env or world["env"],
                          capture_output=True, text=True, timeout=300)
    return done, time.time() - started


@pytest.mark.slow
def test_passes_against_the_stand_in_cache_and_states_its_estimates(world, tmp_path):
    done, seconds = _preflight(world, tmp_path, "--overrides", CPU, "--json", str(tmp_path / "report.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("pre-flight sharelock (full): ok")
    report = json.loads((tmp_path / "report.json").read_text())
    llama = report["models"]["meta-llama/Meta-Llama-3-8B"]
    assert llama["params"] == json.loads((next((world["hf"] / "models--meta-llama--Meta-Llama-3-8B").rglob(
        "standin.json"))).read_text())["base_model_parameters"]  # counted on the meta device, from the config
    assert llama["width"] == 64 and report["flops"] > 0 and report["store_bytes"] > 0
    prompts = next(e for e in report["entries"] if e["name"].endswith("prompts:imagenet-1k:80"))
    assert prompts["rows"] == 80_000 and 5 < prompts["tokens_per_item"] < 40  # tokenised with the model's tokenizer
    assert "GPU-hours at an assumed 120 TFLOP/s" in done.stdout and seconds < 120


@pytest.mark.slow
def test_every_problem_at_once_one_line_each(world, tmp_path):
    """No GPU, a model not in the cache, a dataset never prepared and a store that cannot be written, in one run."""
    env = dict(world["env"], IMAGENET_1K_DIR=str(tmp_path / "imagenet-never-prepared"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a store under a file cannot be created, even by root (chmod would not stop root)
    overrides = ("{text: [{name: meta-llama/Meta-Llama-3-70B, pooling: last_token, layer: -1, max_length: 77, "
                 "dtype: float16}]}")
    done = subprocess.run([sys.executable, "-m", "provision.preflight", "--chapter", "sharelock", "--config", "full",
                           "--overrides", overrides, "--store", str(blocker / "store")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    problems = [line.removeprefix("  problem: ") for line in done.stdout.splitlines() if line.startswith("  problem: ")]
    expected = [
        f"dataset imagenet-1k: {tmp_path / 'imagenet-never-prepared'} does not exist: python -m provision.prepare "
        "imagenet-1k --from <the downloaded files>",
        "device cuda: no CUDA GPU is visible (torch.cuda.is_available() is False): run on a GPU machine, or pass "
        "-p overrides '{device: cpu}' for a rehearsal",
        "model meta-llama/Meta-Llama-3-70B is not in the local Hugging Face cache and the hub is off "
        "(HF_HUB_OFFLINE=1)",
    ]
    if __import__("torch").cuda.is_available():  # pragma: no cover  (a GPU machine: that line does not apply)
        expected.pop(1)
    for start in expected:
        assert sum(p.startswith(start) for p in problems) == 1, (start, problems)
    assert done.stdout.splitlines()[0] == f"pre-flight sharelock (full): {len(problems)} problem(s)"


@pytest.mark.slow
def test_weights_missing_from_the_cache_and_an_unwritable_store(world, tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(world["hf"], hf)
    for weights in (hf / "models--facebook--dinov2-base").rglob("model.safetensors"):
        weights.unlink()
    env = standins.rehearsal_env(world["root"], hf_cache=hf, data=world["data"], base=world["env"])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = subprocess.run([sys.executable, "-m", "provision.preflight", "--chapter", "sharelock", "--config", "full",
                           "--overrides", CPU, "--store", str(blocker / "store")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout
    assert ("  problem: model facebook/dinov2-base: its config is in the local Hugging Face cache but not its weights"
            in done.stdout)
    assert f"  problem: store {blocker / 'store'} is not writable" in done.stdout
    assert "point LIB_CACHE_DIR at a writable disk" in done.stdout


@pytest.mark.slow
def test_a_renamed_key_stops_it_in_its_first_line(world, tmp_path):
    done, _ = _preflight(world, tmp_path, "--overrides", "{device: cpu, trian: {steps: 2}}")
    assert done.returncode == 1
    assert done.stdout.splitlines()[1].startswith("  problem: config: full.trian: unknown field; allowed fields are")


def test_a_gated_model_names_the_licence_step(monkeypatch):
    class GatedRepoError(Exception):
        pass

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    message = preflight._hub_problem("meta-llama/Meta-Llama-3-8B", GatedRepoError("Access to model is restricted"))
    assert message.startswith("model meta-llama/Meta-Llama-3-8B is gated: accept its licence on "
                              "https://huggingface.co/meta-llama/Meta-Llama-3-8B")
    assert "huggingface-cli login" in message


def test_require_raises_with_every_line(monkeypatch):
    report = preflight.Report("sharelock", "full", problems=["first", "second"])
    monkeypatch.setattr(preflight, "check", lambda *a, **k: report)
    with pytest.raises(preflight.PreflightError) as error:
        preflight.require("sharelock", "full")
    assert str(error.value).splitlines() == ["pre-flight sharelock (full): 2 problem(s)", "  problem: first",
                                             "  problem: second"]


def test_the_datasets_and_tokenizers_a_config_names():
    import chapters

    cfg = chapters.get("viterb").load_config("full")
    assert preflight._datasets(cfg) == ["awa2", "cub", "fgvc-aircraft", "imagenet-plus"]
    assert "google/flan-ul2" in preflight._config_models(cfg)
    cfg = chapters.get("three_towers").load_config("full")
    assert preflight._datasets(cfg) == ["cc3m-llava", "imagenet-1k"]
    assert preflight._tokenizers(cfg) == ["google-bert/bert-base-uncased"]
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # conftest: no test reaches the hub


@pytest.mark.parametrize("chapter", ["sharelock", "viterb", "flame", "three_towers", "fdt"])
def test_the_offline_configs_name_no_dataset_for_provision_prepare(chapter):
    """The small and medium sets are installed by the set-up (a medium ShareLock run names ``gcompris-categories``,
    a set cut from GCompris with no manifest of its own); only ``config: full`` manifests are prepare's to check."""
    import chapters

    for config in ("small", "medium"):
        assert preflight._datasets(chapters.get(chapter).load_config(config)) == []


def test_resident_training_features_count_every_facet_and_fail_when_they_exceed_the_gpu(tmp_path):
    """FLAME's full config keeps 2.9M captions x 7 facets x 5,120 floats resident while training: the pre-flight says so
    before any feature is computed, with the data.limit that fits."""
    from types import SimpleNamespace

    report = preflight.Report("flame", "full", models={"llm": {"width": 5120}, "vision": {"width": 768}})
    report.entries = [  # as _estimate writes them, one per plan entry
        {"kind": "image", "model": "vision", "rows": 1000, "resident_bytes": 1000 * 768 * 4},
        {"kind": "facets", "model": "llm", "rows": 1000, "resident_bytes": 1000 * 7 * 5120 * 4},
        {"kind": "facets", "model": "llm", "rows": 80, "resident_bytes": 80 * 7 * 5120 * 4}]
    cfg = SimpleNamespace(train=SimpleNamespace(micro_batch_size=None, batch_size=256, steps=10), head=None)
    preflight._training(report, cfg)
    assert report.train["resident_bytes"] == 1000 * (7 * 5120 + 768) * 4  # the largest set of each side, every facet
    report.train.update(rows=1000, resident_bytes=100 * 2**30, logits_bytes=2**30)
    preflight._check_space(report, str(tmp_path / "store"), 80 * 2**30, "cuda:0")
    assert report.problems == ["device cuda:0: training keeps its features resident, about 100 GiB for 1,000 rows "
                               "(plus 1.0 GiB of logits), 80 GiB are free: set data.limit to about 710 or fewer "
                               "training pairs, or use a larger GPU"]
    report.problems.clear()
    preflight._check_space(report, str(tmp_path / "store"), 160 * 2**30, "cuda:0")
    assert report.problems == [] and report.train["data_path"] == "resident"
    report.train.update(can_stream=True)  # FLAME's train_data: auto streams the features instead of failing
    preflight._check_space(report, str(tmp_path / "store"), 80 * 2**30, "cuda:0")
    assert report.problems == [] and report.train["data_path"] == "streamed"
    assert any("data path: streamed" in fact for fact in report.facts)


def test_towers_trained_from_scratch_count_their_activations_and_name_the_setting_that_fits():
    """Three Towers' full config held resident at 112 px (ViT-B/16 and a 12-layer text tower, batch 4,096): ~125 GiB
    of activations (Korthikanti et al.), so one 80 GB GPU holds it only with gradient checkpointing, four with DDP; a
    card smaller than the resident pixels holds no setting."""
    import chapters

    cfg = chapters.get("three_towers").load_config("full", {"image_tower": {"image_size": 112},
                                                            "train_data": "resident"})
    costs = preflight.tower_costs(cfg, 585_000)
    assert not costs["streamed"]
    assert 80e6 < costs["image_params"] < 90e6  # open_clip's ViT-B-16 visual
    assert 100 < costs["activation_bytes"] / 2**30 < 150
    assert costs["checkpointed_bytes_per_sample"] < costs["activation_bytes_per_sample"] / 5
    assert costs["pixel_bytes"] == 585_000 * 3 * 112 * 112
    how, found = preflight.fitting_setting(costs, 80 * 2**30)
    assert found == {"fits": True, "gpus": 4, "grad_checkpointing": False, "gib_per_gpu": found["gib_per_gpu"]}
    assert "4 GPUs" in how and "1 GPU with image_tower.grad_checkpointing" in how
    how, found = preflight.fitting_setting(costs, 24 * 2**30)
    assert not found["fits"] and "data.limit" in how
    how, found = preflight.fitting_setting(costs, 200 * 2**30)
    assert how == "as configured, on 1 GPU" and found["gpus"] == 1 and not found["grad_checkpointing"]


def test_the_full_config_at_224_px_streams_its_pixels_so_only_the_activations_decide():
    """At the paper's 224 px the ViT-B/16 reads 4x the tokens (~400 GiB of activations at batch 4,096), and the 563k
    images (82 GiB as uint8) are decoded per batch: neither the GPU nor the host holds them, so even a 24 GB card
    has a setting (4 GPUs with checkpointing) where resident pixels left none."""
    import chapters

    cfg = chapters.get("three_towers").load_config("full")
    assert (cfg.image_tower.image_size, cfg.train_data) == (224, "streamed")
    costs = preflight.tower_costs(cfg, 585_000)
    assert costs["streamed"] and costs["pixel_bytes"] == 585_000 * 3 * 224 * 224
    assert 350 < costs["activation_bytes"] / 2**30 < 450
    how, found = preflight.fitting_setting(costs, 80 * 2**30)
    assert found["gpus"] == 8 and "1 GPU with image_tower.grad_checkpointing" in how
    how, found = preflight.fitting_setting(costs, 24 * 2**30)
    assert found["fits"] and found["grad_checkpointing"] and found["gpus"] == 4

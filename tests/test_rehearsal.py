"""Rehearsals of every chapter's full config, through the real entry points, on a CPU in seconds
(``pytest -k rehearsal``).

A full-config run needs gated 7-20B models, ~100 GB of images and a GPU, so its code path never runs in CI by
itself. A rehearsal runs that path end to end with stand-ins of the same *shape* (``tools/standins.py``): tiny
randomly initialised models of the same classes as the hub ids the config names, saved under those ids in a
Hugging Face cache with the hub off; tiny synthetic copies of each dataset in its *released* layout, turned into the
loaders' layout by ``python -m provision.prepare``. Each rehearsal then takes every step a GPU run takes:

1. ``python -m provision.prepare <dataset> --from <released files>`` for each dataset (once per session);
2. ``python -m provision.preflight --chapter X --config full --overrides ...`` (must say ok);
3. ``python -m torch.distributed.run --nproc_per_node 2 -m provision.precompute --chapter X --config full
   --overrides ...``
   (gloo, 2 CPU ranks; it runs the pre-flight again first);
4. ``papermill notebooks/<chapter>.ipynb out.ipynb -p config full -p overrides ...``: the notebook's own pre-flight, the
   features (all from the store now: nothing is computed), training with bf16 autocast on the CPU (the full configs
   set ``train.precision: bf16``), evaluation, claims, figures and tables, metrics.json.

The overrides are only what a rehearsal needs (``OVERRIDES`` in tools/standins.py): the CPU, 2 optimiser steps, 16
training pairs, one prompt per class, whatever the chapter trains at a few dozen units wide (heads, the Three Towers
towers, FDT's codebook: a rehearsal trains up to ~150 heads on one core), and bfloat16 where a model entry says float16
(``cpu_dtypes``: a CPU has no fast float16 kernels). A run fails the test on any error,
with the failing step and its output. ``test_a_broken_rehearsal_says_what_broke`` breaks it three ways (a renamed
config key, a dataset never prepared, a dtype mismatch that only bf16 autocast exposes) and checks each message.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from chapters import NAMES

from tools import standins

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PAPERMILL = str(Path(sys.executable).with_name("papermill"))
CHAPTERS = list(NAMES)
TOWERS_ONLY = ("fdt",)  # full configs whose encoders all train from scratch (FDT, as the paper): nothing stored

pytestmark = [pytest.mark.rehearsal, pytest.mark.slow]


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """Stand-in models, released-layout downloads and the prepared datasets, shared by every rehearsal."""
    return standins.build_world(tmp_path_factory.mktemp("rehearsal-world"), CHAPTERS, ROOT, PYTHON)


def _rehearse(chapter: str, world, root: Path, **kwargs) -> dict:
    return standins.rehearse(chapter, root, hf_cache=world["hf"], downloads=world["downloads"], data=world["data"],
                             repo=ROOT, python=PYTHON, papermill=PAPERMILL, **kwargs)


def _outputs(path: str) -> dict[str, int]:
    """How many figures, tables and errors the executed notebook shows."""
    counts = {"image/png": 0, "text/html": 0, "error": 0}
    for cell in json.loads(Path(path).read_text())["cells"]:
        for output in cell.get("outputs", []):
            counts["error"] += output["output_type"] == "error"
            for kind in ("image/png", "text/html"):
                counts[kind] += kind in output.get("data", {})
    return counts


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_rehearsal_of_the_full_config(chapter, world, tmp_path):
    metrics = _rehearse(chapter, world, tmp_path)
    log = metrics["_log"]
    assert log["preflight"].startswith(f"pre-flight {chapter} (full): ok"), log["preflight"][-2000:]
    summary = [line for line in log["precompute"].splitlines() if line.startswith(f"{chapter} ")]
    assert metrics["config"] == "full"
    if chapter in TOWERS_ONLY:  # the encoders train from pixels and token ids: no feature is stored or read
        assert not summary and f"{chapter}: nothing to precompute" in log["precompute"], log["precompute"][-3000:]
        assert metrics["features"]["shards_computed"] == metrics["features"]["shards_reused"] == 0
    else:
        assert summary and all("computed per rank [" in line for line in summary), log["precompute"][-3000:]
        per_rank = [line.split("computed per rank [")[1].split("]")[0].split(",") for line in summary]
        assert any(all(int(n) > 0 for n in ranks) for ranks in per_rank), "no entry was split over both ranks"
        # The notebook: its own pre-flight passed, every feature came from the precompute, the run finished.
        assert metrics["features"]["shards_computed"] == 0 and metrics["features"]["shards_reused"] > 0
    assert metrics["settings"]["train"]["precision"] == "bf16" and metrics["settings"]["device"] == "cpu"
    assert metrics["claims"], "no claim was evaluated"
    if chapter in ("three_towers", "flame", "fdt"):  # training images decoded per batch from the prepared tar shards
        assert {r["data_path"] for r in metrics["runs"]} == {"streamed"}
    shown = _outputs(metrics["_notebook"])
    assert shown["error"] == 0 and shown["image/png"] >= 1 and shown["text/html"] >= 1, shown


def _model_entries(value):
    """Every model entry (a config dataclass with ``name`` and ``dtype``) inside a loaded config."""
    import dataclasses

    if dataclasses.is_dataclass(value):
        if hasattr(value, "name") and hasattr(value, "dtype"):
            yield value
        for item in dataclasses.fields(value):
            yield from _model_entries(getattr(value, item.name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _model_entries(item)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_rehearsal_overrides_swap_float16_models_for_bfloat16_and_keep_everything_else(chapter):
    import importlib

    import yaml

    load = importlib.import_module(f"chapters.{chapter}").load_config
    plain = load("full")
    rehearsed = load("full", yaml.safe_load(standins.rehearsal_overrides(chapter, ROOT)))
    before, after = list(_model_entries(plain)), list(_model_entries(rehearsed))
    assert [m.name for m in before] == [m.name for m in after] and before
    assert any(m.dtype == "float16" for m in before), "the full config has no float16 model: drop cpu_dtypes"
    for old, new in zip(before, after):
        assert new.dtype == ("bfloat16" if old.dtype == "float16" else old.dtype), (old, new)
        assert {**vars(new), "dtype": old.dtype} == vars(old), f"{old.name}: more than its dtype changed"
    assert rehearsed.store.dtype == plain.store.dtype == "float16"  # a storage format, not a model's


def _rename_a_key(copy: Path, env: dict) -> None:
    path = copy / "notebooks" / "configs" / "sharelock.yaml"
    text = path.read_text()
    head, full = text.split("\nfull:", 1)
    path.write_text(head + "\nfull:" + full.replace("    batch_size: 16384", "    batchsize: 16384", 1))


def _unprepare(copy: Path, env: dict) -> None:
    env[standins.location_env("imagenet-1k")] = str(copy / "data" / "imagenet-1k-never-prepared")


def _bf16_only_bug(copy: Path, env: dict) -> None:
    """A bug only bf16 autocast exposes: an in-place index_add_ of the text embeddings (bf16 under autocast) into a
    float32 buffer; in fp32 (the small config) the very same line is an identity and passes."""
    path = copy / "lib" / "nn" / "losses.py"
    old = "        return clip_loss(gather_with_grad(image_emb), gather_with_grad(text_emb), self.scale)\n"
    new = ("        rows = torch.arange(len(text_emb), device=text_emb.device)\n"
           "        text_emb = torch.zeros(text_emb.shape, device=text_emb.device)"
           ".index_add_(0, rows, text_emb)\n" + old)
    source = path.read_text()
    assert old in source
    path.write_text(source.replace(old, new, 1))


BREAKS = {
    "renamed config key": (_rename_a_key, "pre-flight",
                           "config: full.train.batchsize: unknown field; allowed fields are"),
    "dataset never prepared": (_unprepare, "pre-flight",
                               "dataset imagenet-1k: {missing} does not exist: python -m provision.prepare imagenet-1k "
                               "--from <the downloaded files>"),
    "dtype mismatch under bf16": (_bf16_only_bug, "the notebook (papermill)",
                                  "index_add_(): self (Float) and source (BFloat16) must have the same scalar type"),
}


@pytest.mark.parametrize("how", list(BREAKS))
def test_a_broken_rehearsal_says_what_broke(how, world, tmp_path):
    damage, step, expected = BREAKS[how]
    expected = expected.format(missing=tmp_path / "repo" / "data" / "imagenet-1k-never-prepared")
    with pytest.raises(RuntimeError) as failure:
        _rehearse("sharelock", world, tmp_path, break_with=damage)
    message = str(failure.value)
    assert message.startswith(f"rehearsal step '{step}' failed"), message[:500]
    assert expected in message, message[-3000:]

"""Shared fixtures: the real offline models (loaded once per session), the emoji corpus, temp manifests.

The hub is off for every test (``HF_HUB_OFFLINE=1``): the small config's models are the
converted ``offline/*`` folders under ``.cache/models`` that :func:`provision.offline_models.ensure_offline_model`
builds on first use.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub are imported

import lib  # noqa: E402,F401  (the torchvision fix, before timm)
import pytest  # noqa: E402
import yaml  # noqa: E402

# The encoders exactly as the small config builds them (notebooks/configs/sharelock.yaml), so that
# lib.core.features' caches can be seeded with them (same TextModelConfig / VisionModelConfig fields).
TEXT_MODELS = {
    "smollm2": dict(name="offline/smollm2-135m-instruct", pooling="last_token", max_length=77),
    "gemma": dict(name="offline/gemma-3-270m", pooling="last_token", max_length=77),
    "minilm": dict(name="offline/all-MiniLM-L6-v2", pooling="mean", max_length=77),
}
VISION_MODELS = {
    "efficientnet": dict(name="offline/efficientnet-lite0", library="timm", image_size=128, crop_pct=1.0),
    "dinov2": dict(name="offline/dinov2-small", library="transformers", image_size=112, crop_pct=1.0),
}
TEXT_DIMS = {"smollm2": 576, "gemma": 640, "minilm": 384}
VISION_DIMS = {"efficientnet": 1280, "dinov2": 384}


def _text_encoder(key: str):
    from lib.core.encoders import TextEncoder

    kwargs = dict(TEXT_MODELS[key])
    return TextEncoder(kwargs.pop("name"), **kwargs)


def _vision_encoder(key: str):
    from lib.core.encoders import VisionEncoder

    kwargs = dict(VISION_MODELS[key])
    return VisionEncoder(kwargs.pop("name"), **kwargs)


@pytest.fixture
def single_thread():
    """One intra-op thread while a test runs real models: their inputs are tiny, and on a 2-core machine
    shared with another process (a notebook run) two OpenMP threads spin against each other and make
    each forward pass 10-50x slower. Restored afterwards, so other tests keep the default."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2():
    return _text_encoder("smollm2")


@pytest.fixture(scope="session")
def gemma():
    return _text_encoder("gemma")


@pytest.fixture(scope="session")
def minilm():
    return _text_encoder("minilm")


@pytest.fixture(scope="session")
def efficientnet():
    return _vision_encoder("efficientnet")


@pytest.fixture(scope="session")
def dinov2():
    return _vision_encoder("dinov2")


@pytest.fixture
def text_encoder(request):
    """Indirect parametrisation: ``@pytest.mark.parametrize("text_encoder", [...], indirect=True)``."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def vision_encoder(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def emoji_concepts():
    from corpora import emoji

    return emoji.load_concepts()


@pytest.fixture(scope="session")
def emoji_images(emoji_concepts):
    """Five real emoji drawings (RGBA, 64 px) of different concepts, Google style."""
    picks = [emoji_concepts[i] for i in (0, 7, 200, 900, 1500)]
    return [c.image("google") for c in picks]


@pytest.fixture
def manifest_dir(tmp_path, monkeypatch):
    """A temporary ``data_manifests/``: returns ``write(name, dict) -> Path`` for new manifests."""
    from corpora import manifests

    folder = tmp_path / "manifests"
    folder.mkdir()
    monkeypatch.setattr(manifests, "MANIFEST_DIR", folder)
    manifests.load.cache_clear()

    def write(name: str, content: dict):
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(content, sort_keys=False))
        manifests.load.cache_clear()
        return path

    yield write
    manifests.load.cache_clear()  # the real manifests are read again by later tests


@pytest.fixture
def edited_manifests(tmp_path, monkeypatch):
    """A copy of the real ``data_manifests/``: returns ``edit(name, change)``, where ``change(manifest)`` edits the
    loaded YAML of ``<name>.yaml`` in place before it is written back."""
    import shutil

    from corpora import manifests

    folder = tmp_path / "manifests"
    shutil.copytree(manifests.MANIFEST_DIR, folder)
    monkeypatch.setattr(manifests, "MANIFEST_DIR", folder)
    manifests.load.cache_clear()

    def edit(name: str, change) -> None:
        path = folder / f"{name}.yaml"
        manifest = yaml.safe_load(path.read_text())
        change(manifest)
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        manifests.load.cache_clear()

    yield edit
    manifests.load.cache_clear()


SESSION_START = __import__("time").time()  # conftest is imported when the test session starts


def run_chapter(name: str, out, **parameters) -> dict:
    """Execute ``notebooks/<name>.py`` with papermill into ``out`` (small config) and return its metrics.

    The chapter writes ``metrics.json`` into ``output_dir``; the kernel is the book's (``frozen-lip``)
    and the working directory the repository root, as ``make book`` runs it.
    """
    import json
    from pathlib import Path

    import jupytext
    import papermill

    root = Path(__file__).resolve().parents[1]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(root / "notebooks" / f"{name}.py"), out / f"{name}.ipynb")
    papermill.execute_notebook(
        str(out / f"{name}.ipynb"), str(out / "executed.ipynb"), parameters={"output_dir": str(out), **parameters},
        kernel_name="frozen-lip", cwd=str(root), progress_bar=False,
    )
    return json.loads((out / "metrics.json").read_text())


def chapter_metrics(name: str, out, **fallback) -> dict:
    """The small-config metrics of a chapter, executed once per test session.

    ``make test`` runs nbval on the committed notebooks before the tests (``pytest notebooks
    --nbval-lax tests``): each notebook then runs with its defaults (all seeds) from ``notebooks/``
    and writes ``notebooks/runs/<name>/metrics.json``. When that file was written during this session,
    it is the run to check, and executing the chapter a second time would only cost CI minutes. When it
    was not (a test file run on its own), the chapter runs here with ``fallback`` parameters (default
    ``quick=True``: first seed, fewest runs), so the tests' assertions must hold for both.
    """
    import json
    from pathlib import Path

    nbval_run = Path(__file__).resolve().parents[1] / "notebooks" / "runs" / name / "metrics.json"
    if nbval_run.exists() and nbval_run.stat().st_mtime >= SESSION_START:
        metrics = json.loads(nbval_run.read_text())
        if metrics.get("config") == "small":
            return metrics
    return run_chapter(name, out, **(fallback or {"quick": True}))

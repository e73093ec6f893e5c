"""``python -m provision.pin``: every hub model of a full config pinned to a commit, comments and layout kept, checked
by loading the section again; nothing written when a commit is unknown."""
from __future__ import annotations

from chapters import configs as chapter_configs

import shutil

import pytest
import yaml

import chapters
from provision import pin
from lib.core import config as configs

COMMIT = "c0ffee" + "0" * 34


def _cache(root, names):
    """A Hugging Face cache in which ``refs/main`` of each model names COMMIT (a snapshot holding config.json)."""
    for name in names:
        repo = root / f"models--{name.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(COMMIT)
        (repo / "snapshots" / COMMIT).mkdir(parents=True)
        (repo / "snapshots" / COMMIT / "config.json").write_text("{}")


@pytest.mark.parametrize("chapter", chapters.NAMES)
def test_every_hub_model_of_the_full_config_is_pinned_and_nothing_else_changes(chapter, tmp_path, monkeypatch):
    from huggingface_hub import constants

    source = chapter_configs.CONFIG_DIR / f"{chapter}.yaml"
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    module = chapters.get(chapter)
    before = configs.build(module.Config, yaml.safe_load(source.read_text())["full"], where="full")
    names = sorted({m.name for m in pin.hub_models(before)})
    assert names, "a full config names hub models"
    _cache(tmp_path / "hf", names)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    assert pin.main(["--chapter", chapter, "--file", str(copy)]) == 0
    text = copy.read_text()
    after = configs.build(module.Config, yaml.safe_load(text)["full"], where="full")
    assert {m.name: m.revision for m in pin.hub_models(after)} == dict.fromkeys(names, COMMIT)
    original = yaml.safe_load(source.read_text())
    pinned = yaml.safe_load(text)
    assert pinned["small"] == original["small"]  # other sections untouched
    unpinned = [line.replace(f", revision: {COMMIT}", "") for line in text.splitlines()
                if not line.strip().startswith("revision:")]
    assert unpinned == source.read_text().splitlines()  # comments and layout kept: only the revisions were added
    assert pin.main(["--chapter", chapter, "--file", str(copy)]) == 0 and copy.read_text() == text  # idempotent
    newer = "d" * 40  # revisions naming a branch that has moved: pinning replaces each, flow or block style
    copy.write_text(text.replace(COMMIT, "main"))
    for folder in (tmp_path / "hf").iterdir():
        (folder / "refs" / "main").write_text(newer)
        (folder / "snapshots" / COMMIT).rename(folder / "snapshots" / newer)
    assert pin.main(["--chapter", chapter, "--file", str(copy)]) == 0
    repinned = configs.build(module.Config, yaml.safe_load(copy.read_text())["full"], where="full")
    assert {m.name: m.revision for m in pin.hub_models(repinned)} == dict.fromkeys(names, newer)
    assert copy.read_text() == text.replace(COMMIT, newer)


def test_an_unknown_commit_writes_nothing_and_names_the_model(tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    copy = tmp_path / "sharelock.yaml"
    shutil.copyfile(chapter_configs.CONFIG_DIR / "sharelock.yaml", copy)
    before = copy.read_bytes()
    _cache(tmp_path / "hf", ["facebook/dinov2-base"])  # Llama-3-8B is not cached and the hub is off
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    assert pin.main(["--chapter", "sharelock", "--file", str(copy)]) == 1
    assert capsys.readouterr().err.startswith("model meta-llama/Meta-Llama-3-8B: no commit known for revision main")
    assert copy.read_bytes() == before

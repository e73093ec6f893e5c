"""Every chapter opens in Colab the same way, and its install cell works in a clean environment.

The launch block and install cell are rendered by tools/colab.py from book/_config.yml and
book/papers.yaml; these tests check that each notebook (both halves of the jupytext pair) carries
exactly what is rendered, and run the install cell's logic for real: a no-op where `lib` imports, and
in a brand-new virtual environment a clone + `tools/setup.sh --here` + `sys.path` that makes the
cloned `lib` importable, without cloning twice.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import pytest

from tools import colab

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = colab.chapters()


def _cell_code() -> str:
    """The install cell as Python (without its ``# %%`` line)."""
    return colab.install_cell().split("\n", 1)[1]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_source_is_what_tools_colab_renders(chapter):
    source = (ROOT / "notebooks" / f"{chapter}.py").read_text()
    assert colab.render(source, chapter) == source, f"run `python -m tools.colab` (notebooks/{chapter}.py is stale)"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_ipynb_opens_with_badge_then_install_cell(chapter):
    notebook = jupytext.read(ROOT / "notebooks" / f"{chapter}.ipynb")
    first_md = next(c for c in notebook.cells if c.cell_type == "markdown")
    first_code = next(c for c in notebook.cells if c.cell_type == "code")
    assert colab.colab_url(chapter) in first_md.source
    assert f"papermill notebooks/{chapter}.ipynb out.ipynb -p config full" in first_md.source
    assert first_code.source.strip() == _cell_code().strip()
    assert "remove-cell" in first_code.metadata.get("tags", [])


def test_badge_image_is_local_and_links_point_at_the_configured_repository():
    assert (ROOT / "notebooks" / colab.BADGE_IMAGE).resolve().is_file()
    url = colab.repository_url()
    assert colab.colab_url("fdt").endswith(f"{url.removeprefix('https://github.com/')}/blob/main/notebooks/fdt.ipynb")
    assert f'"{url}"' in colab.install_cell()


def test_repository_url_must_be_a_github_repository(tmp_path, monkeypatch):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "_config.yml").write_text("repository:\n  url: https://example.org/x\n")
    monkeypatch.setattr(colab, "ROOT", tmp_path)
    with pytest.raises(ValueError, match="repository.url must be https://github.com/<owner>/<repo>"):
        colab.repository_url()


def test_install_cell_is_a_no_op_where_lib_imports(tmp_path):
    """In the project's environment the cell must not clone or install anything."""
    env = {**os.environ, "FROZEN_LIP_REPO": str(tmp_path / "does-not-exist"), "FROZEN_LIP_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, "-c", _cell_code()], check=True, env=env, cwd=tmp_path)
    assert not (tmp_path / "home").exists()


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_install_cell_in_a_clean_virtual_environment(tmp_path):
    """A brand-new venv without lib: the cell clones the book, runs setup --here, and lib resolves to the clone.

    SETUP_STEPS=lib limits the set-up to `pip install --no-deps -e .` (the other steps install GBs of
    packages and data, which the rest of the suite covers through make setup); what is under test is
    the cell's decision, the clone, the --here install into the running interpreter, and sys.path.
    """
    # the "remote": a git repository holding the working tree's library and set-up
    remote = tmp_path / "remote"
    remote.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, remote / name)
    for folder in ("lib", "tools"):
        shutil.copytree(ROOT / folder, remote / folder, ignore=shutil.ignore_patterns("__pycache__"))
    _git("init", "-q", "-b", "main", cwd=remote)
    _git("add", "-A", cwd=remote)
    _git("commit", "-q", "-m", "book", cwd=remote)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    probe = _cell_code() + textwrap.dedent("""
        import importlib.util
        print("LIB", importlib.util.find_spec("lib").origin)
    """)
    home = tmp_path / "content" / "frozen-lip-book"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update({"FROZEN_LIP_REPO": str(remote), "FROZEN_LIP_HOME": str(home), "SETUP_STEPS": "lib",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    first = subprocess.run([str(python), "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"LIB {home / 'lib' / '__init__.py'}" in first.stdout
    assert "installing into" in first.stdout and not (home / ".venv").exists()  # --here: no venv of its own

    # second run: the clone exists, so nothing is cloned again (the remote is gone)
    shutil.rmtree(remote)
    second = subprocess.run([str(python), "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"LIB {home / 'lib' / '__init__.py'}" in second.stdout

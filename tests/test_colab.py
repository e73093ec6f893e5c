"""Every chapter opens in Colab the same way, and its install cell works in a clean environment.

The launch block and install cell are rendered by tools/colab.py from book/_config.yml and
book/papers.yaml; these tests check that each notebook (both halves of the jupytext pair) carries
exactly what is rendered, and run the install cell's logic for real: a no-op where `lib` imports, and
in a brand-new virtual environment a clone + `tools/setup.sh --here` + `sys.path` that makes the
cloned `lib` importable, without cloning twice.

While repository.url is the placeholder (https://github.com/OWNER/REPO), nothing links to it: no
badge, no clone of it, no repository or Colab button in book/_config.yml. A real URL, set with
`python -m tools.colab --repo URL`, renders the badge, the clone and both buttons.
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
import yaml

from tools import colab

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = colab.chapters()
REAL_URL = "https://github.com/someone/frozen-lip-book"  # any real-looking address, for the rendering tests


def _cell_code() -> str:
    """The install cell as Python (without its ``# %%`` line)."""
    return colab.install_cell().split("\n", 1)[1]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_source_is_what_tools_colab_renders(chapter):
    source = (ROOT / "notebooks" / f"{chapter}.py").read_text()
    assert colab.render(source, chapter) == source, f"run `python -m tools.colab` (notebooks/{chapter}.py is stale)"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_ipynb_opens_with_launch_block_then_install_cell(chapter):
    notebook = jupytext.read(ROOT / "notebooks" / f"{chapter}.ipynb")
    first_md = next(c for c in notebook.cells if c.cell_type == "markdown")
    first_code = next(c for c in notebook.cells if c.cell_type == "code")
    assert "\n".join(colab.launch_block(chapter)) in first_md.source
    assert f"papermill notebooks/{chapter}.ipynb out.ipynb -p config full" in first_md.source
    if colab.colab_url(chapter):
        assert colab.colab_url(chapter) in first_md.source
    assert first_code.source.strip() == _cell_code().strip()
    assert "remove-cell" in first_code.metadata.get("tags", [])


def test_badge_image_is_local_and_links_point_at_the_configured_repository():
    assert (ROOT / "notebooks" / colab.BADGE_IMAGE).resolve().is_file()
    url = colab.repository_url()
    if colab.is_placeholder(url):
        assert colab.colab_url("fdt") is None
        assert "OWNER/REPO" not in colab.install_cell()
    else:
        assert colab.colab_url("fdt").endswith(f"{url.removeprefix('https://github.com/')}/blob/main/notebooks/fdt.ipynb")
        assert f'"{url}"' in colab.install_cell()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_placeholder_url_renders_no_link_to_it(chapter):
    """With the placeholder the launch block keeps the full-config command and the GPU, time and data
    lines but has no badge, and the install cell clones only from FROZEN_LIP_REPO."""
    block = "\n".join(colab.launch_block(chapter, colab.PLACEHOLDER_URL))
    full = colab.chapter_info(chapter)["full_config"]
    assert "OWNER/REPO" not in block and "colab.research.google.com" not in block and "](" not in block
    assert f"papermill notebooks/{chapter}.ipynb out.ipynb -p config full" in block
    for key in ("gpu", "time", "data"):
        assert str(full[key]) in block
    cell = colab.install_cell(colab.PLACEHOLDER_URL)
    assert "OWNER/REPO" not in cell
    assert 'os.environ.get("FROZEN_LIP_REPO")' in cell and "repository URL is not set" in cell


def test_placeholder_config_has_no_repository_or_colab_button():
    """book/_config.yml with the placeholder: no repository button and no Colab launch button."""
    text = (ROOT / "book" / "_config.yml").read_text()
    config = yaml.safe_load(colab.config_text(text, colab.PLACEHOLDER_URL))
    assert config["repository"]["url"] == colab.PLACEHOLDER_URL
    assert config["html"]["use_repository_button"] is False
    assert not config["launch_buttons"]["colab_url"]
    assert not any(config["html"].get(k) for k in ("use_issues_button", "use_edit_page_button"))
    assert not any(config["launch_buttons"].get(k) for k in ("binderhub_url", "jupyterhub_url", "thebe"))


def test_book_config_follows_its_repository_url():
    """The committed book/_config.yml is what tools.colab writes for its own repository.url."""
    text = (ROOT / "book" / "_config.yml").read_text()
    assert colab.config_text(text, colab.repository_url()) == text, "run `python -m tools.colab`"


def test_committed_chapters_do_not_link_to_the_placeholder():
    """While repository.url is the placeholder, no notebook (either half of the pair) contains it."""
    if not colab.is_placeholder(colab.repository_url()):
        pytest.skip("repository.url is set")
    stale = [f"notebooks/{chapter}{suffix}" for chapter in CHAPTERS for suffix in (".py", ".ipynb")
             if "OWNER/REPO" in (ROOT / "notebooks" / f"{chapter}{suffix}").read_text()]
    assert not stale, f"run `python -m tools.colab` (then commit the notebooks): {stale}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_real_url_renders_the_badge_and_the_clone(chapter):
    block = colab.launch_block(chapter, REAL_URL)
    link = f"https://colab.research.google.com/github/someone/frozen-lip-book/blob/main/notebooks/{chapter}.ipynb"
    assert colab.colab_url(chapter, REAL_URL) == link
    assert f"[![Open in Colab]({colab.BADGE_IMAGE})]({link})" in block
    assert f"papermill notebooks/{chapter}.ipynb out.ipynb -p config full" in "\n".join(block)
    assert f'os.environ.get("FROZEN_LIP_REPO", "{REAL_URL}")' in colab.install_cell(REAL_URL)
    rendered = colab.render((ROOT / "notebooks" / f"{chapter}.py").read_text(), chapter, REAL_URL)
    assert link in rendered and "OWNER/REPO" not in rendered


def test_real_url_switches_both_buttons_on_and_back():
    text = (ROOT / "book" / "_config.yml").read_text()
    real = colab.config_text(text, REAL_URL)
    config = yaml.safe_load(real)
    assert config["repository"]["url"] == REAL_URL
    assert config["html"]["use_repository_button"] is True
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert colab.config_text(real, colab.PLACEHOLDER_URL) == colab.config_text(text, colab.PLACEHOLDER_URL)
    assert colab.config_text(real, REAL_URL) == real  # idempotent


def test_one_command_sets_the_url_everywhere(tmp_path, monkeypatch):
    """`python -m tools.colab --repo URL` on a copy of the book: the config and every chapter (both
    halves of each pair) link to URL; `--repo` back to the placeholder removes every link again."""
    (tmp_path / "book").mkdir()
    for name in ("_config.yml", "papers.yaml"):
        shutil.copy(ROOT / "book" / name, tmp_path / "book" / name)
    (tmp_path / "notebooks").mkdir()
    for chapter in CHAPTERS:
        for suffix in (".py", ".ipynb"):
            shutil.copy(ROOT / "notebooks" / f"{chapter}{suffix}", tmp_path / "notebooks" / f"{chapter}{suffix}")
    monkeypatch.setattr(colab, "ROOT", tmp_path)

    monkeypatch.setattr(sys, "argv", ["tools.colab", "--repo", REAL_URL])
    colab.main()
    assert colab.repository_url() == REAL_URL
    assert yaml.safe_load((tmp_path / "book" / "_config.yml").read_text())["html"]["use_repository_button"] is True
    for chapter in CHAPTERS:
        source = (tmp_path / "notebooks" / f"{chapter}.py").read_text()
        assert colab.render(source, chapter) == source
        notebook = jupytext.read(tmp_path / "notebooks" / f"{chapter}.ipynb")
        assert colab.colab_url(chapter) in next(c for c in notebook.cells if c.cell_type == "markdown").source

    monkeypatch.setattr(sys, "argv", ["tools.colab", "--repo", colab.PLACEHOLDER_URL])
    colab.main()
    assert colab.is_placeholder(colab.repository_url())
    assert (tmp_path / "book" / "_config.yml").read_text() == colab.config_text(
        (ROOT / "book" / "_config.yml").read_text(), colab.PLACEHOLDER_URL)
    for chapter in CHAPTERS:
        for suffix in (".py", ".ipynb"):
            assert "OWNER/REPO" not in (tmp_path / "notebooks" / f"{chapter}{suffix}").read_text()
            assert "someone/frozen-lip-book" not in (tmp_path / "notebooks" / f"{chapter}{suffix}").read_text()


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
    for folder in ("lib", "chapters", "corpora", "provision", "tools"):
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
        print("CHAPTERS", importlib.util.find_spec("chapters").origin)
    """)
    home = tmp_path / "content" / "frozen-lip-book"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update({"FROZEN_LIP_REPO": str(remote), "FROZEN_LIP_HOME": str(home), "SETUP_STEPS": "lib",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    first = subprocess.run([str(python), "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"LIB {home / 'lib' / '__init__.py'}" in first.stdout
    assert f"CHAPTERS {home / 'chapters' / '__init__.py'}" in first.stdout  # the experiments come with the library
    assert "installing into" in first.stdout and not (home / ".venv").exists()  # --here: no venv of its own

    # second run: the clone exists, so nothing is cloned again (the remote is gone)
    shutil.rmtree(remote)
    second = subprocess.run([str(python), "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"LIB {home / 'lib' / '__init__.py'}" in second.stdout

"""The top of every chapter: the "Open in Colab" badge, how to run the full config, and the install cell.

Five notebooks must open the same way, and the repository's address must live in one place
(``repository.url`` in ``book/_config.yml``), so this module *renders* those parts from data and
``python -m tools.colab`` writes them into ``notebooks/<chapter>.py`` (then ``make sync`` pairs the
``.ipynb``); ``tests/test_colab.py`` fails when a notebook differs from what this module renders.

* The **launch block** (between ``<!-- launch -->`` markers, in the chapter's first markdown cell):
  the badge, linking to the notebook on Colab, and the full-config command with the GPU, time and
  data it needs (``full_config`` of the chapter in ``book/papers.yaml``).
* The **install cell** (the first code cell, tagged ``remove-cell`` so the rendered book hides it):
  a no-op when ``import lib`` works; otherwise it clones the book next to the notebook and runs
  ``tools/setup.sh --here``, which installs the packages, model wheels and data into the running
  interpreter (Colab's own torch is kept), then puts the clone on ``sys.path``. ``FROZEN_LIP_REPO``
  and ``FROZEN_LIP_HOME`` override where it clones from and to (the tests clone a local repository).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BADGE_IMAGE = "../book/images/open-in-colab.svg"  # local, so the offline book never shows a broken image
LAUNCH_START, LAUNCH_END = "<!-- launch -->", "<!-- /launch -->"
INSTALL_MARKER = "# In Colab, or in any Python without the book's library:"


def repository_url() -> str:
    """The book's GitHub address, from ``book/_config.yml`` (``repository.url``)."""
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    url = str(config.get("repository", {}).get("url", "")).rstrip("/")
    if not re.fullmatch(r"https://github\.com/[^/\s]+/[^/\s]+", url):
        raise ValueError(f"book/_config.yml: repository.url must be https://github.com/<owner>/<repo>, got {url!r}")
    return url


def chapter_info(chapter: str) -> dict:
    """The chapter's entry of ``book/papers.yaml`` (title, paper claims, what the full config needs)."""
    papers = yaml.safe_load((ROOT / "book" / "papers.yaml").read_text())["chapters"]
    if chapter not in papers:
        raise KeyError(f"book/papers.yaml has no chapter {chapter!r}: add it (title, full_config, claims)")
    return papers[chapter]


def colab_url(chapter: str) -> str:
    owner_repo = repository_url().removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/main/notebooks/{chapter}.ipynb"


def launch_block(chapter: str) -> list[str]:
    """Markdown lines of the launch block (without the ``# `` comment prefix of py:percent)."""
    full = chapter_info(chapter)["full_config"]
    return [
        LAUNCH_START,
        f"[![Open in Colab]({BADGE_IMAGE})]({colab_url(chapter)})",
        "",
        "**Run it.** The small config (the default) runs top to bottom on a CPU in minutes, here or in "
        "Colab. The full config needs internet access and",
        "",
        f"- **GPU:** {full['gpu']}",
        f"- **time:** {full['time']}",
        f"- **data:** {full['data']}",
        "",
        "```bash",
        f"papermill notebooks/{chapter}.ipynb out.ipynb -p config full",
        "```",
        LAUNCH_END,
    ]


def install_cell() -> str:
    """The first code cell of every chapter, as py:percent source (with its ``# %%`` line)."""
    url = repository_url()
    return f'''# %% tags=["remove-cell"]
{INSTALL_MARKER} clone the book and run its set-up in this
# interpreter (tools/setup.sh --here: packages, model wheels, data; an installed torch is kept).
# A no-op when `lib` imports. Written by tools/colab.py: edit it there, not here.
try:
    import lib  # noqa: F401
except ModuleNotFoundError:
    import os
    import subprocess
    import sys

    home = os.path.abspath(os.environ.get("FROZEN_LIP_HOME", "frozen-lip-book"))
    if not os.path.isdir(os.path.join(home, "lib")):
        repo = os.environ.get("FROZEN_LIP_REPO", "{url}")
        subprocess.run(["git", "clone", "--depth", "1", repo, home], check=True)
    subprocess.run(["bash", "tools/setup.sh", "--here"], cwd=home, check=True, env={{**os.environ, "PYTHON": sys.executable}})
    sys.path.insert(0, home)
'''


def render(source: str, chapter: str) -> str:
    """``source`` (a chapter's py:percent text) with its launch block and install cell brought up to date."""
    block = "\n".join(f"# {line}".rstrip() for line in launch_block(chapter))
    pattern = re.compile(rf"^# {re.escape(LAUNCH_START)}\n.*?^# {re.escape(LAUNCH_END)}$", re.S | re.M)
    if pattern.search(source):
        source = pattern.sub(lambda _: block, source, count=1)
    else:  # first time: the block replaces the old badge line
        badge = re.compile(r"^# \[!\[Open [Ii]n Colab\].*$", re.M)
        if not badge.search(source):
            raise ValueError(f"notebooks/{chapter}.py: no launch block and no Colab badge line to replace")
        source = badge.sub(lambda _: block, source, count=1)

    cells = re.split(r"(?m)^(?=# %%)", source)
    for i, cell in enumerate(cells):
        if cell.startswith('# %% tags=["remove-cell"]') and ("import lib" in cell):
            cells[i] = install_cell() + "\n"
            break
    else:
        raise ValueError(f"notebooks/{chapter}.py: no install cell (a remove-cell tagged cell that imports lib)")
    return "".join(cells)


def chapters() -> list[str]:
    from tools.run_notebooks import chapters as sources

    return [path.stem for path in sources()]


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the launch block and install cell into every chapter.")
    parser.add_argument("names", nargs="*", help="only these chapters")
    args = parser.parse_args()
    changed = []
    for chapter in args.names or chapters():
        path = ROOT / "notebooks" / f"{chapter}.py"
        old = path.read_text()
        new = render(old, chapter)
        if new != old:
            path.write_text(new)
            changed.append(path)
    if changed:  # keep the .ipynb paired (outputs are kept; only sources change)
        subprocess.run([sys.executable, "-m", "jupytext", "--sync", *map(str, changed)], check=True, cwd=ROOT)
    print(f"tools.colab: {len(changed)} notebook(s) updated" + "".join(f"\n  {p.relative_to(ROOT)}" for p in changed))


if __name__ == "__main__":
    main()

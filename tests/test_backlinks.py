"""d2l-style navigation: the library points at the sections that explain it, and the chapters point back.

* Every back-link in `lib` (``notebooks/<chapter>.py, section "<heading>"``, or ``sections "<a>" and
  "<b>"``) names a heading that exists in that chapter, so renaming a section breaks a test, not a
  reader's trail.
* Every module's docstring (the library, the chapters, the corpora, the set-up tools) has at least one
  back-link (or names a page under ``book/``).
* Every chapter ends with "What to try next", and every ``lib.<module>.<name>`` it names exists and
  is documented with a back-link (its own docstring or its module's).
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import chapters
import corpora
import lib
import provision

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))
MODULES = sorted(m.name for package in (lib, chapters, corpora, provision)
                 for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.") if not m.ispkg)
# notebooks/<chapter>.py[``], section(s) "<title>"[, "<title>"][ and "<title>"]
BACKLINK = re.compile(r'notebooks/(\w+)\.py`{0,2},?\s+sections?\s+((?:"[^"]+"(?:,\s*|\s+and\s+)?)+)')


def headings(chapter: str) -> set[str]:
    text = (ROOT / "notebooks" / f"{chapter}.py").read_text()
    return {m.group(1).strip() for m in re.finditer(r"^# #+ (.+)$", text, re.M)}


def backlinks(text: str) -> list[tuple[str, str]]:
    """(chapter, heading) for every back-link in ``text``."""
    return [(m.group(1), " ".join(title.split())) for m in BACKLINK.finditer(text)
            for title in re.findall(r'"([^"]+)"', m.group(2))]


def has_backlink(doc: str | None) -> bool:
    return bool(doc) and (bool(backlinks(doc)) or bool(re.search(r"book/\w+\.md", doc)))


def test_backlink_pattern_reads_one_and_several_sections():
    text = 'See notebooks/fdt.py, sections "The FDT head" and "Sparsemax"; notebooks/sharelock.py, section "The data".'
    assert backlinks(text) == [("fdt", "The FDT head"), ("fdt", "Sparsemax"), ("sharelock", "The data")]


@pytest.mark.parametrize("module", MODULES)
def test_every_backlink_names_an_existing_section(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    source = path.read_text()
    broken = [f"notebooks/{c}.py has no section {t!r}" for c, t in backlinks(source)
              if c not in CHAPTERS or t not in headings(c)]
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_says_where_it_is_explained(module):
    doc = importlib.import_module(module).__doc__
    assert has_backlink(doc), f'{module}: add `See notebooks/<chapter>.py, section "<heading>".` to its docstring'


def _try_next(chapter: str) -> str:
    text = (ROOT / "notebooks" / f"{chapter}.py").read_text()
    start = text.find("# ## What to try next")
    assert start >= 0, f"notebooks/{chapter}.py has no 'What to try next' section"
    return text[start:]


def _module_of(dotted: str) -> tuple[object, list[str]]:
    """The longest importable module prefix of ``dotted`` and the attribute path after it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            return importlib.import_module(".".join(parts[:cut])), parts[cut:]
        except ImportError:
            continue
    raise ImportError(dotted)


def _resolve(dotted: str):
    obj, rest = _module_of(dotted)
    for name in rest:
        obj = getattr(obj, name)
    return obj


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_what_to_try_next_points_at_documented_lib_functions(chapter):
    names = sorted(set(re.findall(r"`(lib\.\w+(?:\.\w+)*)", _try_next(chapter))))
    assert names, f"notebooks/{chapter}.py: 'What to try next' names no lib function"
    problems = []
    for dotted in names:
        try:
            obj = _resolve(dotted)
        except (ImportError, AttributeError) as error:
            problems.append(f"{dotted} does not exist ({error})")
            continue
        module = _module_of(dotted)[0]
        if not (has_backlink(getattr(obj, "__doc__", None)) or has_backlink(module.__doc__)):
            problems.append(f"{dotted} has no back-link to a section (nor has {module.__name__})")
    assert not problems, f"notebooks/{chapter}.py: " + "; ".join(problems)

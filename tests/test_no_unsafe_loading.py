"""No unsafe loading: nothing in the book unpickles (book/design.md: "no pickle").

Unpickling runs whatever code the file names, so a downloaded checkpoint or a tampered cache file
could run code on the reader's machine. This scans the source of lib/, tools/, bench/, tests/ and
the notebooks' py:percent files for calls that unpickle -- ``pickle.load(s)`` (and its kin),
``torch.load`` without ``weights_only=True``, ``np.load`` with ``allow_pickle`` on, ``yaml.load``
with an unsafe loader -- and fails naming file:line. Calls are found in the syntax tree (aliases such
as ``import pickle as pk`` or ``from torch import load`` included), so a mention in a string or a
comment is not a finding.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from lib.core.paths import REPO_ROOT

SCANNED = [*(REPO_ROOT / d for d in ("lib", "tools", "bench", "tests")), REPO_ROOT / "notebooks"]
ALWAYS_UNSAFE = {
    "pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.load", "_pickle.loads", "cPickle.load",
    "cPickle.loads", "dill.load", "dill.loads", "cloudpickle.load", "cloudpickle.loads", "joblib.load",
    "pandas.read_pickle", "shelve.open", "numpy.lib.format.read_array_pickle", "yaml.unsafe_load",
    "yaml.unsafe_load_all", "torch.serialization._legacy_load",
}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}


def source_files() -> list[Path]:
    files = []
    for folder in SCANNED:
        pattern = "*.py" if folder.name == "notebooks" else "**/*.py"
        files += sorted(p for p in folder.glob(pattern) if ".ipynb_checkpoints" not in p.parts)
    return files


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted origin, from every import in the file (``np`` -> ``numpy``)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(func: ast.expr, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    parts.append(aliases.get(func.id, {"np": "numpy", "pd": "pandas"}.get(func.id, func.id)))
    return ".".join(reversed(parts))


def _keyword(call: ast.Call, name: str):
    """(present, value-or-None): the value only when it is a literal; ``**kwargs`` counts as present."""
    for kw in call.keywords:
        if kw.arg == name:
            return True, kw.value.value if isinstance(kw.value, ast.Constant) else None
        if kw.arg is None:
            return True, None
    return False, None


def findings_in(source: str, filename: str = "<source>") -> list[str]:
    """Each unsafe call as 'filename:line: what'; a file that does not parse is scanned line by line."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _regex_findings(source, filename)
    aliases, out = _aliases(tree), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func, aliases)
        if name is None:
            continue
        problem = None
        if name in ALWAYS_UNSAFE:
            problem = f"{name}() unpickles"
        elif name == "torch.load":
            present, value = _keyword(node, "weights_only")
            if not (present and value is True):
                problem = "torch.load() without weights_only=True"
        elif name in ("numpy.load", "numpy.lib.npyio.load"):
            present, value = _keyword(node, "allow_pickle")
            if present and value is not False:
                problem = "numpy.load() with allow_pickle on"
        elif name in ("yaml.load", "yaml.load_all"):
            loader = next((kw.value for kw in node.keywords if kw.arg == "Loader"), None)
            if loader is None and len(node.args) > 1:
                loader = node.args[1]
            loader_name = (loader.attr if isinstance(loader, ast.Attribute) else getattr(loader, "id", None))
            if loader_name not in SAFE_YAML_LOADERS:
                problem = f"{name}() with loader {loader_name or 'unknown'} (use yaml.safe_load)"
        if problem:
            out.append(f"{filename}:{node.lineno}: {problem}")
    return out


_LINE_PATTERNS = [
    (re.compile(r"\b(c?pickle|dill|cloudpickle|joblib)\.loads?\s*\("), "unpickles"),
    (re.compile(r"\btorch\.load\s*\((?![^)]*weights_only\s*=\s*True)"), "torch.load() without weights_only=True"),
    (re.compile(r"\bn(?:um)?p(?:y)?\.load\s*\([^)]*allow_pickle\s*=\s*True"), "numpy.load() with allow_pickle=True"),
]


def _regex_findings(source: str, filename: str) -> list[str]:
    out = []
    for number, line in enumerate(source.splitlines(), 1):
        code = line.split("#", 1)[0]
        for pattern, problem in _LINE_PATTERNS:
            if pattern.search(code):
                out.append(f"{filename}:{number}: {problem} (file does not parse; line scan)")
    return out


def test_the_scanner_finds_every_unsafe_form_and_no_safe_one():
    bad = """
import pickle, pickle as pk, numpy as np, torch, yaml
from torch import load as tload
from pickle import loads
import pandas as pd
a = pickle.load(f)
b = pk.loads(data)
c = loads(data)
d = torch.load(path)
e = torch.load(path, weights_only=False)
f_ = tload(path, map_location="cpu")
g = np.load(path, allow_pickle=True)
h = yaml.load(text, Loader=yaml.Loader)
i = pd.read_pickle(path)
j = torch.load(path, **options)
"""
    found = findings_in(bad, "bad.py")
    assert [int(f.split(":")[1]) for f in found] == list(range(6, 16)), found
    good = """
import numpy as np, torch, yaml
x = torch.load(path, map_location="cpu", weights_only=True)
y = np.load(path, mmap_mode="r", allow_pickle=False)
z = np.load(path)
w = yaml.safe_load(text), yaml.load(text, Loader=yaml.SafeLoader)
s = "pickle.load(f) and torch.load(p) in a string are not calls"
# pickle.loads(data) in a comment is not a call
"""
    assert findings_in(good, "good.py") == []
    assert findings_in("x = (\ntorch.load(p)  # broken syntax", "broken.py") == [
        "broken.py:2: torch.load() without weights_only=True (file does not parse; line scan)"]


def test_no_source_file_loads_unsafely():
    files = source_files()
    assert any(f.parent.name == "lib" for f in files) and any(f.parent.name == "notebooks" for f in files)
    found = []
    for path in files:
        found += findings_in(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))
    assert not found, "unsafe loading (pickle can run code; see book/design.md):\n" + "\n".join(found)

"""The checkout's architecture, checked: the library apart from the chapters, the corpora and the set-up tools,
layers, no import cycles, one chapter protocol, and no reference to a file the repository does not have
(book/design.md, "Three parts")."""
from __future__ import annotations

import ast
import inspect
import re
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lib", "chapters", "corpora", "provision")  # the library, the experiments, the book's data, set-up tools
# layer -> the layers its modules may import (besides their own). The library's layers are lib's sub-packages; it
# imports nothing of the other three packages (a researcher imports lib alone).
ALLOWED = {
    "lib.core": {"lib.core"},
    "lib.data": {"lib.core", "lib.data"},
    "lib.nn": {"lib.core", "lib.nn"},
    "lib.methods": {"lib.core", "lib.nn", "lib.methods"},
    "corpora": {"lib.core", "lib.data", "corpora"},
    "chapters": {"lib.core", "lib.data", "lib.nn", "lib.methods", "corpora", "chapters"},
    "provision": {"lib.core", "lib.data", "lib.nn", "lib.methods", "corpora", "chapters", "provision"},
}
# what every chapter shares: the registry, the page glue, config loading, metrics.json
SHARED_CHAPTER_MODULES = {"chapters", "chapters.notebook", "chapters.configs", "chapters.metrics"}
MAX_LINES = 800  # a smoke alarm only: modules are split by concern, never by a line count
LIB_MAX_LINES = 7_220  # the importable library, without chapters, corpora and set-up tools (6,500 at the
# three-part split; then the full configs' open_clip towers, the image-tower wrapper and the streamed rows, ~260;
# then lib.core.recipes, each method's recipe chosen on the validation set, ~100; then lib.data.image_rows, the
# streamed pixels, ~60; then lib.data.shards, images read from webdataset tar shards by offset, ~80; then
# lib.methods.fdt_towers, FDT and its CLIP baseline trained end to end through open_clip's towers, ~125; then the
# sweep's keep-within-k-SE margin in lib.core.recipes and the shared welch_interval in lib.core.results, ~50)


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the four packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "lib":
        return ".".join(parts[:2]) if len(parts) > 1 else "root"
    return parts[0]


def imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """The project modules a file imports (``from lib.x import y`` counts ``lib.x`` and ``lib.x.y`` if a module)."""
    known = modules()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in PACKAGES:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known}
    return {m for m in found if m in known and m != "lib"}


def test_each_layer_imports_only_the_layers_above_it():
    bad = []
    for name, path in modules().items():
        own = layer(name)
        if own == "root":
            continue
        for target in imports(path):  # inside functions too: a deferred import is still a dependency
            if layer(target) not in ALLOWED[own] and target != "lib":
                bad.append(f"{name} imports {target}")
    assert not bad, "layer violations (book/design.md, 'Three parts'):\n" + "\n".join(bad)


def test_the_library_is_thin():
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()
                if name.split(".")[0] == "lib")
    assert lines <= LIB_MAX_LINES, f"lib has {lines} lines (ceiling {LIB_MAX_LINES}): move what is not library out"


def owner(module: str) -> str:
    """The chapter a module belongs to: ``chapters.flame.verdicts`` belongs to ``chapters.flame``."""
    return ".".join(module.split(".")[:2])


def test_a_chapter_never_imports_another():
    bad = []
    for name, path in modules().items():
        if layer(name) != "chapters" or name in SHARED_CHAPTER_MODULES:
            continue
        for target in imports(path):
            if layer(target) == "chapters" and target not in SHARED_CHAPTER_MODULES and owner(target) != owner(name):
                bad.append(f"{name} imports {target}")
    assert not bad, "\n".join(bad)


def test_a_method_never_imports_another():
    bad = [f"{name} imports {target}" for name, path in modules().items() if layer(name) == "lib.methods"
           for target in imports(path) if layer(target) == "lib.methods" and target not in (name, "lib.methods")]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {name: imports(path, top_level_only=True) - {name} for name, path in modules().items()}
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(sorted(group)) for group in cycles)


def all_imports(path: Path) -> set[str]:
    """:func:`imports` anywhere in the file (inside functions too), and ``__import__("lib.x")`` calls."""
    found, known = imports(path), modules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in known:
            found.add(node.args[0].value)
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or around a loop (Tarjan), of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_no_import_cycles_through_function_level_imports():
    graph = {name: all_imports(path) - {name} for name, path in modules().items()}
    found = strongly_connected(graph)
    assert not found, "import cycles (imports inside functions included):\n" + "\n".join(
        " <-> ".join(sorted(group)) for group in found)
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]  # the finder bites


def test_no_module_imports_another_modules_private_names():
    known = modules()
    bad = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in known and node.module != name:
                bad += [f"{name} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, "private names used across modules (make them public, or move them):\n" + "\n".join(bad)


def test_no_module_is_over_the_size_limit():
    big = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    over = {k: v for k, v in big.items() if v > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_every_chapter_speaks_the_protocol():
    import chapters

    toc = (ROOT / "_toc.yml").read_text()
    for name in chapters.NAMES:
        module = chapters.get(name)
        for attribute in ("NAME", "Config", "load_config", "benchmark", "feature_plan", "claims"):
            assert hasattr(module, attribute), f"chapters.{name} lacks {attribute}"
        assert module.NAME == name
        signature = {attr: list(inspect.signature(getattr(module, attr)).parameters)
                     for attr in ("load_config", "benchmark", "feature_plan")}
        assert signature["load_config"] == ["name", "overrides"], (name, signature)
        assert len(signature["benchmark"]) == 1 and len(signature["feature_plan"]) == 2, (name, signature)
        assert isinstance(module.load_config("small"), module.Config)
        assert f"notebooks/{name}" in toc, f"{name} is not a chapter of _toc.yml"
        source = (ROOT / "notebooks" / f"{name}.py").read_text(encoding="utf-8")
        assert f"{name}.feature_plan(" in source and "materialise(" in source, (
            f"notebooks/{name}.py must read its features through {name}.feature_plan and materialise")


# --- no reference to a file outside the repository -------------------------------------------------------
PATH = re.compile(r"(?<![\w/.-])((?:lib|chapters|corpora|provision|tests|tools|bench|book|notebooks|data_manifests"
                  r"|\.ci)"
                  r"/[\w./-]*\w)")
IGNORED_PREFIXES = ("book/metrics/", "book/figures/", "bench/results/", "notebooks/runs")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in names:
        path = ROOT / name
        if path.suffix in (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg") or path.name in (
                "Makefile", "run"):
            if path.is_file():
                out.append(path)
    return out


def test_every_capitalised_markdown_file_a_file_names_is_in_the_repository():
    """README.md-style names (design notes, contributing guides) must be files a reader of the repository has."""
    have = {Path(name).name for name in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                                       check=True).stdout.split()}
    offenders = sorted({f"{p.relative_to(ROOT)}: {m}" for p in tracked_text_files()
                        for m in re.findall(r"\b[A-Z][A-Z_-]+\.md\b", p.read_text(encoding="utf-8", errors="replace"))
                        if m not in have})
    assert not offenders, f"these files cite markdown files that are not in the repository: {offenders}"


def test_every_repository_path_a_file_names_exists():
    missing = []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in PATH.finditer(text):
            target = match.group(1).rstrip(".")
            if target.startswith(IGNORED_PREFIXES) or "*" in target or target.endswith(".html"):
                continue
            candidate = ROOT / target
            if not (candidate.exists()
                    or any(Path(f"{candidate}{suffix}").exists() for suffix in (".py", ".md", ".ipynb"))
                    or (ROOT / target.split(".")[0]).exists()):
                missing.append(f"{path.relative_to(ROOT)} names {target}")
    assert not missing, "references to files the repository does not have:\n" + "\n".join(sorted(set(missing)))

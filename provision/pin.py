"""Pin every hub model of a chapter's config to the commit its revision names today.

Why: a hub id without a ``revision`` follows the repository's ``main`` branch. The feature store already keys a hub
model by the commit it resolved to (:func:`lib.core.models.hub_commit`), so features of two different weights never
mix; but a rerun months later may load other weights and change the numbers. Pinning writes ``revision: <commit>``
beside each hub id of one config section, keeping the file's comments and layout, then loads the section again to
check that every hub model now names its commit::

    python -m provision.pin --chapter sharelock            # the full section of notebooks/configs/sharelock.yaml
    python -m provision.pin --chapter viterb --dry-run     # print what it would write

Run it where the hub is reachable, or where the Hugging Face cache already holds the models (what
``from_pretrained`` would load with the hub off). See book/scale_out.md, "Rehearsals".
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from chapters import configs as chapter_configs
from lib.core import config as configs
from lib.core.atomic import write_bytes
from lib.core.models import hub_commit, is_hub_id

__all__ = ["hub_models", "pin_text", "pin", "main"]


def hub_models(cfg) -> list:
    """The model configs of a loaded chapter config that name a hub id and carry a ``revision`` field."""
    found, seen = [], set()

    def visit(value):
        if isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif hasattr(value, "__dataclass_fields__"):
            if "revision" in value.__dataclass_fields__ and is_hub_id(getattr(value, "name", "")):
                if id(value) not in seen:
                    seen.add(id(value))
                    found.append(value)
            for name in value.__dataclass_fields__:
                visit(getattr(value, name))

    visit(cfg)
    return found


def _section_span(lines: list[str], section: str) -> tuple[int, int]:
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"{section}:"), None)
    if start is None:
        raise KeyError(f"no top-level section {section!r}")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[A-Za-z_]", lines[i])), len(lines))
    return start, end


def pin_text(text: str, section: str, commits: dict[str, str]) -> str:
    """``text`` with ``revision: <commit>`` beside every ``name: <hub id>`` of ``commits`` in ``section``: inside a
    flow mapping (``{name: x, ...}``) before its closing brace, or as the next line of a block mapping."""
    lines = text.splitlines(keepends=True)
    start, end = _section_span(lines, section)
    out, inserted = lines[:start + 1], False
    for line in lines[start + 1:end]:
        if inserted and re.match(r"\s*revision: ", line):
            inserted = False
            continue  # the revision pinned before, below the name: replaced by the one just written
        inserted = False
        for name, commit in commits.items():
            match = re.search(rf"name: {re.escape(name)}(?=[,}}\s]|$)", line)
            if not match:
                continue
            brace = line.find("{", 0, match.start())
            if brace >= 0:  # a flow mapping on this line
                close = line.find("}", match.end())
                head = re.sub(r",?\s*revision: [^,}]*", "", line[:close])
                line = f"{head}, revision: {commit}{line[close:]}"
            else:
                indent = re.match(r"(\s*)(- )?", line)
                width = len(indent.group(1)) + (2 if indent.group(2) else 0)
                out.append(line)
                line, inserted = f"{' ' * width}revision: {commit}\n", True
            break
        out.append(line)
    return "".join(out + lines[end:])


def pin(chapter: str, section: str = "full", path: Path | None = None, dry_run: bool = False) -> dict[str, str]:
    """Pin the hub models of ``section`` of ``path`` (default: the chapter's config file); returns id -> commit.
    Raises with one line per model whose commit cannot be resolved, and writes nothing then."""
    import chapters

    module = chapters.get(chapter)
    path = Path(path) if path else chapter_configs.CONFIG_DIR / f"{chapter}.yaml"
    text = path.read_text(encoding="utf-8")
    cfg = configs.build(module.Config, yaml.safe_load(text)[section], where=section)
    models = {m.name: m.revision for m in hub_models(cfg)}
    commits = {name: hub_commit(name, revision) for name, revision in models.items()}
    unknown = [name for name, commit in commits.items() if commit is None]
    if unknown:
        raise LookupError("\n".join(f"model {name}: no commit known for revision {models[name] or 'main'} (the hub is "
                                    "off or unreachable and the Hugging Face cache lacks it): run where the hub is "
                                    "reachable, or download the model first" for name in unknown))
    pinned = pin_text(text, section, commits)
    check = configs.build(module.Config, yaml.safe_load(pinned)[section], where=section)
    wrong = {m.name: m.revision for m in hub_models(check) if m.revision != commits[m.name]}
    if wrong:
        raise RuntimeError(f"{path}: pinning left {wrong} unpinned; pin them by hand (revision: <commit>)")
    if not dry_run and pinned != text:
        write_bytes(path, pinned.encode("utf-8"))
    return commits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True)
    parser.add_argument("--config", default="full", help="the config section to pin (default: full)")
    parser.add_argument("--file", type=Path, help="a config file other than notebooks/configs/<chapter>.yaml")
    parser.add_argument("--dry-run", action="store_true", help="print the commits, write nothing")
    args = parser.parse_args(argv)
    try:
        commits = pin(args.chapter, args.config, args.file, args.dry_run)
    except (LookupError, RuntimeError, KeyError) as error:
        print(error, file=sys.stderr)
        return 1
    for name, commit in commits.items():
        print(f"{name}: {commit}" + (" (dry run)" if args.dry_run else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

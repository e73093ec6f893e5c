"""A chapter's config: a section (``small``, ``medium``, ``full``) of ``notebooks/configs/<chapter>.yaml``, validated
against the chapter's schema, with a notebook's papermill parameters merged over it.

Why here: the files and their YAML are the book's (read by :func:`safe_yaml`, which bounds what a file or a
parameter may make the parser do); the validation (one line naming the field) is the library's
(:mod:`lib.core.config`). See notebooks/sharelock.py, section "Configuration".
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lib.core.config import ConfigError, bounded_repr, build
from lib.core.paths import REPO_ROOT

__all__ = ["CONFIG_DIR", "load", "parameter_overrides", "merge", "read_yaml_file", "safe_yaml"]

CONFIG_DIR = REPO_ROOT / "notebooks" / "configs"
MAX_PARAMETER_CHARS = 10_000  # a papermill parameter's YAML text (a seed list, an overrides mapping)
MAX_CONFIG_BYTES = 1 << 20  # a config file: the shipped ones are a few kilobytes
MAX_DEPTH = 50  # mappings and lists inside each other: the shipped configs are 4 deep


class _UniqueKeys(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping (``yaml.safe_load`` keeps the last without
    a word, so a second ``seeds:`` would silently replace the first)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                if (key.tag, key.value) in seen:
                    line = key.start_mark.line + 1
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key.value!r} is written twice in one mapping (line {line}); YAML would keep "
                        "the last silently: write it once", key.start_mark)
                seen.add((key.tag, key.value))
        return super().construct_mapping(node, deep)


def safe_yaml(text: str, where: str, limit: int = MAX_PARAMETER_CHARS) -> Any:
    """``text`` read as YAML, bounded: refused past ``limit`` characters, when it uses an alias, when it nests past
    :data:`MAX_DEPTH`, and when a mapping has a key twice.

    Why: an alias (``*a``) can repeat an anchored node exponentially (a "billion laughs" of a few hundred
    characters); a long text is parsed before any field is validated; PyYAML's time grows with the square of the
    nesting and its composer recurses once per level (a page of ``[`` takes minutes, then a RecursionError), so the
    depth is counted on the event stream, which stops at the first level too deep. The book's configs use none."""
    if len(text) > limit:
        raise ConfigError(f"{where}: {len(text):,} characters of YAML is more than the {limit:,} allowed; "
                          "give a shorter value (or a config file)")
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"{where}: YAML aliases (*name) are not allowed; write the value out")
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_DEPTH:
                raise ConfigError(f"{where}: YAML nested more than {MAX_DEPTH} levels deep (line "
                                  f"{event.start_mark.line + 1}); a config is a few levels deep: a bracket left open?")
        return yaml.load(text, Loader=_UniqueKeys)  # a SafeLoader: no Python objects
    except yaml.YAMLError as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"{where}: not valid YAML ({first})") from None


def read_yaml_file(path: Path) -> Any:
    size = Path(path).stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path}: {size:,} bytes is more than the {MAX_CONFIG_BYTES:,} a config may have")
    return safe_yaml(Path(path).read_text(encoding="utf-8"), f"config file {path}", limit=MAX_CONFIG_BYTES)


def load(notebook: str, name: str, schema: type, overrides: dict | None = None):
    """Load section ``name`` (``small`` / ``full``) of ``notebooks/configs/<notebook>.yaml``.

    ``name`` may also be a path to a YAML file holding one config (e.g. a user's own variant).
    ``overrides`` is a nested dict merged over the file (papermill parameters, tests).
    """
    path = CONFIG_DIR / f"{notebook}.yaml"
    if Path(name).suffix in (".yaml", ".yml"):
        if not Path(name).is_file():
            names = ", ".join(read_yaml_file(path)) if path.is_file() else "small, medium, full"
            raise ConfigError(f"config: {name} is not a file; give the path of a YAML config, or one of {names} "
                              f"({path})")
        data = read_yaml_file(Path(name))
    else:
        sections = read_yaml_file(path)
        if name not in sections:
            raise ConfigError(f"config: {name!r} is not allowed; expected one of {', '.join(sections)} ({path})")
        data = sections[name]
    return build(schema, merge(data, overrides or {}), where=name)


def merge(base: Any, extra: dict) -> Any:
    if not isinstance(base, dict):
        return extra
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = merge(base.get(key), value) if isinstance(value, dict) else value
    return merged


def parameter_overrides(*, seeds: Any = None, limit: Any = None, overrides: Any = None, **fields: Any) -> dict:
    """A notebook's papermill parameters as config overrides (``None`` = keep the config's value).

    ``papermill -p seeds "[0, 1]"`` hands the notebook the *string* ``"[0, 1]"``; a string is therefore
    read as YAML first, so it becomes the list it spells instead of being split into characters.
    ``limit`` sets ``data.limit``; ``overrides`` is a nested mapping (or its YAML text, e.g.
    ``-p overrides "{device: cpu, train: {steps: 2}}"``) merged over the config section; other keyword
    arguments set top-level fields of the same name.
    """
    def parsed(name: str, value: Any) -> Any:
        return safe_yaml(value, f"parameter {name}") if isinstance(value, str) else value

    out: dict = {}
    if overrides is not None:
        extra = parsed("overrides", overrides)
        if not isinstance(extra, dict):
            raise ConfigError(f"parameter overrides={bounded_repr(overrides)} must be a mapping of config fields")
        out = merge(out, extra)
    if seeds is not None:
        seeds = parsed("seeds", seeds)
        out["seeds"] = [seeds] if isinstance(seeds, int) and not isinstance(seeds, bool) else seeds
    if limit is not None:
        out = merge(out, {"data": {"limit": parsed("limit", limit)}})
    for name, value in fields.items():
        if value is not None:
            out[name] = parsed(name, value)
    return out


def curve_run_seeds(seeds: tuple[int, ...], curve_seeds: int | None) -> tuple[int, ...]:
    """The seeds a chapter's data-size curve runs: the first ``curve_seeds`` of ``seeds`` (all when None). A curve
    may need fewer seeds than the claims' intervals; two at least, so each size has a spread (else ValueError)."""
    if curve_seeds is not None and not 2 <= curve_seeds <= len(seeds):
        raise ValueError(f"curve_seeds {curve_seeds} must lie in 2..{len(seeds)} (the seeds; two at least for the "
                         "curve's intervals), or be left out to run every seed")
    return tuple(seeds[:curve_seeds])

"""A chapter's config: a section (``small``, ``medium``, ``full``) of ``notebooks/configs/<chapter>.yaml``, validated
against the chapter's schema, with a notebook's papermill parameters merged over it.

Why here: the files and their YAML are the book's; the validation (one line naming the field) is the library's
(:mod:`lib.core.config`). What the library's schema and ``safe_yaml`` (a size cap, no aliases) let through is bounded
here, outside ``lib`` (whose files key every cached training run, :mod:`lib.core.run_cache`): before anything is
built, :func:`bounded_yaml` reads the text's YAML events once and refuses a key written twice in one mapping
(``yaml.safe_load`` keeps the last without a word) and nesting past :data:`MAX_DEPTH` (PyYAML's time grows with the
square of the depth and its composer recurses once per level: a page of ``[`` took minutes, then a RecursionError);
after the schema has built a config, :func:`check_counts` refuses a step or batch count no run could mean. See
notebooks/sharelock.py, section "Configuration".
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from lib.core.config import MAX_CONFIG_BYTES, MAX_PARAMETER_CHARS, ConfigError, bounded_repr, build, safe_yaml
from lib.core.paths import REPO_ROOT

__all__ = ["CONFIG_DIR", "load", "parameter_overrides", "merge", "read_yaml_file", "bounded_yaml", "check_counts"]

CONFIG_DIR = REPO_ROOT / "notebooks" / "configs"
MAX_DEPTH = 50  # mappings and lists inside each other: the shipped configs are 4 deep
# The largest count of each kind a config may ask for (a full run trains 5,000 steps of 16,384): past it, a typo.
MAX_COUNT = {"steps": 10**7, "warmup_steps": 10**7, "eval_every": 10**7, "batch_size": 10**6,
             "micro_batch_size": 10**6}


def _scan(text: str, where: str) -> None:
    """One pass over ``text``'s YAML events, before anything is built: refuse a key written twice in one mapping and
    nesting past :data:`MAX_DEPTH`. It stops at the first problem; a text that is not YAML is left to ``safe_yaml``."""
    frames: list[list] = []  # per open collection: [a mapping?, a key comes next?, the keys seen]
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionEndEvent):
                frames.pop()
            if not isinstance(event, yaml.NodeEvent):
                continue
            if frames and frames[-1][0]:
                mapping = frames[-1]
                if mapping[1] and isinstance(event, yaml.ScalarEvent):
                    if event.value in mapping[2]:
                        raise ConfigError(f"{where}: key {event.value!r} is written twice in one mapping (line "
                                          f"{event.start_mark.line + 1}); YAML would keep the last without a word: "
                                          "write it once")
                    mapping[2].add(event.value)
                mapping[1] = not mapping[1]
            if isinstance(event, yaml.CollectionStartEvent):
                frames.append([isinstance(event, yaml.MappingStartEvent), True, set()])
                if len(frames) > MAX_DEPTH:
                    raise ConfigError(f"{where}: YAML nested more than {MAX_DEPTH} levels deep (line "
                                      f"{event.start_mark.line + 1}); a config is a few levels deep: a bracket left "
                                      "open?")
    except yaml.YAMLError:
        return


def bounded_yaml(text: str, where: str, limit: int = MAX_PARAMETER_CHARS) -> Any:
    """``lib.core.config.safe_yaml`` (refused past ``limit`` characters or with an alias) of a text that has passed
    :func:`_scan` (no key twice in a mapping, no nesting past :data:`MAX_DEPTH`)."""
    if len(text) <= limit:
        _scan(text, where)
    return safe_yaml(text, where, limit)


def check_counts(config: Any, where: str) -> None:
    """Refuse a count past :data:`MAX_COUNT` anywhere in a built config: ``steps: 1000000000000`` is a positive
    integer to the schema, and a run would take it literally."""
    if dataclasses.is_dataclass(config):
        for field in dataclasses.fields(config):
            value, most = getattr(config, field.name), MAX_COUNT.get(field.name)
            if most and isinstance(value, int) and not isinstance(value, bool) and value > most:
                raise ConfigError(f"{where}.{field.name}: {bounded_repr(value)} is not allowed; expected a positive "
                                  f"integer up to {most:,}")
            check_counts(value, f"{where}.{field.name}")
    elif isinstance(config, (tuple, list)):
        for i, value in enumerate(config):
            check_counts(value, f"{where}[{i}]")


def read_yaml_file(path: Path) -> Any:
    size = Path(path).stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path}: {size:,} bytes is more than the {MAX_CONFIG_BYTES:,} a config may have")
    return bounded_yaml(Path(path).read_text(encoding="utf-8"), f"config file {path}", limit=MAX_CONFIG_BYTES)


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
    config = build(schema, merge(data, overrides or {}), where=name)
    check_counts(config, name)
    return config


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
        return bounded_yaml(value, f"parameter {name}") if isinstance(value, str) else value

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

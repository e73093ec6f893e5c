"""A chapter's config: a section (``small``, ``medium``, ``full``) of ``notebooks/configs/<chapter>.yaml``, validated
against the chapter's schema, with a notebook's papermill parameters merged over it.

Why here: the files are the book's; the validation (one line naming the field) is the library's
(:mod:`lib.core.config`). See notebooks/sharelock.py, section "Configuration".
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lib.core.config import MAX_CONFIG_BYTES, ConfigError, bounded_repr, build, safe_yaml
from lib.core.paths import REPO_ROOT

__all__ = ["CONFIG_DIR", "load", "parameter_overrides", "merge", "read_yaml_file"]

CONFIG_DIR = REPO_ROOT / "notebooks" / "configs"


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

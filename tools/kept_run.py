"""Run a chapter in the config the book shows it in, in one fixed arithmetic, and keep the run's metrics beside the
shown run's: the other half of the results page's "Do the verdicts survive a change of arithmetic?" table.

    python -m tools.kept_run --chapter viterb --arithmetic float32    # -> book/metrics/float32/viterb.json
    python -m tools.kept_run --chapter sharelock --arithmetic bfloat16 --dry-run   # print the papermill command

Why a command: a kept run must differ from the shown run in the number formats only (the page passes over a kept
run whose settings differ in anything else: ``tools.results_page.arithmetic_pairs``), so its overrides are derived
from the shown config rather than written by hand: every ``dtype: auto`` becomes ``float32`` or ``bfloat16`` and
every ``precision: auto`` ``fp32`` or ``bf16``; explicit settings (a tower held in fp32, a third tower held in
float32) stay as the config says. The notebook, made from the chapter's ``.py`` source, runs with papermill into
``--out`` (a scratch folder; the committed notebook is not touched), then its ``metrics.json`` is copied into
``book/metrics/<arithmetic>/``, but only once it parses, has the chapters' schema and holds claims the rule could
have produced (:func:`keep`): a truncated or damaged file never replaces a good kept run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from lib.core import atomic
from tools.run_notebooks import KERNEL, ROOT, config_section, shown_configs

KEPT = ROOT / "book" / "metrics"  # <arithmetic>/<chapter>.json: the kept runs that tools.results_page reads
FORMATS = {"float32": {"dtype": "float32", "precision": "fp32"},
           "bfloat16": {"dtype": "bfloat16", "precision": "bf16"}}


def fixed_arithmetic(settings, arithmetic: str):
    """``settings`` (a config section, as YAML reads it), every ``auto`` number format resolved to ``arithmetic``."""
    formats = FORMATS[arithmetic]
    if isinstance(settings, dict):
        return {key: formats[key] if key in formats and value == "auto" else fixed_arithmetic(value, arithmetic)
                for key, value in settings.items()}
    if isinstance(settings, list):
        return [fixed_arithmetic(value, arithmetic) for value in settings]
    return settings


def overrides(section: dict, arithmetic: str) -> dict:
    """The top-level keys of ``section`` that :func:`fixed_arithmetic` changes, each given whole (a config override
    replaces a list whole, so a list of model entries must be given entire)."""
    fixed = fixed_arithmetic(section, arithmetic)
    return {key: fixed[key] for key in section if fixed[key] != section[key]}


def source_notebook(chapter: str, out: Path) -> Path:
    """Where the kept run's input notebook is written: ``<out>/<chapter>.source.ipynb``, made from the chapter's
    ``.py`` source (jupytext) when the run starts. Why not the committed ``.ipynb``: a chapter whose source changed is
    re-executed and kept in the other arithmetic side by side, and the kept run must run the new source."""
    return out / f"{chapter}.source.ipynb"


def command(chapter: str, arithmetic: str, out: Path) -> list[str]:
    """The papermill command line of the kept run."""
    config = shown_configs()[chapter]
    section = json.loads(config_section(ROOT / "notebooks" / f"{chapter}.py", config))
    changes = overrides(section, arithmetic)
    if not changes:
        raise SystemExit(f"{chapter}'s {config} config names no `auto` number format: its runs are in one arithmetic "
                         "whatever the machine, so there is no other arithmetic to keep")
    papermill = str(Path(sys.executable).with_name("papermill"))
    return [papermill, str(source_notebook(chapter, out)), str(out / f"{chapter}.ipynb"), "-k", KERNEL,
            "--cwd", str(ROOT), "-p", "config", config, "-p", "output_dir", str(out),
            "-p", "overrides", yaml.safe_dump(changes, default_flow_style=True, width=10_000).strip()]


def keep(chapter: str, arithmetic: str, written: Path) -> Path:
    """Copy ``written`` (the run's metrics.json) to ``KEPT/<arithmetic>/<chapter>.json``, atomically, once it is
    valid JSON in ``chapters.metrics``' schema whose claims pass ``tools.results_page.check_claims``; otherwise exit
    with one line naming the file and what is wrong, and the kept run as it was."""
    from chapters.metrics import validate_metrics
    from tools.results_page import parse_metrics

    kept = KEPT / arithmetic / f"{chapter}.json"
    data = written.read_bytes()
    try:
        validate_metrics(parse_metrics(data.decode("utf-8"), written))
    except (ValueError, UnicodeDecodeError) as error:  # BadMetrics is a ValueError
        problem = str(error) if str(error).startswith(str(written)) else f"{written}: {error}"
        raise SystemExit(f"{problem} ({kept} was not replaced)") from None
    atomic.write_bytes(kept, data)  # a kept run is whole or absent
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapter", required=True, choices=sorted(shown_configs()))
    parser.add_argument("--arithmetic", required=True, choices=sorted(FORMATS))
    parser.add_argument("--out", type=Path, help="the scratch folder for the executed notebook (default: a new "
                        "temporary folder)")
    parser.add_argument("--dry-run", action="store_true", help="print the papermill command and stop")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"kept-{args.chapter}-"))
    line = command(args.chapter, args.arithmetic, out)
    if args.dry_run:
        print(" ".join(line))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    import jupytext

    jupytext.write(jupytext.read(ROOT / "notebooks" / f"{args.chapter}.py"), source_notebook(args.chapter, out))
    stale = out / "metrics.json"
    if stale.exists():
        stale.unlink()  # so that a failed run cannot leave an earlier metrics.json to be copied
    subprocess.run(line, check=True, env={**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")})
    if not stale.is_file():
        raise SystemExit(f"{args.chapter} ran but wrote no {stale}: its last cells write metrics.json")
    kept = keep(args.chapter, args.arithmetic, stale)
    print(f"kept {kept} (executed notebook: {out / (args.chapter + '.ipynb')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

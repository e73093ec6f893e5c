"""tools.kept_run: a chapter's run in one fixed arithmetic differs from the shown config in the number formats only,
so the results page pairs it with the shown run (tools.results_page.arithmetic_pairs)."""
from __future__ import annotations

import importlib
import json

import pytest

from chapters import NAMES
from chapters.metrics import json_safe
from tools import kept_run
from tools.results_page import _beyond_arithmetic, arithmetic_of
from tools.run_notebooks import ROOT, config_section, shown_configs


def test_only_auto_formats_change_and_lists_are_given_whole():
    section = {"text": [{"name": "a", "dtype": "auto"}, {"name": "b", "dtype": "float32"}],
               "lit": {"train": {"precision": "fp32", "lr": 1e-4}},
               "train": {"precision": "auto", "steps": 3}, "store": {"dtype": "float16"}}
    assert kept_run.overrides(section, "float32") == {
        "text": [{"name": "a", "dtype": "float32"}, {"name": "b", "dtype": "float32"}],
        "train": {"precision": "fp32", "steps": 3}}
    bf16 = kept_run.overrides(section, "bfloat16")
    assert bf16["text"][0]["dtype"] == "bfloat16" and bf16["train"]["precision"] == "bf16"
    assert "lit" not in bf16 and "store" not in bf16  # explicit formats (a tower held in fp32, the store's) stay


@pytest.mark.parametrize("chapter", list(NAMES))
@pytest.mark.parametrize("arithmetic", ["float32", "bfloat16"])
def test_a_kept_run_differs_from_the_shown_config_in_number_formats_only(chapter, arithmetic):
    config = shown_configs()[chapter]
    section = json.loads(config_section(ROOT / "notebooks" / f"{chapter}.py", config))
    load = importlib.import_module(f"chapters.{chapter}").load_config
    shown, kept = load(config), load(config, kept_run.overrides(section, arithmetic))
    assert _beyond_arithmetic(json_safe(kept)) == _beyond_arithmetic(json_safe(shown))
    assert "auto" not in set(_formats(json_safe(kept)))  # no number format left for the machine to resolve
    # The results page reads the kept run as that arithmetic whatever the machine resolved `auto` to.
    for machine in ({"auto_dtype": "float32", "auto_precision": "fp32"},
                    {"auto_dtype": "bfloat16", "auto_precision": "bf16"}):
        assert arithmetic_of({"settings": json_safe(kept), "arithmetic": machine}) == arithmetic


def _formats(settings):
    """Every value of a ``dtype`` or ``precision`` key in a config, at any depth."""
    if isinstance(settings, dict):
        for key, value in settings.items():
            yield from [value] if key in kept_run.FORMATS["float32"] else _formats(value)
    elif isinstance(settings, list):
        for value in settings:
            yield from _formats(value)


def test_the_command_runs_the_shown_config_into_the_scratch_folder(tmp_path):
    line = kept_run.command("fdt", "float32", tmp_path)
    assert line[line.index("config") + 1] == shown_configs()["fdt"]
    assert line[line.index("output_dir") + 1] == str(tmp_path) and line[2] == str(tmp_path / "fdt.ipynb")
    assert line[1] == str(tmp_path / "fdt.source.ipynb")  # written from notebooks/fdt.py when the run starts
    assert "precision: fp32" in line[line.index("overrides") + 1]


def test_a_sweep_field_recorded_before_it_existed_reads_as_its_default():
    """A kept run written before ``sweep.keep_within_se`` existed ran with its default (0: the best score wins), so
    it still pairs with a shown run that records the default; a non-default value is another experiment."""
    before = {"train": {"precision": "fp32"}, "sweep": {"lr": [1e-3, 3e-3], "weight_decay": [], "extend": 1}}
    now = {"train": {"precision": "bf16"}, "sweep": {**before["sweep"], "keep_within_se": 0.0}}
    assert _beyond_arithmetic(before) == _beyond_arithmetic(now)
    assert _beyond_arithmetic(before) != _beyond_arithmetic({**now, "sweep": {**now["sweep"], "keep_within_se": 2}})
    nested_before, nested_now = {"lit": {"sweep": before["sweep"]}}, {"lit": {"sweep": now["sweep"]}}
    assert _beyond_arithmetic(nested_before) == _beyond_arithmetic(nested_now)

"""Tests of lib.core.config: validated small/full configs, one-line errors naming field and value."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from lib.core import config
from chapters.sharelock import Config as ShareLockConfig
from chapters.configs import CONFIG_DIR, load, parameter_overrides
from lib.core.config import ConfigError, HeadConfig, TextModelConfig, TrainSettings, build

RAW = yaml.safe_load((CONFIG_DIR / "sharelock.yaml").read_text())


def _plain(value):
    """as_dict output with tuples as lists, to compare with what YAML reads."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _subset(built, raw):
    """The built values at exactly the keys the YAML names (defaults fill the rest)."""
    if isinstance(raw, dict):
        return {k: _subset(built[k], v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_subset(b, r) for b, r in zip(built, raw)]
    return built


@pytest.mark.parametrize("section", ["small", "full"])
def test_sections_load_and_keep_every_value(section):
    cfg = load("sharelock", section, ShareLockConfig)
    assert isinstance(cfg, ShareLockConfig)
    built = _plain(config.as_dict(cfg))
    raw = RAW[section]
    assert _subset(built, raw) == _plain(raw)  # nothing dropped or altered on the way
    assert len(cfg.text) == len(raw["text"]) and len(cfg.vision) == len(raw["vision"])
    assert all(isinstance(t, TextModelConfig) for t in cfg.text)
    assert isinstance(cfg.train.lr, float) and isinstance(cfg.seeds, tuple)


def test_small_names_only_offline_models_and_full_names_hub_ids():
    small = load("sharelock", "small", ShareLockConfig)
    full = load("sharelock", "full", ShareLockConfig)
    assert all(m.name.startswith("offline/") for m in (*small.text, *small.vision))
    assert not any(m.name.startswith("offline/") for m in (*full.text, *full.vision))
    assert all("/" in m.name for m in (*full.text, *full.vision))  # owner/name hub ids
    assert small.data.corpus == "emoji" and full.data.corpus == "pairs" and full.data.pairs_dataset


def test_configs_are_frozen_and_hashable():
    cfg = load("sharelock", "small", ShareLockConfig)
    assert hash(cfg.text[0]) == hash(load("sharelock", "small", ShareLockConfig).text[0])
    assert {cfg.text[0]: 1}[dataclasses.replace(cfg.text[0])] == 1  # usable as a cache key
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.steps = 1  # type: ignore[misc]


def _set(path):
    """A mutation of the raw small section at a dotted path with [i] indexing; DELETE removes the key."""

    def apply(data, value):
        keys = path.replace("[", ".").replace("]", "").split(".")
        node = data
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        last = keys[-1]
        if value is DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return apply


class _Delete:
    """Marks a key to remove; its fixed repr keeps the test id the same in every process (pytest-xdist's workers
    must collect identical ids)."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()

BAD_FIELDS = [
    # (path in the raw section, bad value, field path in the message, value as the message shows it)
    ("text[0].pooling", "last-token", "small.text[0].pooling", "'last-token'"),  # wrong Literal
    ("vision[1].library", "keras", "small.vision[1].library", "'keras'"),
    ("train.steps", "many", "small.train.steps", "'many'"),  # wrong type
    ("train.steps", True, "small.train.steps", "True"),  # a bool is not an int
    ("train.steps", 2.5, "small.train.steps", "2.5"),
    ("train.steps", -5, "small.train.steps", "-5"),  # negative steps
    ("train.batch_size", 0, "small.train.batch_size", "0"),
    ("train.lr", 0, "small.train.lr", "0"),
    ("train.lr", "fast", "small.train.lr", "'fast'"),
    ("head.dropout", 1.5, "small.head.dropout", "1.5"),  # dropout outside [0, 1)
    ("head.dropout", -0.1, "small.head.dropout", "-0.1"),
    ("loss.learnable", "yes", "small.loss.learnable", "'yes'"),
    ("seeds", [0, "one"], "small.seeds[1]", "'one'"),
    ("text", "gemma", "small.text", "'gemma'"),  # not a list
    ("data.train_style", "noto", "small.data.train_style", "'noto'"),
    ("store.dtype", "int8", "small.store.dtype", "'int8'"),
    ("text[1].name", "", "small.text[1].name", "''"),  # empty model name
    ("train.stpes", 10, "small.train.stpes", "stpes"),  # unknown field (typo): the name is the value
    ("data.corpus", DELETE, "small.data.corpus", "missing"),  # missing required field
]


@pytest.mark.parametrize("where,value,field,shown", BAD_FIELDS, ids=[f"{b[0]}={b[1]!r}"[:40] for b in BAD_FIELDS])
def test_bad_field_is_one_line_naming_field_and_value(where, value, field, shown):
    data = copy.deepcopy(RAW["small"])
    _set(where)(data, value)
    with pytest.raises(ConfigError) as info:
        build(ShareLockConfig, data, "small")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{field}:"), message  # the full field path, first
    assert shown in message, message
    assert isinstance(info.value, ValueError)


def test_literal_error_lists_what_is_allowed():
    with pytest.raises(ConfigError, match=r"one of 'last_token', 'mean', 'cls'"):
        load("sharelock", "small", ShareLockConfig, {"text": [{"name": "offline/gemma-3-270m", "pooling": "eos"}]})


def test_error_through_overrides_names_the_section():
    with pytest.raises(ConfigError, match=r"^full\.head\.dropout: 1\.5 is not allowed"):
        load("sharelock", "full", ShareLockConfig, {"head": {"dropout": 1.5}})


@pytest.mark.parametrize("override", [
    {"warmup_steps": -1},
    {"grad_clip": 0.0},
    {"batch_size": 256, "micro_batch_size": 512},
])
def test_values_train_rejects_are_rejected_by_the_config(override):
    with pytest.raises(ConfigError, match=r"^small\.train\."):
        load("sharelock", "small", ShareLockConfig, {"train": override})


def test_overrides_merge_nested_without_dropping_siblings():
    base = load("sharelock", "small", ShareLockConfig)
    cfg = load("sharelock", "small", ShareLockConfig, {"train": {"steps": 7}, "data": {"limit": 5}, "device": "cuda"})
    assert cfg.train.steps == 7 and cfg.data.limit == 5 and cfg.device == "cuda"
    assert dataclasses.replace(cfg.train, steps=base.train.steps) == base.train  # siblings unchanged
    assert dataclasses.replace(cfg.data, limit=None) == base.data
    assert (cfg.text, cfg.vision, cfg.head, cfg.loss, cfg.store) == (base.text, base.vision, base.head, base.loss,
                                                                     base.store)


def test_override_of_a_list_replaces_it():
    cfg = load("sharelock", "small", ShareLockConfig,
               {"text": [{"name": "offline/all-MiniLM-L6-v2", "pooling": "mean"}], "seeds": [3]})
    assert cfg.text == (TextModelConfig(name="offline/all-MiniLM-L6-v2", pooling="mean"),)
    assert cfg.seeds == (3,)


def test_overrides_do_not_leak_into_the_next_load():
    load("sharelock", "small", ShareLockConfig, {"train": {"steps": 3}})
    assert load("sharelock", "small", ShareLockConfig).train.steps == RAW["small"]["train"]["steps"]


def test_unknown_section_names_the_known_ones():
    with pytest.raises(ConfigError) as info:
        load("sharelock", "huge", ShareLockConfig)
    assert "'huge'" in str(info.value) and "small" in str(info.value) and "full" in str(info.value)


def test_load_from_a_user_yaml_file(tmp_path):
    variant = copy.deepcopy(RAW["small"])
    variant["head"] = {"hidden_dim": 64, "num_layers": 2, "dropout": 0.0}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(variant))
    cfg = load("sharelock", str(path), ShareLockConfig, {"train": {"steps": 11}})
    assert cfg.head == HeadConfig(hidden_dim=64, num_layers=2, dropout=0.0)
    assert cfg.train.steps == 11


def test_yaml_exponent_strings_become_floats_and_defaults_fill_in():
    # PyYAML reads `1e-3` (no dot) as a string; the schema's float type converts it.
    cfg = build(ShareLockConfig, {
        "data": {"corpus": "emoji"},
        "vision": [{"name": "offline/dinov2-small", "library": "transformers"}],
        "text": [{"name": "offline/gemma-3-270m", "pooling": "last_token"}],
        "train": {"lr": yaml.safe_load("lr: 1e-3")["lr"]},
    })
    assert yaml.safe_load("lr: 1e-3")["lr"] == "1e-3"
    assert cfg.train.lr == pytest.approx(1e-3)
    assert cfg.head == HeadConfig() and cfg.text[0].layer == -1 and cfg.vision[0].image_size is None


@pytest.mark.parametrize("betas, problem", [([0.9], "two numbers"), ([0.9, 1.2], "in [0, 1)"),
                                            ([0.9, 0.9, 0.9], "two")])
def test_betas_are_checked_for_length_and_range_on_load(betas, problem):
    with pytest.raises(ConfigError, match=r"small.train: betas must be two numbers in \[0, 1\)"):
        load("sharelock", "small", ShareLockConfig, {"train": {"betas": betas}})
    assert problem


def test_train_settings_are_one_schema_for_configs_and_fit():
    cfg = load("sharelock", "small", ShareLockConfig, {"train": {"betas": [0.9, 0.95]}})
    assert isinstance(cfg.train, TrainSettings) and cfg.train.betas == (0.9, 0.95)
    with pytest.raises(ValueError, match="micro_batch_size must be between 1 and batch_size=8"):
        TrainSettings(batch_size=8, micro_batch_size=16)


def test_papermill_list_parameters_given_as_strings_are_parsed():
    assert parameter_overrides(seeds="[0, 1]") == {"seeds": [0, 1]}
    assert parameter_overrides(seeds=[2]) == {"seeds": [2]}
    assert parameter_overrides(seeds=3, limit="40") == {"seeds": [3], "data": {"limit": 40}}
    assert parameter_overrides() == {}
    cfg = load("sharelock", "small", ShareLockConfig, parameter_overrides(seeds="[0]"))
    assert cfg.seeds == (0,)
    with pytest.raises(ConfigError, match=r"small.seeds\[0\]: '\[' is not allowed"):
        load("sharelock", "small", ShareLockConfig, {"seeds": list("[0]")})  # what a naive list() did


def test_a_yaml_alias_bomb_in_a_parameter_is_refused_at_once():
    import time

    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"parameter seeds: YAML aliases \(\*name\) are not allowed"):
        parameter_overrides(seeds=bomb)
    assert time.perf_counter() - start < 1.0


def test_a_huge_parameter_or_config_file_is_refused_before_it_is_parsed(tmp_path):
    import time

    with pytest.raises(ConfigError, match=r"parameter overrides: 200,002 characters of YAML is more than"):
        parameter_overrides(overrides="{" + " " * 200_000 + "}")
    big = tmp_path / "mine.yaml"
    big.write_text("seeds: [0]\n# " + "x" * (config.MAX_CONFIG_BYTES + 10) + "\n")
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"mine.yaml: 1,048,\d+ bytes is more than the 1,048,576 a config may have"):
        load("sharelock", str(big), ShareLockConfig)
    assert time.perf_counter() - start < 1.0


def test_an_error_message_never_spells_out_a_huge_value():
    with pytest.raises(ConfigError) as error:
        load("sharelock", "small", ShareLockConfig, {"seeds": [[list(range(1000))] * 1000]})
    assert len(str(error.value)) < 400 and "\n" not in str(error.value)


@pytest.mark.parametrize("seeds, problem", [([0, 1, 0], r"seeds: 0 appears more than once"),
                                            ([0, -1], r"seeds: -1 is not allowed; expected integers in "
                                                      r"\[0, 4294967295\]"),
                                            ([2**40], r"seeds: 1099511627776 is not allowed")])
def test_repeated_or_absurd_seeds_are_refused_in_one_line(seeds, problem):
    with pytest.raises(ConfigError, match=problem):
        load("sharelock", "small", ShareLockConfig, parameter_overrides(seeds=str(seeds)))

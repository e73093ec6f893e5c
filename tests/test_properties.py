"""Property tests (hypothesis): cache keys, the CLIP loss, pooling, the store round trip, the config loader.

Each property is checked on 50 generated cases (``settings(max_examples=50, deadline=None)``); a
failure prints the smallest case hypothesis could shrink it to. The example-based tests of the same
modules (tests/test_store.py, test_losses.py, test_encoders.py, test_config.py) stay the reference
for exact values; these check what must hold for *every* input.
"""
from __future__ import annotations

from chapters import configs as chapter_configs

import copy
import math
import re
import tempfile
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lib.core import store
from chapters.sharelock import Config as ShareLockConfig
from lib.core.config import ConfigError, build
from lib.core.encoders import first_token_index, last_token_index, pool
from lib.nn.losses import clip_loss
from lib.core.store import FeatureStore, spec_key

# derandomize: the same 50 cases on every run (a reproducible CI); database=None: nothing written to the repo.
FAST = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------------ cache keys

hexes = st.text("0123456789abcdef", min_size=8, max_size=64)
json_scalars = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)

specs = st.fixed_dictionaries({
    "model": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=30), "revision": st.none() | hexes,
                                    "sha256": hexes}),
    "layer": st.integers(-1, 80),
    "pooling": st.sampled_from(["last_token", "mean", "cls", "prompt_token"]),
    "template": st.text(max_size=40),
    "dtype": st.sampled_from(["float32", "float16", "bfloat16"]),
    "preprocessing": st.fixed_dictionaries({
        "input_size": st.lists(st.integers(1, 1024), min_size=3, max_size=3),
        "crop_pct": st.floats(0.05, 1.0), "interpolation": st.sampled_from(["bicubic", "bilinear"]),
        "mean": st.lists(st.floats(0, 1), min_size=3, max_size=3)}),
    "manifest_sha256": hexes,
})


def leaf_paths(value, prefix=()):
    """Every path into a spec (dict keys and list indices), inner nodes included."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += leaf_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += leaf_paths(v, (*prefix, i))
    return out


def get_at(tree, path):
    for p in path:
        tree = tree[p]
    return tree


def typed_equal(a, b) -> bool:
    """JSON equality that tells 1, 1.0 and True apart (they are different JSON, so different keys)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(typed_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(typed_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def shuffled(value, rnd):
    """The same JSON with every dict's insertion order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


@FAST
@given(spec=specs, rnd=st.randoms(use_true_random=False))
def test_equal_specs_in_any_dict_order_give_the_same_key(spec, rnd):
    other = shuffled(copy.deepcopy(spec), rnd)
    assert other == spec
    assert spec_key(other) == spec_key(spec)


@FAST
@given(spec=specs, data=st.data())
def test_changing_any_field_of_a_spec_gives_a_new_key(spec, data):
    path = data.draw(st.sampled_from(leaf_paths(spec)), label="path")
    new = data.draw(json_values, label="new value")
    assume(not typed_equal(get_at(spec, path), new))
    changed = copy.deepcopy(spec)
    get_at(changed, path[:-1])[path[-1]] = new
    assert spec_key(changed) != spec_key(spec)


@FAST
@given(spec=specs, data=st.data())
def test_removing_or_renaming_a_field_gives_a_new_key(spec, data):
    dict_paths = [p for p in leaf_paths(spec) if isinstance(p[-1], str)]
    path = data.draw(st.sampled_from(dict_paths), label="path")
    removed = copy.deepcopy(spec)
    parent = get_at(removed, path[:-1])
    value = parent.pop(path[-1])
    assert spec_key(removed) != spec_key(spec)
    new_name = data.draw(st.text(max_size=8).filter(lambda k: k not in parent), label="new name")
    parent[new_name] = value
    assert spec_key(removed) != spec_key(spec)


# ------------------------------------------------------------------------------------------ CLIP loss

def unit_pairs(n, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=-1),
            F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=-1))


scales = st.floats(1e-3, 1e4) | st.sampled_from([1.0, 100.0, 1e4])


@FAST
@given(n=st.integers(1, 12), d=st.integers(1, 16), seed=st.integers(0, 2**31), scale=scales)
def test_clip_loss_is_symmetric_under_swapping_modalities(n, d, seed, scale):
    a, b = unit_pairs(n, d, seed)
    torch.testing.assert_close(clip_loss(a, b, scale), clip_loss(b, a, scale), rtol=1e-9, atol=1e-9 * scale)


@FAST
@given(n=st.integers(1, 12), d=st.integers(1, 16), seed=st.integers(0, 2**31), scale=scales,
       perm_seed=st.integers(0, 2**31))
def test_clip_loss_is_invariant_to_permuting_the_pairs_jointly(n, d, seed, scale, perm_seed):
    a, b = unit_pairs(n, d, seed)
    p = torch.randperm(n, generator=torch.Generator().manual_seed(perm_seed))
    torch.testing.assert_close(clip_loss(a[p], b[p], scale), clip_loss(a, b, scale), rtol=1e-9, atol=1e-9 * scale)


@FAST
@given(n=st.integers(1, 64), d=st.integers(1, 32), seed=st.integers(0, 2**31),
       scale=st.floats(1.0, 1e4) | st.just(1e4), duplicate=st.booleans())
def test_clip_loss_and_its_gradient_are_finite_for_extreme_logit_scales(n, d, seed, scale, duplicate):
    a, b = unit_pairs(n, d, seed, dtype=torch.float32)
    if duplicate:  # identical rows: ties at the largest logit
        a, b = a[:1].expand(n, d).clone(), b[:1].expand(n, d).clone()
    a.requires_grad_(True)
    b.requires_grad_(True)
    log_scale = torch.tensor(math.log(scale), requires_grad=True)
    loss = clip_loss(a, b, log_scale.exp())
    loss.backward()
    assert torch.isfinite(loss) and loss >= -1e-4 * scale / 1e4
    assert all(torch.isfinite(t.grad).all() for t in (a, b, log_scale))


# ------------------------------------------------------------------------------------------ pooling

@st.composite
def padded_batches(draw):
    b, t, d = draw(st.integers(1, 6)), draw(st.integers(1, 10)), draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, t), min_size=b, max_size=b))
    sides = draw(st.lists(st.sampled_from(["left", "right"]), min_size=b, max_size=b))
    mask = torch.zeros(b, t, dtype=torch.long)
    for i, (n, side) in enumerate(zip(lengths, sides)):
        mask[i, :n] = 1 if side == "right" else 0
        if side == "left":
            mask[i, t - n:] = 1
    mask = mask.to(draw(st.sampled_from([torch.long, torch.int32, torch.bool])))
    hidden = torch.randn(b, t, d, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31))),
                         dtype=torch.float64)
    return hidden, mask


@FAST
@given(batch=padded_batches(), junk=st.floats(-1e30, 1e30))
def test_pooling_matches_a_reference_under_any_padding_side_and_length_mix(batch, junk):
    hidden, mask = batch
    real = [[j for j in range(mask.shape[1]) if mask[i, j]] for i in range(mask.shape[0])]
    assert last_token_index(mask).tolist() == [r[-1] for r in real]
    assert first_token_index(mask).tolist() == [r[0] for r in real]
    last = torch.stack([hidden[i, r[-1]] for i, r in enumerate(real)])
    first = torch.stack([hidden[i, r[0]] for i, r in enumerate(real)])
    mean = torch.stack([hidden[i, r].sum(0) / len(r) for i, r in enumerate(real)])
    # whatever sits at padded positions (here: any value) never reaches the pooled vector
    noisy = hidden.masked_fill(~mask.bool().unsqueeze(-1), junk)
    for h in (hidden, noisy):
        assert torch.equal(pool(h, mask, "last_token"), last)
        assert torch.equal(pool(h, mask, "cls"), first)
    torch.testing.assert_close(pool(hidden, mask, "mean"), mean, rtol=1e-12, atol=1e-12)
    if abs(junk) < 1e15:  # huge junk times a 0 mask is still 0, but (x * 0).sum may round differently
        torch.testing.assert_close(pool(noisy, mask, "mean"), mean, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------ store round trip

@st.composite
def stored_arrays(draw):
    dtype = draw(st.sampled_from(["float16", "float32"]))
    rows, dim = draw(st.integers(1, 50)), draw(st.integers(1, 20))
    bound = 6e4 if dtype == "float16" else 2.0**127  # float16 tops out at 65504 (more is an error, tested elsewhere)
    elements = st.floats(-bound, bound, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)
    x = draw(arrays(np.float32, (rows, dim), elements=elements))
    return dtype, x, draw(st.integers(1, 7))


@FAST
@given(case=stored_arrays(), as_tensor=st.booleans())
def test_store_round_trip_is_bit_exact_for_any_shape_dtype_and_shard_size(case, as_tensor):
    dtype, x, shard_rows = case
    ids = [f"r{i}" for i in range(len(x))]
    expected = x.astype(dtype)

    def compute(rows):
        out = x[rows]
        return torch.from_numpy(out.copy()) if as_tensor else out

    with tempfile.TemporaryDirectory() as root, mock.patch.object(store.os, "fsync", lambda fd: None):
        res = FeatureStore(root, dtype=dtype, shard_rows=shard_rows).get_or_compute(
            {"case": "round trip"}, ids, compute, progress=False)
        assert len(res.shards) == -(-len(x) // shard_rows) and res.ids == ids and res.dim == x.shape[1]
        assert res.numpy(np.dtype(dtype)).tobytes() == expected.tobytes()
        again = FeatureStore(root, dtype=dtype, shard_rows=shard_rows, verify="always").open({"case": "round trip"})
        assert again.numpy(np.dtype(dtype)).tobytes() == expected.tobytes()
        assert np.concatenate(again.shard_arrays()).tobytes() == expected.tobytes()
        assert again.tensor().numpy().tobytes() == expected.astype(np.float32).tobytes()


# ------------------------------------------------------------------------------------------ config loader

RAW = yaml.safe_load((chapter_configs.CONFIG_DIR / "sharelock.yaml").read_text())
# What a YAML file can hold: scalars, lists, mappings -- short of the known gaps at the end of this file
# (unbounded integers, non-string keys, nan/inf), which have their own strict-xfail tests.
yaml_scalars = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10)
                | st.sampled_from(["", "1e-3", "last-token", "float16", "null", "-1", "0"]))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


def _field(path) -> str:
    out = "small"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _parent(field: str) -> str:
    return re.sub(r"(\.[^.\[\]]*|\[\d+\])$", "", field)


@st.composite
def malformed_configs(draw):
    data = copy.deepcopy(RAW["small"])
    paths = leaf_paths(data)
    kind = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
    if kind == "replace":
        path = draw(st.sampled_from(paths))
        get_at(data, path[:-1])[path[-1]] = draw(yaml_values)
    elif kind == "delete":
        path = draw(st.sampled_from([p for p in paths if isinstance(p[-1], str)]))
        del get_at(data, path[:-1])[path[-1]]
    else:
        parent = draw(st.sampled_from([()] + [p for p in paths if isinstance(get_at(data, p), dict)]))
        key = draw(st.text(min_size=1, max_size=8))
        assume(key not in get_at(data, parent))
        get_at(data, parent)[key] = draw(yaml_values)
        path = (*parent, key)
    return data, _field(path)


@FAST
@given(case=malformed_configs())
def test_any_malformed_config_is_one_config_error_line_naming_the_field(case):
    data, field = case
    try:
        build(ShareLockConfig, data, "small")
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message, message
        named = message.split(": ", 1)[0]
        # the field itself, something inside it, a sibling (cross-field checks), or its parent mapping
        assert (named == field or named.startswith((field + ".", field + "["))
                or _parent(named) == _parent(field) or named == _parent(field)), (field, message)
    # no other exception type may escape (hypothesis reports it with the input); a valid junk value is fine


@pytest.mark.parametrize("junk", [None, 0, "", [], "small", [1, 2]])
def test_a_section_that_is_not_a_mapping_is_a_config_error(junk):
    with pytest.raises(ConfigError, match=r"^small: expected a mapping"):
        build(ShareLockConfig, junk, "small")


# Gaps in lib/core/config.py that the property above finds when its strategies are widened to every YAML
# value (unbounded integers; mapping keys that are not strings; nan/inf). Strict xfails: each turns
# red once lib/core/config.py is fixed; then drop its mark, and widen `yaml_scalars` to `st.integers()`
# plus `st.floats()` and the dictionary keys of `yaml_values` to `yaml_scalars`.
def _small(**changes):
    data = copy.deepcopy(RAW["small"])
    for section, values in changes.items():
        data[section].update(values)
    return data


def test_a_huge_integer_for_a_float_field_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^small\.train\.lr: "):
        build(ShareLockConfig, _small(train={"lr": 10**400}), "small")


def test_unknown_keys_of_mixed_types_are_a_config_error():
    with pytest.raises(ConfigError, match=r"^small\.train\."):
        build(ShareLockConfig, _small(train={1: "a", "stpes": 2}), "small")


@pytest.mark.parametrize("section,values", [("train", {"lr": "nan"}), ("train", {"lr": float("inf")}),
                                            ("loss", {"temperature": float("nan")}),
                                            ("train", {"grad_clip": float("nan")})])
def test_nan_or_inf_for_a_float_field_is_a_config_error(section, values):
    with pytest.raises(ConfigError, match=rf"^small\.{section}\.{next(iter(values))}: "):
        build(ShareLockConfig, _small(**{section: values}), "small")

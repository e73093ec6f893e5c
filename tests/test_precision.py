"""``dtype: auto`` and ``precision: auto`` (lib.core.precision): bfloat16 exactly where the machine runs it fast,
and the keys of the feature store and the run cache name the resolved format, never ``auto``."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from conftest import TEXT_MODELS
from lib.core import features, precision, run_cache
from lib.core.config import TextModelConfig, TrainSettings, VisionModelConfig
from lib.core.store import spec_key
from lib.core.train import fit
from lib.nn.heads import LinearHead

FLAGS = "processor\t: 0\nflags\t\t: fpu sse2 avx2 {extra}\nmodel name\t: a CPU\n"


@pytest.mark.parametrize("extra, units", [("", ()), ("avx512_bf16", ("avx512_bf16",)),
                                          ("amx_tile amx_bf16 avx512_bf16", ("amx_bf16", "avx512_bf16"))])
def test_the_bf16_units_are_read_from_the_cpuinfo_flags(tmp_path, extra, units):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(FLAGS.format(extra=extra))
    assert precision.cpu_bf16_units(cpuinfo) == units
    assert precision.cpu_bf16_units(tmp_path / "absent") == ()  # off Linux: no units, so auto means float32


@pytest.mark.parametrize("fast", [True, False])
def test_auto_resolves_to_bfloat16_only_where_it_is_fast(monkeypatch, fast):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda *_: ("amx_bf16",) if fast else ())
    assert precision.resolve_dtype("auto") == ("bfloat16" if fast else "float32")
    assert precision.resolve_precision("auto") == ("bf16" if fast else "fp32")
    assert precision.resolve_dtype("auto", backend="onnx") == "float32"  # ONNX Runtime runs float32 graphs
    assert precision.resolve_dtype("auto", "mps") == "float32"
    for fixed in ("float32", "float16", "bfloat16"):  # an explicit choice is never changed
        assert precision.resolve_dtype(fixed) == fixed
    assert precision.resolve_precision("fp32") == "fp32" and precision.resolve_precision("bf16") == "bf16"


@pytest.mark.parametrize("fast", [True, False])
def test_the_store_key_names_the_resolved_dtype_not_auto(monkeypatch, fast):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda *_: ("amx_bf16",) if fast else ())
    minilm = TEXT_MODELS["minilm"]

    def key(dtype):
        cfg = TextModelConfig(**{**minilm, "dtype": dtype})
        request = features.text(cfg, ["a cat", "a dog"], source={"dataset": "toy"}, name="captions")
        return features.spec_of(request)

    auto = key("auto")
    assert auto["dtype"] == ("bfloat16" if fast else "float32")
    assert spec_key(auto) == spec_key(key(auto["dtype"]))  # the same features as the explicit dtype ...
    assert spec_key(auto) != spec_key(key("float32" if fast else "bfloat16"))  # ... and never the other's


def test_the_configs_accept_auto_and_reject_other_names():
    assert TextModelConfig(name="m", pooling="mean", dtype="auto").dtype == "auto"
    assert VisionModelConfig(name="m", library="timm", dtype="auto").dtype == "auto"
    assert TrainSettings(precision="auto").precision == "auto"
    with pytest.raises(ValueError, match="'auto' \\(bf16 where bfloat16 is fast\\)"):
        TrainSettings(precision="automatic")


class Pairs(torch.nn.Module):
    """A linear map trained to put paired rows together (a method defined in a test, so its runs are not cached
    by key: only the resolved settings are checked here)."""

    def __init__(self):
        super().__init__()
        self.head = LinearHead(4, 4)

    def loss(self, batch):
        return (self.head(batch["x"]) - batch["y"]).pow(2).mean()


@pytest.mark.parametrize("fast", [True, False])
def test_fit_trains_in_the_resolved_precision_and_records_it(monkeypatch, fast):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda *_: ("amx_bf16",) if fast else ())
    seen = []
    monkeypatch.setattr(run_cache, "key_or_none", lambda method, train, val, settings, *a: seen.append(settings))
    data = {"x": torch.randn(32, 4, generator=torch.Generator().manual_seed(0)),
            "y": torch.randn(32, 4, generator=torch.Generator().manual_seed(1))}
    dtypes = []
    method = Pairs()
    method.head.proj.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    settings = TrainSettings(steps=3, batch_size=8, warmup_steps=0, precision="auto")
    result = fit(method, data, None, settings, progress=False)
    resolved = "bf16" if fast else "fp32"
    assert [s.precision for s in seen] == [resolved], "the run is keyed by the resolved precision"
    assert result.settings == dataclasses.replace(settings, precision=resolved)
    assert set(dtypes) == {torch.bfloat16 if fast else torch.float32}


@pytest.mark.parametrize("fast", [True, False])
def test_every_encoder_loads_its_weights_in_the_resolved_dtype(monkeypatch, fast):
    """``auto`` must reach the loader as a real dtype (the facet encoder once passed the word ``auto`` on)."""
    from lib.core.encoders import TextEncoder
    from lib.core.facets import FacetEncoder

    monkeypatch.setattr(precision, "cpu_bf16_units", lambda *_: ("amx_bf16",) if fast else ())
    expected = torch.bfloat16 if fast else torch.float32
    smollm2 = TEXT_MODELS["smollm2"]["name"]
    for encoder in (TextEncoder(smollm2, pooling="last_token", dtype="auto"),
                    FacetEncoder(smollm2, facets=["this image description"], dtype="auto")):
        assert encoder.model.dtype == expected
        assert encoder.cache_spec()["dtype"] == str(expected).removeprefix("torch.")


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/cpuinfo").is_file(), reason="needs root and Linux's /proc")
def test_as_avx2_only_resolves_auto_to_float32_and_holds_torch_to_avx2():
    """tools/as_avx2_only.sh: what README's budget for a CPU without bfloat16 units is measured with."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    probe = ("from lib.core.precision import cpu_bf16_units, resolve_dtype, resolve_precision; import torch; "
             "print(cpu_bf16_units(), resolve_dtype('auto'), resolve_precision('auto'), "
             "torch.backends.cpu.get_cpu_capability())")
    done = subprocess.run(["bash", str(root / "tools" / "as_avx2_only.sh"), sys.executable, "-c", probe], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    units, dtype, train, capability = done.stdout.split()
    assert (units, dtype, train) == ("()", "float32", "fp32") and capability in ("AVX2", "DEFAULT")

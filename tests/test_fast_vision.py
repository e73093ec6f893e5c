"""The fast CPU vision path (ONNX Runtime, ``lib.core.onnx_vision``) gives the eager features.

Tolerance, stated once: on real images (emoji drawings and scikit-image photos) every feature of the
ONNX backend is within ``MAX_ABS`` of the eager one (features are O(1)-O(10) in size; measured ~1e-5)
and every row has cosine similarity above ``MIN_COSINE``. Not bit-identical (other kernels, other
summation order), hence the backend is part of the store key.
"""
from __future__ import annotations

import pytest
import torch

from lib.core.encoders import VisionEncoder
from lib.core.store import spec_key
from tests.conftest import VISION_MODELS

MAX_ABS = 1e-4
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def real_images(emoji_images):
    from skimage import data

    from PIL import Image

    return emoji_images + [Image.fromarray(data.chelsea()), Image.fromarray(data.coffee())]


@pytest.mark.parametrize("vision_encoder", ["efficientnet", "dinov2"], indirect=True)
def test_onnx_features_match_eager(vision_encoder, real_images, single_thread, request):
    kwargs = dict(VISION_MODELS[request.node.callspec.params["vision_encoder"]])
    fast = VisionEncoder(kwargs.pop("name"), backend="onnx", **kwargs)
    eager, onnx = vision_encoder.encode(real_images, progress=False), fast.encode(real_images, progress=False)
    assert onnx.shape == eager.shape == (len(real_images), vision_encoder.dim)
    assert float((onnx - eager).abs().max()) < MAX_ABS
    assert float(torch.nn.functional.cosine_similarity(onnx, eager).min()) > MIN_COSINE
    # a batch of another size than the export's example runs too (the batch axis is dynamic)
    assert torch.allclose(fast.encode(real_images[:3], progress=False), onnx[:3], atol=1e-5)


def test_backend_is_part_of_the_store_key(efficientnet):
    kwargs = dict(VISION_MODELS["efficientnet"])
    fast = VisionEncoder(kwargs.pop("name"), backend="onnx", **kwargs)
    assert fast.cache_spec()["backend"] == "onnx" and "backend" not in efficientnet.cache_spec()
    assert spec_key(fast.cache_spec()) != spec_key(efficientnet.cache_spec())


def test_unknown_backend_and_onnx_off_cpu_are_refused():
    kwargs = dict(VISION_MODELS["efficientnet"])
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match="backend"):
        VisionEncoder(name, backend="tensorrt", **kwargs)
    with pytest.raises(ValueError, match="CPU"):
        VisionEncoder(name, backend="onnx", device="cuda", **kwargs)


def test_the_encoder_pool_keeps_eager_and_onnx_encoders_apart(efficientnet):
    from lib.core import features
    from lib.core.config import VisionModelConfig

    cfg = VisionModelConfig(**VISION_MODELS["efficientnet"])
    pool = features.EncoderPool()
    pool._encoders[(cfg, "cpu", "eager")] = efficientnet
    fast = pool.get(cfg, backend="onnx")
    assert pool.get(cfg) is efficientnet and fast is not efficientnet
    assert fast.backend == "onnx" and pool.get(cfg, backend="onnx") is fast

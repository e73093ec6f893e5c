"""One training loop for every method in the book.

Every method trains on *cached* features (or pixels), so the loop can be simple: each batch is a slice of a seeded
random permutation (:func:`lib.core.rows.step_indices`), one optimiser step per batch. The training rows stay
resident as tensors on the device while they fit (the fast path), or are read from the store's shards as the loop
needs them (``lib.core.rows.StoreRows``: the streamed path), in the same order, so both give the same run. A
*method* is any ``nn.Module`` with ``loss(batch: dict[str, Tensor]) -> Tensor`` (a scalar). See
notebooks/sharelock.py, section "Training the head", for the narrative. Gradient accumulation and several
processes (DDP, gathered negatives) are explained in book/scale_out.md.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from lib.core import distributed, paths, run_cache
from lib.core.rows import StepSampler, loader, step_indices, take
from lib.core.config import TrainSettings
from lib.core.precision import resolve_precision

__all__ = ["TrainSettings", "TrainResult", "fit", "seed_everything", "cosine_with_warmup"]


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (all devices).

    Call it before building the model so that its initial weights depend on the seed only; see
    notebooks/sharelock.py, section "Training the head"."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def cosine_with_warmup(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate multiplier after ``step`` optimiser steps (0-based): linear warm-up from 0, then
    half a cosine down to 0, as HF ``get_cosine_schedule_with_warmup`` (ShareLock's official code)."""
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    progress = float(step - warmup_steps) / float(max(1, total_steps - warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


@dataclass
class TrainResult:
    """What :func:`fit` did.

    ``history`` has one dict per optimiser step: ``step`` (1-based), ``lr``, ``train_loss``, ``grad_norm`` (before
    clipping) and ``val_loss`` (None when not evaluated). ``negatives_per_loss``: how many negatives each
    contrastive loss saw. ``best_step``/``best_val_loss`` are None without a validation set.
    """

    history: list[dict[str, Any]]
    best_step: int | None
    best_val_loss: float | None
    stopped_early: bool
    steps_run: int
    negatives_per_loss: int
    seconds: float
    batch_size: int = 0
    micro_batch_size: int = 0
    settings: TrainSettings | None = field(default=None, repr=False)
    world_size: int = 1
    seed: int = 0
    device: str = "cpu"
    cached: bool = False  # read from the run cache (lib.core.run_cache): ``seconds`` is the original run's

    def history_frame(self):
        """The history as a pandas DataFrame (one row per step), for tables and plots."""
        import pandas as pd

        return pd.DataFrame(self.history, columns=["step", "lr", "train_loss", "grad_norm", "val_loss"])


def _num_rows(features: dict[str, torch.Tensor], name: str) -> int:
    if not isinstance(features, dict) or not features:
        raise ValueError(f"{name} must be a non-empty dict of tensors, got {type(features).__name__}")
    sizes = {}
    for key, value in features.items():
        streamed = not isinstance(value, torch.Tensor) and callable(getattr(value, "__getitem__", None)) \
            and callable(getattr(value, "__len__", None))
        if not streamed and (not isinstance(value, torch.Tensor) or value.ndim < 1):
            raise ValueError(f"{name}[{key!r}] must be a tensor with a batch dimension, or rows read by index "
                             "(lib.core.rows.StoreRows)")
        sizes[key] = len(value)
    if len(set(sizes.values())) != 1:
        raise ValueError(f"all {name} tensors must have the same number of rows, got {sizes}")
    n = next(iter(sizes.values()))
    if n < 1:
        raise ValueError(f"{name} has no rows")
    return n


def _as_scalar_loss(loss: Any) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(f"method.loss(batch) must return a scalar tensor, got {shape}")
    return loss


def _progress_default() -> bool:
    return not paths.quiet()


@torch.no_grad()
def _validation_loss(method: nn.Module, val: dict[str, torch.Tensor], n_val: int, batch_size: int) -> float:
    """Mean loss over consecutive full validation batches, in eval mode.

    Only full batches, so every loss averaged sees the same number of negatives (a short last batch is easier).
    """
    was_training = method.training
    method.eval()
    try:
        size = min(batch_size, n_val)
        total = 0.0
        count = n_val // size
        for i in range(count):
            batch = {k: v[i * size : (i + 1) * size] for k, v in val.items()}
            total += float(_as_scalar_loss(method.loss(batch)).float())
        return total / count
    finally:
        method.train(was_training)


def _autocast(precision: str, device: torch.device):
    """bf16 autocast for ``precision="bf16"`` (forward and loss only; weights, gradients and the optimiser
    stay fp32), a no-op for ``"fp32"``."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _total_grad_norm(params: list[nn.Parameter]) -> float:
    """The norm ``clip_grad_norm_`` would report, without touching the gradients."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.nn.utils.get_total_norm(grads))


class _LossForward(nn.Module):
    """``method.loss`` as a ``forward``: DDP synchronises gradients only for work done inside its own
    ``forward()`` call, while every method of the book is driven through ``loss(batch)``."""

    def __init__(self, method: nn.Module) -> None:
        super().__init__()
        self.method = method

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.method.loss(batch)


def _check_divisible(batch_size: int, micro: int, world: int, requested: int, n_train: int) -> None:
    """Each rank takes an equal slice of every (micro-)batch, so every chunk must split into W parts."""
    what = f"batch_size {batch_size}" + (f" (the {n_train} training rows; config.batch_size is {requested})"
                                         if batch_size != requested else "")
    if batch_size % world:
        lower, upper = batch_size // world * world, -(-batch_size // world) * world
        raise ValueError(f"{what} is not divisible by the world size {world}: every rank takes an equal slice "
                         f"of each batch; use a batch_size that is a multiple of {world} (e.g. "
                         f"{lower or upper} or {upper}), or launch a number of processes that divides {batch_size}")
    last = batch_size % micro
    if micro % world or last % world:
        bad = micro if micro % world else last
        raise ValueError(f"micro-batches of {bad} rows (micro_batch_size {micro}, {what}) are not divisible by the "
                         f"world size {world}: every rank takes an equal slice of each micro-batch; use a "
                         f"micro_batch_size that is a multiple of {world} and divides {batch_size}")


def _wrap_ddp(method: nn.Module, device: torch.device) -> nn.Module:
    """``DistributedDataParallel`` around ``method.loss``, with SyncBatchNorm where torch supports it.

    On CPU torch's SyncBatchNorm refuses to run, so each rank normalises its own slice, with a warning
    (book/scale_out.md, on BatchNorm)."""
    from torch.nn.parallel import DistributedDataParallel

    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in method.modules())
    if device.type == "cuda":
        nn.SyncBatchNorm.convert_sync_batchnorm(method)
        return DistributedDataParallel(_LossForward(method), device_ids=[device.index])
    if has_bn:
        warnings.warn(f"{type(method).__name__} has BatchNorm layers and trains under DDP on CPU: torch's "
                      "SyncBatchNorm needs a GPU, so each rank normalises its own slice of the batch; results "
                      "differ from single-process training (book/scale_out.md)", stacklevel=3)
    return DistributedDataParallel(_LossForward(method))


def _sync_state_from_rank0(method: nn.Module) -> None:
    """Every rank ends with rank 0's weights and buffers (BatchNorm running statistics may differ on CPU)."""
    import torch.distributed as dist

    for tensor in method.state_dict().values():
        dist.broadcast(tensor, src=0)


def _negatives(micro: int, world: int, method: nn.Module) -> int:
    """Negatives each loss saw: the global micro-batch if the loss gathered across ranks, else the slice."""
    if world == 1:
        return micro - 1
    if distributed.gathered_rows() == micro:
        return micro - 1
    warnings.warn(f"{type(method).__name__}'s loss did not gather embeddings across the {world} ranks "
                  f"(lib.core.distributed.gather_with_grad): each loss saw {micro // world} rows, not {micro}",
                  stacklevel=3)
    return micro // world - 1


def fit(
    method: nn.Module,
    train: dict[str, torch.Tensor],
    val: dict[str, torch.Tensor] | None,
    settings: TrainSettings,
    *,
    seed: int = 0,
    device: str = "cpu",
    progress: bool | None = None,
    workers: int = 2,
) -> TrainResult:
    """Train ``method``; return the history and restore the best weights.

    ``train`` and ``val`` map names to tensors sharing their first dimension; a batch is the same dict with a subset
    of rows, passed to ``method.loss``; each epoch draws a seeded permutation and drops its last incomplete batch.
    A ``train`` value that is not a tensor (``lib.core.rows.StoreRows``) is streamed: its rows are read from disk
    by ``workers`` DataLoader processes ahead of a GPU's loop (on a CPU by the loop itself), in the order the resident
    path would index them.
    ``micro_batch_size`` accumulates micro-batch losses into one step (a contrastive loss then sees fewer
    negatives). Under ``torch.distributed`` the batch sizes are *global* and must be multiples of W.
    See notebooks/sharelock.py, section "Training the head", and book/scale_out.md.
    """
    start = time.perf_counter()
    if not isinstance(settings, TrainSettings):
        raise TypeError(f"settings must be a lib.core.config.TrainSettings, got {type(settings).__name__}")
    config = settings
    if not callable(getattr(method, "loss", None)):
        raise TypeError(f"{type(method).__name__} has no loss(batch) method; every method needs one")
    if progress is None:
        progress = _progress_default()

    device = torch.device(device)
    if settings.precision == "auto":  # resolved on this machine before the run is keyed (lib.core.precision)
        settings = config = dataclasses.replace(settings, precision=resolve_precision("auto", device.type))
    world, rank = (distributed.world_size(), distributed.rank()) if distributed.is_distributed() else (1, 0)
    cache_key = run_cache.key_or_none(method, train, val, settings, seed, device) if world == 1 else None
    if cache_key is not None and (done := run_cache.load(cache_key, method)) is not None:
        method.to(device).train()
        run_cache.count(read=True)
        return TrainResult(**done, settings=settings, cached=True)
    if world > 1 and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # cuda:LOCAL_RANK (lib.core.distributed.init)
    n_train = _num_rows(train, "train")
    n_val = _num_rows(val, "val") if val is not None else 0
    streamed = any(not isinstance(v, torch.Tensor) for v in train.values())
    if not streamed:
        train = {k: v.to(device) for k, v in train.items()}
    if val is not None:
        val = {k: v.to(device) for k, v in val.items()}

    batch_size = min(config.batch_size, n_train)
    micro = min(config.micro_batch_size or batch_size, batch_size)
    if world > 1:
        _check_divisible(batch_size, micro, world, config.batch_size, n_train)

    torch.manual_seed(seed + rank)  # dropout and any other draw from the global generator; own masks per rank
    order = step_indices(n_train, batch_size, micro, config.steps, seed, rank, world)
    if streamed:  # the same order, read ahead by the loader's workers
        on_gpu = device.type == "cuda"  # on a CPU the loop reads the mapped shards itself: no worker to start
        batches = iter(loader(train, StepSampler(n_train, batch_size, micro, config.steps, seed, rank, world),
                              workers=workers if on_gpu else 0, pin_memory=on_gpu))

    method.to(device)
    method.train()
    ddp = _wrap_ddp(method, device) if world > 1 else None
    forward = ddp if ddp is not None else method.loss
    params = [p for p in method.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{type(method).__name__} has no trainable parameters")
    opt_cls = torch.optim.Adam if config.optimizer == "adam" else torch.optim.AdamW
    # A method may say which parameters decay (FDT: the codebook and matrices, not norms or biases,
    # as its official code); otherwise every trainable parameter gets ``weight_decay``.
    groups = method.param_groups(config.weight_decay) if callable(getattr(method, "param_groups", None)) else params
    optimizer = opt_cls(groups, lr=config.lr, weight_decay=config.weight_decay, betas=tuple(config.betas))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: cosine_with_warmup(s, config.warmup_steps, config.steps)
    )

    history: list[dict[str, Any]] = []
    best_val = math.inf
    best_step: int | None = None
    best_state: dict[str, torch.Tensor] | None = None
    stop_ref = math.inf
    bad_evals = 0
    stopped_early = False

    bar = None
    negatives = micro - 1
    distributed.reset_gathered_rows()
    if progress and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.steps, desc=f"fit {type(method).__name__}", unit="step")

    step = 0
    try:
        while step < config.steps:
            optimizer.zero_grad(set_to_none=True)
            train_loss = 0.0
            chunks = next(order)  # this rank's rows of each micro-batch of the step
            for i, rows in enumerate(chunks):
                if streamed:
                    batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
                else:
                    batch = take(train, rows.to(device))
                # DDP: all-reduce the gradients once per optimiser step, after the last micro-batch
                no_sync = ddp.no_sync() if ddp is not None and i < len(chunks) - 1 else contextlib.nullcontext()
                with no_sync, _autocast(config.precision, device):
                    loss = _as_scalar_loss(forward(batch))
                    share = rows.numel() * world / batch_size  # this micro-batch's share of the global batch
                    (loss * share).backward()
                train_loss += float(loss.detach()) * share
            if step == 0:
                negatives = _negatives(micro, world, method)
            train_loss = distributed.mean_float(train_loss)  # same on every rank, so all stop together
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"training loss is {train_loss} at step {step + 1}")

            lr = optimizer.param_groups[0]["lr"]
            if config.grad_clip is not None:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.grad_clip))
            else:
                grad_norm = _total_grad_norm(params)
            optimizer.step()
            scheduler.step()
            step += 1
            record: dict[str, Any] = {
                "step": step,
                "lr": lr,
                "train_loss": train_loss,
                "grad_norm": grad_norm,
                "val_loss": None,
            }
            history.append(record)

            if val is not None and (step % config.eval_every == 0 or step == config.steps):
                # every rank: the whole validation set, its own negatives
                with distributed.no_gather(), _autocast(config.precision, device):
                    val_loss = _validation_loss(method, val, n_val, micro)
                val_loss = distributed.broadcast_float(val_loss)  # one decision for all ranks
                record["val_loss"] = val_loss
                if best_state is None or val_loss < best_val:  # the weights to restore: lowest loss
                    best_val, best_step = val_loss, step
                    best_state = {k: v.detach().clone() for k, v in method.state_dict().items()}
                if val_loss < stop_ref - config.min_delta:  # early stopping: improvement > min_delta
                    stop_ref, bad_evals = val_loss, 0
                else:
                    bad_evals += 1
                    if config.patience is not None and bad_evals >= config.patience:
                        stopped_early = True
            if bar is not None:
                bar.update(1)
                postfix = {"loss": f"{train_loss:.4f}"}
                if best_step is not None:
                    postfix["best_val"] = f"{best_val:.4f}"
                bar.set_postfix(postfix, refresh=False)
            if stopped_early:
                break
    finally:
        if bar is not None:
            bar.close()

    if best_state is not None:
        method.load_state_dict(best_state)
    if world > 1:
        _sync_state_from_rank0(method)
    result = TrainResult(
        history=history,
        best_step=best_step,
        best_val_loss=None if best_step is None else best_val,
        stopped_early=stopped_early,
        steps_run=step,
        negatives_per_loss=negatives,
        seconds=time.perf_counter() - start,
        batch_size=batch_size,
        micro_batch_size=micro,
        settings=settings,
        world_size=world,
        seed=seed,
        device=str(device),
    )
    run_cache.count(read=False)
    if cache_key is not None:
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
                  if f.name not in {"settings", "cached"}}
        run_cache.save(cache_key, method, fields)
    return result


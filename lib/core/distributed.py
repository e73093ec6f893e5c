"""Several processes (GPUs) with ``torch.distributed``: who am I, start/stop, and the gather the CLIP loss needs.

Why this module exists: ``torchrun``, ``torch.distributed`` and DDP do the work; only the glue lives here,
above all :func:`gather_with_grad`, which gives a contrastive loss the whole batch's embeddings as negatives.
Why the gradients then equal single-process training: book/scale_out.md.
"""
from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator

import torch
import torch.distributed as dist

__all__ = ["env_rank", "env_world_size", "env_local_rank", "is_distributed", "rank", "world_size",
           "init", "cleanup", "gather_with_grad", "no_gather", "gathered_rows", "reset_gathered_rows",
           "broadcast_float", "mean_float"]

_state = {"gather": True, "rows": 0}  # gathering on/off (validation turns it off); rows of the last gather


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value.strip() else default
    except ValueError:
        raise RuntimeError(f"environment variable {name}={value!r} is not an integer: it is set by torchrun / "
                           "accelerate launch; unset it to run as a single process") from None


def env_rank() -> int:
    """``RANK`` as set by ``torchrun``/``accelerate launch`` (0 when not launched by them)."""
    return _env_int("RANK", 0)


def env_world_size() -> int:
    """``WORLD_SIZE`` as set by the launcher (1 when not launched by one)."""
    return _env_int("WORLD_SIZE", 1)


def env_local_rank() -> int:
    """``LOCAL_RANK``: the rank on this machine, hence the GPU index (0 when not launched)."""
    return _env_int("LOCAL_RANK", 0)


def is_distributed() -> bool:
    """True when a process group with more than one process is initialised (then DDP and gathers apply)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank in the initialised group, else 0."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Processes in the initialised group, else 1."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank_device(device: str | None, local_rank: int) -> torch.device:
    """This rank's device: a bare ``cuda`` (what a command line names) means ``cuda:LOCAL_RANK``, so that each of a
    node's ranks takes its own GPU; an indexed device is kept; ``None`` is CUDA when there is one, else the CPU.
    (Found on a GPU: ``torch.cuda.set_device`` refuses a bare ``cuda``, and every rank would share GPU 0.)"""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def init(device: str | None = None, timeout_minutes: float = 30.0) -> torch.device:
    """Join the process group that the launcher described in the environment; return this rank's device.

    Device: ``device`` if given, else ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``; NCCL for CUDA, gloo
    for CPU. Not launched (``WORLD_SIZE`` unset or 1): no group, a single process. Idempotent.
    ``timeout_minutes`` bounds how long a collective waits for the slowest rank.
    """
    device = rank_device(device, env_local_rank())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    size = env_world_size()
    if size > 1 and not dist.is_initialized():
        if not dist.is_available():
            raise RuntimeError(f"WORLD_SIZE={size} but this torch build has no torch.distributed: "
                               "install a build with it, or run a single process")
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=env_rank(), world_size=size,
                                timeout=datetime.timedelta(minutes=timeout_minutes))
    return device


def cleanup() -> None:
    """Leave the process group (if any); call once at the end of a launched script."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """All ranks' ``x`` concatenated along dim 0 in rank order; gradients flow back to every slice.

    Single process (or inside :func:`no_gather`): ``x`` itself. Ranks must pass the same shape; the rows gathered
    are kept for :func:`gathered_rows`."""
    if not (_state["gather"] and is_distributed()):
        return x
    out = _all_gather_autograd(x)
    _state["rows"] = out.shape[0]
    return out


def _all_gather_autograd(x: torch.Tensor) -> torch.Tensor:
    """torch's differentiable all-gather: ``_functional_collectives.all_gather_single`` where it exists
    (torch 2.13 deprecates the older ``torch.distributed.nn.functional.all_gather`` in its favour),
    else the older op that open_clip uses. Both sum the gradients of a slice over ranks in the backward."""
    try:
        from torch.distributed._functional_collectives import all_gather_single
    except ImportError:  # older torch
        import torch.distributed.nn.functional as dist_fn

        return torch.cat(dist_fn.all_gather(x), dim=0)
    return all_gather_single(x.contiguous(), 0, dist.group.WORLD)


@contextlib.contextmanager
def no_gather() -> Iterator[None]:
    """Within the block, :func:`gather_with_grad` returns its input: every rank computes a loss on its own
    rows only. ``lib.core.train`` uses it for validation, which every rank runs on the whole validation set."""
    before = _state["gather"]
    _state["gather"] = False
    try:
        yield
    finally:
        _state["gather"] = before


def gathered_rows() -> int:
    """Rows of the most recent gather (0 if none since :func:`reset_gathered_rows`): ``lib.core.train`` reads it
    to report how many negatives each contrastive loss really saw."""
    return _state["rows"]


def reset_gathered_rows() -> None:
    _state["rows"] = 0


def broadcast_float(value: float, src: int = 0) -> float:
    """Rank ``src``'s ``value`` on every rank (identity when not distributed): decisions such as early
    stopping must be taken on one number, or the ranks could disagree and deadlock in the next collective."""
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=_collective_device())
    dist.broadcast(t, src=src)
    return float(t.item())


def mean_float(value: float) -> float:
    """The mean of ``value`` over ranks (identity when not distributed), for logging a per-rank number."""
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def _collective_device() -> torch.device:
    """NCCL only moves CUDA tensors; gloo moves CPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")

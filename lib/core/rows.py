"""Training rows read from disk as they are needed: the streamed data path beside resident tensors.

Why: ``lib.core.train.fit`` keeps its training tensors on the device, which is the fast path while they fit; FLAME's
2.9M re-captions x 7 facets x 5,120 floats (208 GB in float16) never will. The store already keeps every entry as
memory-mapped shards, so a batch can read just its rows. Two rules make the streamed path a drop-in: the row order
is :func:`step_indices`, one function for both paths (so the same seed draws the same batches, bit for bit), and a
``DataLoader`` only prefetches what that order asks for (:func:`loader`), each rank reading its own slice of every
global batch, as DDP with gathered negatives needs. Why not ``DistributedSampler``: it shards the *dataset* per
epoch, so a rank's micro-batches would not be slices of the global batch the single-process run draws, and results
would depend on the number of GPUs. See book/scale_out.md.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import torch

__all__ = ["StoreRows", "step_indices", "StepSampler", "take", "loader"]


class StoreRows:
    """The rows of a complete store entry (:class:`lib.core.store_files.CachedFeatures`), read from its
    memory-mapped shards by index: ``rows[index]`` is ``(len(index), dim)`` in ``dtype``, or ``(len(index), first,
    dim)`` when ``per_row`` stored rows make one training row (FLAME's K facets of a caption; ``first``: keep the
    first k of them). ``limit``: only the first N training rows (a config's ``data.limit``)."""

    def __init__(self, cached, dtype: torch.dtype = torch.float32, per_row: int = 1, first: int | None = None,
                 limit: int | None = None) -> None:
        if len(cached) % per_row:
            raise ValueError(f"{cached!r} has {len(cached)} rows, not a multiple of {per_row} per training row")
        self.cached, self.dtype, self.per_row = cached, dtype, per_row
        self.first = per_row if first is None else first
        self.rows = len(cached) // per_row if limit is None else min(limit, len(cached) // per_row)
        self.starts = [sc["rows"][0] for sc in cached.shards]
        self._arrays: list[np.ndarray] | None = None  # opened lazily: in each DataLoader worker, not pickled

    def __len__(self) -> int:
        return self.rows

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrays": None}

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        if self._arrays is None:
            self._arrays = self.cached.shard_arrays()
        if len(index) and int(index.max()) >= self.rows:
            raise IndexError(f"row {int(index.max())} of {self.rows}")
        stored = (index.view(-1, 1) * self.per_row + torch.arange(self.first)).flatten().numpy()
        shard_of = np.searchsorted(self.starts, stored, side="right") - 1
        out = np.empty((len(stored), self.cached.dim), dtype=np.float32)
        for shard in np.unique(shard_of):  # one fancy-indexed read per shard touched
            picked = shard_of == shard
            out[picked] = self._arrays[shard][stored[picked] - self.starts[shard]]
        found = torch.from_numpy(out).to(self.dtype)
        return found if self.per_row == 1 else found.view(len(index), self.first, -1)


def step_indices(n: int, batch_size: int, micro: int, steps: int, seed: int, rank: int = 0,
                 world: int = 1) -> Iterator[list[torch.Tensor]]:
    """Per optimiser step, this rank's row indices of each micro-batch: every epoch a permutation of ``n`` rows drawn
    from a generator seeded with ``seed``, cut into batches of ``batch_size`` (the last incomplete one dropped), each
    cut into micro-batches of ``micro``, each split into ``world`` equal contiguous slices (rank r takes the r-th: in
    rank order the slices make up the micro-batch, the order ``lib.core.distributed.gather_with_grad`` concatenates
    the ranks' embeddings in)."""
    generator = torch.Generator().manual_seed(seed)
    per_epoch, perm, done = n // batch_size, None, 0
    for _ in range(steps):
        if perm is None or done >= per_epoch:
            perm, done = torch.randperm(n, generator=generator), 0
        batch = perm[done * batch_size:(done + 1) * batch_size]
        done += 1
        yield [chunk[rank * (chunk.numel() // world):(rank + 1) * (chunk.numel() // world)]
               for chunk in batch.split(micro)]


class StepSampler(torch.utils.data.Sampler):
    """:func:`step_indices` flattened to one index tensor per micro-batch, for a ``DataLoader`` with
    ``batch_size=None``; a training loop regroups them by ``chunks_per_step``."""

    def __init__(self, n: int, batch_size: int, micro: int, steps: int, seed: int, rank: int = 0, world: int = 1):
        self.args = (n, batch_size, micro, steps, seed, rank, world)
        self.chunks_per_step = -(-batch_size // micro)

    def __iter__(self):
        for chunks in step_indices(*self.args):
            yield from chunks

    def __len__(self) -> int:
        return self.args[3] * self.chunks_per_step


def take(rows: Mapping[str, torch.Tensor | StoreRows], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """The batch of ``index`` from every named source: a resident tensor is indexed, a :class:`StoreRows` read."""
    return {name: source[index] for name, source in rows.items()}


class _Batches(torch.utils.data.Dataset):
    def __init__(self, rows: Mapping) -> None:
        self.rows = rows

    def __getitem__(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        return take(self.rows, index)


def loader(rows: Mapping[str, torch.Tensor | StoreRows], sampler: StepSampler, workers: int = 2,
           pin_memory: bool = False) -> torch.utils.data.DataLoader:
    """Batches of ``rows`` in ``sampler``'s order, read by ``workers`` processes ahead of the loop (0: in the
    loop's own process)."""
    # its own generator: a DataLoader draws its workers' base seed from it, never from the global one the training
    # loop's dropout draws from (the streamed run must draw the resident run's masks)
    return torch.utils.data.DataLoader(_Batches(rows), sampler=sampler, batch_size=None, num_workers=workers,
                                       pin_memory=pin_memory, persistent_workers=False,
                                       prefetch_factor=4 if workers else None,
                                       generator=torch.Generator().manual_seed(0))

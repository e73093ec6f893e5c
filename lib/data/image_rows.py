"""Training images decoded as the loop needs them: the streamed pixel path beside resident uint8 pixels.

Why: a tower trained from scratch reads pixels, and :mod:`lib.data.pixel_cache` holds every training image decoded
as uint8. That is the fast path while it fits, but Three Towers' 563k CC3M pairs at the paper's 224 px take 85 GB,
more than a GPU (or most hosts) has to spare. :class:`ImageRows` is a drop-in for that tensor in
``lib.core.train.fit``'s training dict: ``rows[index]`` decodes just those images with the same function, so the
loop's order (:func:`lib.core.rows.step_indices`, one order for both paths) gives the same batches, bit for bit, and
a GPU's ``DataLoader`` workers decode the next batches while the towers train. See notebooks/three_towers.py,
section "The data".
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import torch

__all__ = ["ImageRows", "select"]


class ImageRows:
    """The images of one or more image sets (each with ``load_image(i)`` and ``len``), concatenated in order, read
    by index: ``rows[index]`` is ``decode(load, len(index), size)``, ``(len(index), 3, size, size)`` uint8, as the
    resident tensor ``decode`` would have built. ``rows``: only these images, in this order (:meth:`select`)."""

    def __init__(self, sets: Sequence, size: int, decode: Callable[[Callable, int, int], torch.Tensor],
                 rows: torch.Tensor | None = None) -> None:
        self.sets, self.size, self.decode = list(sets), int(size), decode
        self.starts = [0]
        for images in self.sets:
            self.starts.append(self.starts[-1] + len(images))
        self.rows = torch.arange(self.starts[-1]) if rows is None else torch.as_tensor(rows, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, index: torch.Tensor) -> ImageRows:
        """These rows only (a subset of the training pairs), still decoded as they are read."""
        return ImageRows(self.sets, self.size, self.decode, self.rows[torch.as_tensor(index, dtype=torch.long)])

    def _load(self, row: int):
        which = bisect.bisect_right(self.starts, row) - 1
        return self.sets[which].load_image(row - self.starts[which])

    def __getitem__(self, index: torch.Tensor | int) -> torch.Tensor:
        index = torch.as_tensor(index, dtype=torch.long)
        if index.ndim == 0:  # one image, ``(3, size, size)``, as a resident tensor's ``pixels[i]``
            return self[index.view(1)][0]
        if len(index) and (int(index.max()) >= len(self.rows) or int(index.min()) < -len(self.rows)):
            raise IndexError(f"image row {int(index.max())} of {len(self.rows)}")
        picked = self.rows[index].tolist()
        return self.decode(lambda i: self._load(picked[i]), len(picked), self.size)


def select(rows, index: torch.Tensor):
    """``rows[index]`` for a resident tensor, the lazy :meth:`ImageRows.select` for streamed images (indexing those
    would decode them all)."""
    return rows.select(index) if isinstance(rows, ImageRows) else rows[index]

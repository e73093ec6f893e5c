"""lib.data.image_rows: training images decoded per batch give exactly the batches, and the run, of the resident
uint8 pixels (the Three Towers full config streams its 224 px images this way)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from lib.core.config import LossConfig, TrainSettings
from lib.core.train import fit
from lib.data.image_rows import ImageRows, select
from lib.methods import three_towers as tt


class Drawings:
    """An image set as the chapters' sets are: ``load_image(i)`` and ``len``; every image distinct, RGBA (the
    decode's transparency-on-white applies) and not square (the resize applies)."""

    def __init__(self, count: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.arrays = [rng.integers(0, 256, (20, 14, 4), dtype=np.uint8) for _ in range(count)]
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return len(self.arrays)

    def load_image(self, i: int) -> Image.Image:
        self.loaded.append(i)
        return Image.fromarray(self.arrays[i], "RGBA")


def resident(sets, size):
    return torch.cat([tt.pixels(s.load_image, len(s), size) for s in sets])


def test_rows_read_across_sets_equal_the_resident_pixels_and_decode_only_what_is_asked():
    sets = [Drawings(5, 0), Drawings(7, 1)]
    rows, whole = ImageRows(sets, 16, tt.pixels), resident(sets, 16)
    for s in sets:
        s.loaded.clear()
    index = torch.tensor([11, 0, 4, 5, 4])
    found = rows[index]
    assert torch.equal(found, whole[index]) and found.dtype == torch.uint8
    assert sorted(sets[0].loaded) == [0, 4, 4] and sorted(sets[1].loaded) == [0, 6]  # only the rows asked for
    assert len(rows) == 12 and torch.equal(rows[7], whole[7])  # one image, as a resident tensor gives it
    part = select(rows, torch.tensor([3, 8, 10]))  # a subset stays lazy, and indexes in its own order
    assert isinstance(part, ImageRows) and len(part) == 3
    assert torch.equal(part[torch.tensor([2, 0])], whole[torch.tensor([10, 3])])
    assert torch.equal(select(whole, torch.tensor([1, 2])), whole[1:3])  # a resident tensor is plainly indexed
    with pytest.raises(IndexError, match="row 3 of 3"):
        part[torch.tensor([3])]


def test_a_three_towers_run_streaming_its_images_equals_the_run_on_resident_pixels():
    sets, size, n = [Drawings(20, 2), Drawings(12, 3)], 16, 32
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(n, 6, dtype=torch.long)
    tokens = {"input_ids": torch.randint(1, 40, (n, 6), generator=g), "attention_mask": mask,
              "third": torch.randn(n, 24, generator=g)}
    val = {"pixels": resident(sets, size)[:8], **{k: v[:8] for k, v in tokens.items()}}
    settings = TrainSettings(steps=6, batch_size=8, lr=3e-3, warmup_steps=1, eval_every=3)

    def run(pixels):
        torch.manual_seed(0)
        method = tt.ThreeTowers("3t", third_dim=24, vocab_size=40,
                                image_tower=tt.ImageTowerConfig(kind="convnet", widths=(8,), image_size=size),
                                embed_dim=16, loss=LossConfig(temperature=0.07, learnable=True), augment=True,
                                text_tower=tt.TextTowerConfig(tokenizer="unused", kind="bag", width=16, context=6))
        result = fit(method, {"pixels": pixels, **tokens}, val, settings, seed=1)
        return result, method

    streamed, streamed_method = run(ImageRows(sets, size, tt.pixels))
    held, held_method = run(resident(sets, size))
    assert [r["train_loss"] for r in streamed.history] == [r["train_loss"] for r in held.history]
    assert streamed.history[-1]["train_loss"] != streamed.history[0]["train_loss"]  # it trained
    for a, b in zip(streamed_method.state_dict().values(), held_method.state_dict().values()):
        assert torch.equal(a, b)

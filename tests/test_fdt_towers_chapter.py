"""The FDT chapter's full config trains its encoders (``chapters.fdt.towers``): what must hold is that the chapter's
analyses, which read token sequences through a head, see exactly what the trained model computes end to end, for FDT
and for the CLIP baseline; that the text tower reads CLIP's BPE up to its end-of-text token; and that the training
images stream while every other set is held."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from chapters.fdt.towers import InMemorySequences, TowerInputs, TowerSequences, Words
from lib.core.evaluate import prompt_texts
from lib.data.image_rows import ImageRows
from lib.methods.fdt import FDTHead, embed_sequences
from lib.methods.fdt_towers import EndToEndFDT
from lib.nn.towers import ImageTowerConfig, TextTowerConfig

IMAGE = ImageTowerConfig(kind="open_clip", open_clip_model="ViT-B-32", image_size=64, vit_width=64, vit_layers=1)
TEXT = TextTowerConfig(tokenizer="open_clip:ViT-B-32", kind="open_clip", width=32, depth=1, heads=2, context=16)


@dataclass
class Images:
    """An image set as the chapter reads one: name, ids, source, captions and ``load_image``."""

    name: str
    captions: list[str]

    def __post_init__(self):
        self.ids = [f"{self.name}-{i}" for i in range(len(self.captions))]
        self.source = {"test": self.name}

    def __len__(self):
        return len(self.captions)

    def load_image(self, i: int) -> Image.Image:
        rng = np.random.default_rng(i + 17 * len(self.name))
        return Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))


@pytest.fixture
def setting(tmp_path, monkeypatch):
    monkeypatch.setenv("LIB_CACHE_DIR", str(tmp_path))  # the held pixels are written to the pixel cache
    words = ["a red circle", "two blue squares on a table", "a green triangle", "one yellow star"]
    bench = SimpleNamespace(train=Images("train", words * 2), retrieval=Images("retrieval", words))
    cfg = SimpleNamespace(image_tower=IMAGE, text_tower=TEXT, train_data="streamed")
    return cfg, bench, TowerInputs(cfg, bench)


def test_words_read_clips_bpe_up_to_and_including_the_end_of_text_token():
    words = Words("open_clip:ViT-B-32", 8)
    ids, mask = words(["a dog", "a very long caption that does not fit the context at all"])
    assert ids.shape == mask.shape == (2, 8) and words.vocab_size == 49408
    assert mask[0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0] and int(ids[0, 3]) == words.eos_id  # start, a, dog, end
    assert mask[1].all() and int(ids[1, -1]) == words.eos_id  # cut to the context, the end token kept
    assert words.pieces("a dog") == ["<start_of_text>", "a</w>", "dog</w>", "<end_of_text>"]


def test_training_images_stream_and_every_other_set_is_held(setting):
    cfg, bench, inputs = setting
    train, held = inputs.tensors(bench.train), inputs.tensors(bench.retrieval)
    assert isinstance(train["pixels"], ImageRows) and isinstance(held["pixels"], torch.Tensor)
    assert torch.equal(train["pixels"][torch.arange(4)], inputs.pixels(Images("train", bench.train.captions[:4])))
    assert held["pixels"].shape == (4, 3, 64, 64) and held["input_ids"].shape == held["attention_mask"].shape == (4, 16)


@pytest.mark.parametrize("kind", ["fdt", "clip"])
def test_the_analyses_see_what_the_trained_model_computes(setting, kind):
    """The chapter's zero-shot and retrieval code embeds a model's sequences through its head; that must equal the
    model's own end-to-end embedding of the same pixels and captions (the reference)."""
    cfg, bench, inputs = setting
    towers = inputs.towers(seed=3)
    head = FDTHead(towers.image_width, towers.text_width, num_codes=16, code_dim=8) if kind == "fdt" else None
    model = EndToEndFDT(towers, head).eval()
    seqs = TowerSequences(model, inputs, chunk=3)  # chunks of 3 and 1: padding across chunks must not matter
    held = inputs.tensors(bench.retrieval)
    image = embed_sequences(seqs.head.encode_image, seqs.image(bench.retrieval), batch_size=2)
    text = embed_sequences(seqs.head.encode_text, seqs.captions(bench.retrieval), batch_size=2)
    assert torch.allclose(image, model.embed_image(held["pixels"]), atol=2e-3)  # the sequences are held in fp16
    assert torch.allclose(text, model.embed_text(held["input_ids"], held["attention_mask"]), atol=2e-3)
    assert seqs.dims(bench) == (64, 32) and seqs.word_pieces("a dog")[-1] == "<end_of_text>"
    labelled = SimpleNamespace(name="shapes", classnames=["circle", "star"], templates=["a {c}.", "{c}"])
    assert len(seqs.prompts(labelled)) == len(prompt_texts(labelled)) == 4


def test_fresh_sequences_come_from_seed_zero_towers(setting):
    cfg, bench, inputs = setting
    again = TowerSequences(EndToEndFDT(inputs.towers(0)), inputs, pooled=False)
    assert torch.equal(inputs.image(bench.retrieval).x, again.image(bench.retrieval).x)
    assert inputs.image(bench.retrieval).x.shape == (4, 4, 64)  # the patch tokens a new head reads, not pooled
    assert inputs.dims(bench) == (64, 32)


def test_in_memory_sequences_batch_each_item_to_its_own_length():
    x = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    seqs = InMemorySequences(x, torch.tensor([[1, 1, 0], [1, 0, 0]]))
    rows, batch, mask = next(seqs.batches(2))
    assert batch.shape == (2, 2, 2) and mask.tolist() == [[True, True], [True, False]]
    assert torch.equal(batch[1, 0], x[1, 0]) and torch.equal(batch[1, 1], torch.zeros(2))

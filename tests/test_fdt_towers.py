"""FDT trained end to end (``lib.methods.fdt_towers``): open_clip's towers in front of the FDT head, as in the paper.

What must hold: the image side reads the patch tokens only (no class token), as the official code; a caption's
embedding does not depend on what follows its end-of-text token; the loss reaches the towers, not only the head;
the CLIP baseline is open_clip's own pooled output; a few steps of ``fit`` on pairs that can be told apart learn to
tell them apart; and a head built for other widths is refused before any step.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lib.core.config import TrainSettings
from lib.core.evaluate import retrieval_metrics
from lib.core.train import fit, seed_everything
from lib.methods.fdt import FDTHead
from lib.methods.fdt_towers import EndToEndFDT, SequenceTowers
from lib.nn.towers import ImageTowerConfig, TextTowerConfig, normalise_pixels

EOS = 2
IMAGE = ImageTowerConfig(kind="open_clip", open_clip_model="ViT-B-32", image_size=96, vit_width=64, vit_layers=1)
TEXT = TextTowerConfig(tokenizer="unused", kind="open_clip", width=32, depth=1, heads=2, context=12)


def _towers(seed: int = 0) -> SequenceTowers:
    seed_everything(seed)
    return SequenceTowers(IMAGE, TEXT, vocab_size=64, eos_id=EOS)


def _captions(words: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (each caption's words, then the end-of-text token, then padding 0) and the attention mask."""
    ids = torch.zeros(len(words), TEXT.context, dtype=torch.long)
    for row, caption in enumerate(words):
        ids[row, : len(caption) + 1] = torch.tensor([*caption, EOS])
    return ids, (torch.arange(TEXT.context)[None] <= (ids == EOS).int().argmax(1)[:, None]).long()


def test_the_image_side_reads_the_patch_tokens_only():
    towers = _towers()
    pooled, tokens, mask = towers.image(torch.zeros(2, 3, 96, 96, dtype=torch.uint8))
    assert tokens.shape == (2, (96 // 32) ** 2, 64) and mask.all() and pooled.shape == (2, 512)


def test_a_caption_is_the_same_whatever_follows_its_end_of_text_token():
    head = FDTHead(64, 32, num_codes=32, code_dim=16)
    model = EndToEndFDT(_towers(), head).eval()
    ids, mask = _captions([[5, 6, 7], [9]])
    junk = ids.clone()
    junk[mask == 0] = torch.randint(3, 64, (int((mask == 0).sum()),))  # other tokens where the padding was
    assert torch.allclose(model.embed_text(ids, mask), model.embed_text(junk, mask), atol=1e-6)
    short_ids, short_mask = ids[:, :6], mask[:, :6]  # padded to a shorter length: the same embedding
    assert torch.allclose(model.embed_text(ids, mask), model.embed_text(short_ids, short_mask), atol=1e-6)


def test_the_loss_trains_the_towers_and_the_codebook():
    model = EndToEndFDT(_towers(), FDTHead(64, 32, num_codes=32, code_dim=16))
    ids, mask = _captions([[5, 6], [7], [8, 9, 10]])
    pixels = torch.randint(0, 256, (3, 3, 96, 96), dtype=torch.uint8)
    model.loss({"pixels": pixels, "input_ids": ids, "attention_mask": mask}).backward()
    for name, parameter in (("patch embedding", model.towers.visual.conv1.weight),
                            ("word embedding", model.towers.text.token_embedding.weight),
                            ("codebook", model.head.codebook)):
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, f"no gradient reaches the {name}"
    decayed = {id(p) for p in model.param_groups(0.1)[0]["params"]}
    assert id(model.head.codebook) in decayed and id(model.criterion.log_scale) not in decayed


def test_the_clip_baseline_is_open_clips_pooled_output():
    towers = _towers()
    model = EndToEndFDT(towers, None).eval()
    pixels = torch.randint(0, 256, (2, 3, 96, 96), dtype=torch.uint8)
    with torch.no_grad():
        expected = F.normalize(towers.visual(normalise_pixels(pixels))[0], dim=-1)
    assert torch.allclose(model.embed_image(pixels), expected, atol=1e-6)


@pytest.mark.parametrize("head", [True, False], ids=["FDT", "CLIP"])
def test_a_few_steps_learn_pairs_that_can_be_told_apart(head):
    """Eight colours, each caption naming its colour with one word: after 60 steps both directions' R@1 are at
    least 0.5, four times chance (the same pairs: a check that the path learns, not a benchmark). The codebook
    starts at std 0.02: from the official ``randn`` (std 1) 60 steps reach 0.25 only."""
    colours = torch.tensor([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [0, 255, 255], [255, 0, 255],
                            [0, 0, 0], [255, 255, 255]], dtype=torch.uint8)
    pixels = colours[:, :, None, None].expand(8, 3, 96, 96).repeat(4, 1, 1, 1).contiguous()
    ids, mask = _captions([[10 + i] for i in range(8)] * 4)
    data = {"pixels": pixels, "input_ids": ids, "attention_mask": mask}
    seed_everything(0)
    fdt = FDTHead(64, 32, num_codes=32, code_dim=16, codebook_std=0.02) if head else None
    model = EndToEndFDT(_towers(), fdt, augment=False)
    settings = TrainSettings(steps=60, batch_size=16, lr=3e-3, weight_decay=0.0, optimizer="adamw", warmup_steps=5,
                             eval_every=60)
    result = fit(model, data, None, settings, seed=0, progress=False)
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    model.eval()
    found = retrieval_metrics(model.embed_image(pixels[:8]), model.embed_text(ids[:8], mask[:8]), torch.arange(8))
    assert found["text_retrieval_recall@1"] >= 0.5 and found["image_retrieval_recall@1"] >= 0.5, found


def test_a_head_of_other_widths_is_refused():
    with pytest.raises(ValueError, match=r"reads \(768, 512\)-wide tokens, the towers give \(64, 32\)"):
        EndToEndFDT(_towers(), FDTHead(768, 512, num_codes=8, code_dim=8))
    with pytest.raises(ValueError, match="kind to 'open_clip'"):
        SequenceTowers(ImageTowerConfig(), TEXT, vocab_size=64, eos_id=EOS)

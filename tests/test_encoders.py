"""Tests of lib.core.encoders: pooling against manual indexing, and the real offline text/vision models
(batched = one at a time, input order, padding side, layer choice, eval-mode preprocessing). """
from __future__ import annotations

import pytest
import torch
from PIL import Image

from conftest import TEXT_DIMS, VISION_DIMS
from lib.core.encoders import (
    EncoderInputError,
    TextEncoder,
    first_token_index,
    last_token_index,
    pool,
    to_rgb,
)

# Deliberately not sorted by length; the 2nd and 5th share a length class with others.
TEXTS = [
    "man rowing boat: boat, canoe, rowboat, cruise, lake",
    "dog",
    "a grinning face with big eyes",
    "keycap: 7",
    "red apple: apple, fruit, red, food, healthy, snack, orchard, juicy, crisp, sweet",
]
DECODERS = ["smollm2", "gemma"]
ALL_TEXT = ["smollm2", "gemma", "minilm"]

pytestmark = pytest.mark.usefixtures("single_thread")


# ------------------------------------------------------------------------------------------ pooling

def _masks():
    lengths = [3, 7, 1, 5]
    T = 7
    right = torch.zeros(len(lengths), T, dtype=torch.long)
    left = torch.zeros_like(right)
    for i, n in enumerate(lengths):
        right[i, :n] = 1
        left[i, T - n:] = 1
    mixed = torch.stack([right[0], left[1], left[2], right[3]])  # both sides in one batch
    return {"right": right, "left": left, "mixed": mixed}


@pytest.mark.parametrize("side", ["right", "left", "mixed"])
def test_pooling_matches_manual_indexing(side):
    mask = _masks()[side]
    hidden = torch.randn(mask.shape[0], mask.shape[1], 5, generator=torch.Generator().manual_seed(0))
    real = [row.nonzero().flatten() for row in mask]
    assert last_token_index(mask).tolist() == [int(r.max()) for r in real]
    assert first_token_index(mask).tolist() == [int(r.min()) for r in real]
    assert torch.equal(pool(hidden, mask, "last_token"), torch.stack([hidden[i, r.max()] for i, r in enumerate(real)]))
    assert torch.equal(pool(hidden, mask, "cls"), torch.stack([hidden[i, r.min()] for i, r in enumerate(real)]))
    mean = torch.stack([hidden[i, r].mean(0) for i, r in enumerate(real)])
    torch.testing.assert_close(pool(hidden, mask, "mean"), mean)
    # values at padded positions never matter
    noisy = hidden.masked_fill(mask.unsqueeze(-1) == 0, 1e6)
    for pooling in ("last_token", "cls", "mean"):
        torch.testing.assert_close(pool(noisy, mask, pooling), pool(hidden, mask, pooling))


def test_pooling_accepts_a_bool_mask_and_rejects_unknown_names():
    mask = _masks()["left"]
    hidden = torch.randn(*mask.shape, 3)
    assert torch.equal(pool(hidden, mask.bool(), "last_token"), pool(hidden, mask, "last_token"))
    with pytest.raises(ValueError, match="pooling"):
        pool(hidden, mask, "max")


# ------------------------------------------------------------------------------------------ text models

@pytest.mark.parametrize("text_encoder", ALL_TEXT, indirect=True)
def test_batched_encode_equals_one_at_a_time_in_input_order(text_encoder, monkeypatch, request):
    monkeypatch.setattr(text_encoder, "batch_size", 2)  # 3 batches of length-sorted texts
    batched = text_encoder.encode(TEXTS, progress=False)
    key = request.node.callspec.params["text_encoder"]
    assert batched.shape == (len(TEXTS), TEXT_DIMS[key]) and batched.dtype == torch.float32
    alone = torch.cat([text_encoder.encode([t], progress=False) for t in TEXTS])
    torch.testing.assert_close(batched, alone, atol=1e-4, rtol=1e-4)
    assert torch.isfinite(batched).all()
    # rows are distinct texts, not a copy of one row
    assert torch.cdist(batched, batched).fill_diagonal_(1.0).min() > 1e-3
    # reordering the inputs reorders the outputs
    permuted = text_encoder.encode(TEXTS[::-1], progress=False)
    torch.testing.assert_close(permuted, batched.flip(0), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("text_encoder", DECODERS, indirect=True)
def test_decoder_last_token_is_the_true_last_token(text_encoder):
    """One text, no padding: the feature is the final position's state of ``model(**tok(text))``."""
    tok = text_encoder.tokenizer([TEXTS[0]], return_tensors="pt")
    with torch.no_grad():
        reference = text_encoder.model(**tok).last_hidden_state[0, -1]
    torch.testing.assert_close(text_encoder.encode([TEXTS[0]], progress=False)[0], reference, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("text_encoder", DECODERS, indirect=True)
def test_decoder_left_and_right_padding_agree(text_encoder, monkeypatch):
    outputs = {}
    for side in ("left", "right"):
        monkeypatch.setattr(text_encoder.tokenizer, "padding_side", side)
        padded = text_encoder.tokenizer.pad({"input_ids": text_encoder.tokenize(TEXTS)}, return_tensors="pt")
        assert (padded["attention_mask"][:, 0 if side == "left" else -1] == 0).any()  # padding really happens
        outputs[side] = text_encoder.encode(TEXTS, progress=False)
    torch.testing.assert_close(outputs["left"], outputs["right"], atol=1e-4, rtol=1e-4)


def test_minilm_mean_pooling_is_the_masked_mean(minilm):
    text = TEXTS[0]
    tok = minilm.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        hidden = minilm.model(**tok).last_hidden_state[0]
    torch.testing.assert_close(minilm.encode([text], progress=False)[0], hidden.mean(0), atol=1e-5, rtol=1e-5)
    # and in a padded batch: the mean over each row's real tokens only
    batch = minilm.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = minilm.model(**batch).last_hidden_state
    manual = torch.stack([states[i, m.bool()].mean(0) for i, m in enumerate(batch["attention_mask"])])
    torch.testing.assert_close(minilm.encode(TEXTS, progress=False), manual, atol=1e-4, rtol=1e-4)
    assert minilm.tokenizer.padding_side == "right"  # absolute positions: real tokens at 0..n-1


@pytest.mark.parametrize("text_encoder,layer", [("minilm", 2), ("smollm2", 5)], indirect=["text_encoder"])
def test_layer_k_is_hidden_states_k(text_encoder, layer, monkeypatch):
    monkeypatch.setattr(text_encoder, "layer", layer)
    got = text_encoder.encode(TEXTS[:3], progress=False)
    batch = text_encoder.tokenizer.pad({"input_ids": text_encoder.tokenize(TEXTS[:3])}, return_tensors="pt")
    with torch.no_grad():
        out = text_encoder.model(**batch, output_hidden_states=True)
    expected = pool(out.hidden_states[layer], batch["attention_mask"], text_encoder.pooling)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    final = pool(out.last_hidden_state, batch["attention_mask"], text_encoder.pooling)
    assert (got - final).abs().max() > 1e-2  # a different layer really is a different feature


@pytest.mark.parametrize("text_encoder", ALL_TEXT, indirect=True)
@pytest.mark.parametrize("bad", ["", "   \n", None])
def test_empty_caption_is_an_input_error(text_encoder, bad):
    with pytest.raises(EncoderInputError, match="#1"):
        text_encoder.encode(["a cat", bad], progress=False)


def test_bad_pooling_and_layer_are_rejected():
    with pytest.raises(ValueError, match="pooling"):
        TextEncoder("offline/all-MiniLM-L6-v2", pooling="max")
    with pytest.raises(ValueError, match="layer 7"):
        TextEncoder("offline/all-MiniLM-L6-v2", pooling="mean", layer=7)  # 6 blocks: 0..6 or -1


@pytest.mark.parametrize("text_encoder", ALL_TEXT, indirect=True)
def test_cache_spec_names_every_choice(text_encoder):
    spec = text_encoder.cache_spec()
    assert spec["model"] == text_encoder.resolved.identity and spec["model"]["sha256"]
    assert (spec["layer"], spec["pooling"], spec["max_length"], spec["dtype"]) == (
        text_encoder.layer, text_encoder.pooling, text_encoder.max_length, text_encoder.dtype)
    assert spec["padding_side"] == text_encoder.tokenizer.padding_side


def test_long_captions_are_truncated_to_max_length(minilm, monkeypatch):
    monkeypatch.setattr(minilm, "max_length", 8)
    long = "a " * 50 + "cat"
    ids = minilm.tokenize([long])[0]
    assert len(ids) == 8
    tok = minilm.tokenizer(long, truncation=True, max_length=8, return_tensors="pt")
    with torch.no_grad():
        reference = minilm.model(**tok).last_hidden_state[0].mean(0)
    torch.testing.assert_close(minilm.encode([long], progress=False)[0], reference, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------ vision models

VISION = ["efficientnet", "dinov2"]


@pytest.mark.parametrize("vision_encoder", VISION, indirect=True)
def test_vision_shape_and_batch_equals_one_by_one(vision_encoder, emoji_images, monkeypatch, request):
    key = request.node.callspec.params["vision_encoder"]
    monkeypatch.setattr(vision_encoder, "batch_size", 2)
    batched = vision_encoder.encode(emoji_images, progress=False)
    assert batched.shape == (len(emoji_images), VISION_DIMS[key]) == (5, vision_encoder.dim)
    assert batched.dtype == torch.float32 and torch.isfinite(batched).all()
    alone = torch.cat([vision_encoder.encode([im], progress=False) for im in emoji_images])
    scale = batched.abs().max()
    torch.testing.assert_close(batched, alone, atol=1e-4 * max(1.0, float(scale)), rtol=1e-4)
    assert torch.cdist(batched, batched).fill_diagonal_(1.0).min() > 1e-3  # different images, different rows
    assert not vision_encoder.model.training


@pytest.mark.parametrize("vision_encoder", VISION, indirect=True)
def test_preprocessing_is_deterministic_eval_mode(vision_encoder, emoji_images):
    size = vision_encoder.data_config["input_size"][1]
    image = to_rgb(emoji_images[1])
    first = vision_encoder.transform(image)
    assert first.shape == (3, size, size)
    for _ in range(4):
        assert torch.equal(vision_encoder.transform(image), first)  # no random crop / flip / jitter
    steps = getattr(vision_encoder.transform, "transforms", [vision_encoder.transform])
    assert not any(type(t).__name__.startswith("Random") for t in steps)
    # normalisation is the model's own: a white page becomes (1 - mean) / std in every pixel
    white = vision_encoder.transform(Image.new("RGB", (64, 64), (255, 255, 255)))
    mean = torch.tensor(vision_encoder.data_config["mean"]).view(3, 1, 1)
    std = torch.tensor(vision_encoder.data_config["std"]).view(3, 1, 1)
    torch.testing.assert_close(white, ((1 - mean) / std).expand_as(white), atol=1e-5, rtol=0)
    # same image twice through the model: identical features
    a = vision_encoder.encode([emoji_images[1], emoji_images[1]], progress=False)
    assert torch.equal(a[0], a[1])


def test_vision_preprocessing_follows_the_config(efficientnet, dinov2):
    from provision.offline_vision import EFFICIENTNET_LITE0_CFG_OVERLAY

    assert efficientnet.data_config["input_size"] == (3, 128, 128)
    assert efficientnet.data_config["crop_pct"] == 1.0
    assert tuple(efficientnet.data_config["mean"]) == tuple(EFFICIENTNET_LITE0_CFG_OVERLAY["mean"])
    assert dinov2.data_config["input_size"] == (3, 112, 112)
    assert tuple(dinov2.data_config["mean"]) == pytest.approx((0.485, 0.456, 0.406))  # the HF processor's
    for encoder in (efficientnet, dinov2):
        spec = encoder.cache_spec()
        assert (spec["model"]["sha256"]
                and spec["preprocessing"]["input_size"] == list(encoder.data_config["input_size"]))


def test_dinov2_feature_is_the_cls_token(dinov2, emoji_images):
    pixels = torch.stack([dinov2.transform(to_rgb(im)) for im in emoji_images[:2]])
    with torch.no_grad():
        cls = dinov2.model(pixel_values=pixels).last_hidden_state[:, 0]  # after the final layernorm
    torch.testing.assert_close(dinov2.encode(emoji_images[:2], progress=False), cls, atol=1e-4, rtol=1e-4)


def test_efficientnet_feature_is_the_pooled_pre_logits(efficientnet, emoji_images):
    pixels = torch.stack([efficientnet.transform(to_rgb(im)) for im in emoji_images[:2]])
    with torch.no_grad():
        pooled = efficientnet.model.forward_features(pixels).mean(dim=(2, 3))  # global average pool
    torch.testing.assert_close(efficientnet.encode(emoji_images[:2], progress=False), pooled, atol=1e-4, rtol=1e-4)


def test_to_rgb_composites_onto_white():
    rgba = Image.new("RGBA", (3, 1))
    rgba.putpixel((0, 0), (10, 20, 30, 0))  # transparent -> the page
    rgba.putpixel((1, 0), (10, 20, 30, 255))  # opaque -> itself
    rgba.putpixel((2, 0), (0, 100, 200, 128))  # half -> alpha blend with white
    rgb = to_rgb(rgba)
    assert rgb.mode == "RGB" and rgb.size == (3, 1)
    assert rgb.getpixel((0, 0)) == (255, 255, 255)
    assert rgb.getpixel((1, 0)) == (10, 20, 30)
    a = 128 / 255
    expected = tuple(round(c * a + 255 * (1 - a)) for c in (0, 100, 200))
    assert all(abs(g - e) <= 1 for g, e in zip(rgb.getpixel((2, 0)), expected))
    assert to_rgb(rgba, background=(0, 0, 0)).getpixel((0, 0)) == (0, 0, 0)
    la = Image.new("LA", (1, 1), (40, 0))
    assert to_rgb(la).getpixel((0, 0)) == (255, 255, 255)
    palette = Image.new("P", (1, 1), 0)
    palette.info["transparency"] = 0
    assert to_rgb(palette).getpixel((0, 0)) == (255, 255, 255)
    grey = Image.new("L", (1, 1), 77)
    assert to_rgb(grey).getpixel((0, 0)) == (77, 77, 77)


def test_to_rgb_on_a_real_emoji(emoji_images):
    image = emoji_images[0]
    rgb = to_rgb(image)
    alpha = image.getchannel("A")
    corner = (0, 0)
    assert alpha.getpixel(corner) == 0 and rgb.getpixel(corner) == (255, 255, 255)
    opaque = next((x, y) for y in range(64) for x in range(64) if alpha.getpixel((x, y)) == 255)
    assert rgb.getpixel(opaque) == image.getpixel(opaque)[:3]

"""Tests of lib.core.clip_model.FrozenFeatureCLIP: the CLIP_benchmark-style object (tokenizer, encode_text,
encode_image, preprocess) must give exactly the features the training pipeline gives."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lib.core.clip_model import FrozenFeatureCLIP
from lib.core.config import HeadConfig, LossConfig
from lib.core.encoders import to_rgb
from lib.methods.sharelock import ShareLock

pytestmark = pytest.mark.usefixtures("single_thread")

TEXTS = ["grinning face", "man rowing boat: boat, canoe, rowboat", "keycap: 7", "a red apple on a table"]


def _method(text_dim: int, image_dim: int) -> ShareLock:
    torch.manual_seed(0)
    method = ShareLock(text_dim, image_dim, HeadConfig(hidden_dim=32), LossConfig())
    method.train()
    with torch.no_grad():  # move BatchNorm running stats away from (0, 1): train and eval mode now differ
        for _ in range(3):
            method.embed_text(torch.randn(16, text_dim) * 3 + 1)
    return method


@pytest.fixture(params=["gemma", "smollm2", "minilm"])
def text_side(request):
    encoder = request.getfixturevalue(request.param)
    return encoder


def test_encode_text_equals_the_training_pipeline(text_side, dinov2):
    method = _method(text_side.dim, dinov2.dim)
    clip = FrozenFeatureCLIP(dinov2, text_side, method)
    assert not method.training
    got = clip.encode_text(clip.tokenizer(TEXTS))
    with torch.no_grad():
        expected = F.normalize(method.embed_text(text_side.encode(TEXTS, progress=False)), dim=-1)
    assert got.shape == (len(TEXTS), dinov2.dim)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5, rtol=0)
    # a single string is a batch of one
    torch.testing.assert_close(clip.encode_text(clip.tokenizer(TEXTS[1])), expected[1:2], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("vision_key", ["efficientnet", "dinov2"])
def test_encode_image_equals_the_training_pipeline(vision_key, minilm, emoji_images, request):
    vision = request.getfixturevalue(vision_key)
    method = _method(minilm.dim, vision.dim)
    clip = FrozenFeatureCLIP(vision, minilm, method)
    pixels = torch.stack([vision.transform(to_rgb(image)) for image in emoji_images])
    got = clip.encode_image(pixels)
    with torch.no_grad():
        expected = F.normalize(method.embed_image(vision.encode(emoji_images, progress=False)), dim=-1)
    assert got.shape == (len(emoji_images), vision.dim)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(len(emoji_images)), atol=1e-5, rtol=0)
    raw = clip.encode_image(pixels, normalize=False)
    torch.testing.assert_close(F.normalize(raw, dim=-1), got, atol=1e-6, rtol=0)


def test_zero_shot_scores_are_cosines(minilm, efficientnet, emoji_images):
    clip = FrozenFeatureCLIP(efficientnet, minilm, _method(minilm.dim, efficientnet.dim))
    images = clip.encode_image(torch.stack([clip.preprocess(to_rgb(im)) for im in emoji_images[:2]]))
    texts = clip.encode_text(clip.tokenizer(TEXTS))
    scores = images @ texts.T
    assert scores.shape == (2, len(TEXTS)) and scores.abs().max() <= 1 + 1e-5


def test_preprocess_accepts_the_images_the_encoder_accepts(minilm, efficientnet, emoji_images):
    clip = FrozenFeatureCLIP(efficientnet, minilm, _method(minilm.dim, efficientnet.dim))
    pixels = torch.stack([clip.preprocess(image) for image in emoji_images])  # RGBA, as the dataset gives them
    with torch.no_grad():
        expected = F.normalize(clip.method.embed_image(efficientnet.encode(emoji_images, progress=False)), dim=-1)
    torch.testing.assert_close(clip.encode_image(pixels), expected, atol=1e-4, rtol=1e-4)

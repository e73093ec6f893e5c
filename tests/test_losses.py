"""Tests of lib.nn.losses against open_clip's ClipLoss, HF's clip_loss and an explicit formula."""
import lib  # noqa: F401  (must precede open_clip: fixes torchvision on CPU torch)

import math

import pytest
import torch
import torch.nn.functional as F
from open_clip.loss import ClipLoss as OpenClipLoss
from transformers.models.clip import modeling_clip

from lib.nn.losses import ClipLoss, clip_loss

# HF's function that ShareLock's official code imports as `clip_loss` (renamed in transformers 5)
hf_clip_loss = getattr(modeling_clip, "clip_loss", None) or modeling_clip.image_text_contrastive_loss


def _pair(n, d=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    img = F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=-1)
    txt = F.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=-1)
    return img, txt


def _explicit(img, txt, scale):
    """Both directions written with log-softmax and the diagonal, no cross_entropy."""
    logits = scale * img @ txt.T
    i2t = -torch.log_softmax(logits, dim=1).diagonal().mean()  # each image picks its text
    t2i = -torch.log_softmax(logits, dim=0).diagonal().mean()  # each text picks its image
    return (i2t + t2i) / 2


@pytest.mark.parametrize("n", [1, 2, 7, 64])
@pytest.mark.parametrize("scale", [1.0, 1 / 0.07, 100.0])
def test_clip_loss_equals_open_clip(n, scale):
    img, txt = _pair(n, seed=n)
    ref = OpenClipLoss()(img, txt, torch.tensor(scale))
    torch.testing.assert_close(clip_loss(img, txt, scale), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(clip_loss(img, txt, torch.tensor(scale)), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("n", [3, 32])
def test_module_equals_open_clip(learnable, n):
    img, txt = _pair(n, seed=10 + n)
    loss = ClipLoss(temperature=0.05, learnable=learnable)
    torch.testing.assert_close(loss.scale, torch.tensor(20.0))
    ref = OpenClipLoss()(img, txt, loss.scale.detach())
    torch.testing.assert_close(loss(img, txt), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [2, 5, 40])
def test_equals_explicit_log_softmax_formula(n):
    img, txt = _pair(n, seed=100 + n, dtype=torch.float64)
    torch.testing.assert_close(clip_loss(img, txt, 14.0), _explicit(img, txt, 14.0), atol=1e-12, rtol=1e-12)


def test_default_equals_sharelock_official_formula():
    """ShareLock's official loss: HF clip_loss on exp(2.6592) * image @ text.T (tau ~ 0.07, fixed)."""
    img, txt = _pair(50, seed=3, dtype=torch.float64)
    official = hf_clip_loss(math.exp(2.6592) * img @ txt.T)
    torch.testing.assert_close(ClipLoss().double()(img, txt), official, atol=1e-4, rtol=1e-4)


def test_symmetric_under_swapping_modalities():
    img, txt = _pair(17, seed=5)
    torch.testing.assert_close(clip_loss(img, txt, 10.0), clip_loss(txt, img, 10.0))
    # but each direction alone is not symmetric: check the two CE terms differ on this data
    logits = 10.0 * img @ txt.T
    labels = torch.arange(17)
    assert not torch.isclose(F.cross_entropy(logits, labels), F.cross_entropy(logits.T, labels))


def test_limits_uniform_and_perfect_alignment():
    n = 8
    same = F.normalize(torch.ones(n, 4), dim=-1)
    # identical embeddings: every logit equal, each side is an n-way guess -> log n
    torch.testing.assert_close(clip_loss(same, same, 10.0), torch.tensor(math.log(n)))
    eye = torch.eye(n)
    # orthonormal, perfectly paired: loss = log(1 + (n-1) e^{-s}) -> 0 as the scale grows
    s = 30.0
    torch.testing.assert_close(clip_loss(eye, eye, s), torch.tensor(math.log1p((n - 1) * math.exp(-s))))


def test_gradient_to_log_scale_only_when_learnable():
    img, txt = _pair(12, seed=7)
    img.requires_grad_(True)
    fixed = ClipLoss(learnable=False)
    assert "log_scale" in dict(fixed.named_buffers()) and list(fixed.parameters()) == []
    assert "log_scale" in fixed.state_dict()
    fixed(img, txt).backward()
    assert not fixed.log_scale.requires_grad and fixed.log_scale.grad is None
    assert img.grad is not None

    learn = ClipLoss(learnable=True)
    assert [n for n, _ in learn.named_parameters()] == ["log_scale"]
    torch.testing.assert_close(learn.log_scale.detach(), torch.tensor(math.log(1 / 0.07)))
    learn(img.detach(), txt).backward()
    assert learn.log_scale.grad is not None and learn.log_scale.grad.abs() > 0
    # analytic check: dL/dlog_scale = scale * dL/dscale, with dL/dscale by finite differences (fp64)
    i64, t64 = img.detach().double(), txt.double()
    s, eps = 1 / 0.07, 1e-6
    fd = (clip_loss(i64, t64, s + eps) - clip_loss(i64, t64, s - eps)) / (2 * eps)
    torch.testing.assert_close(learn.log_scale.grad.double(), s * fd, atol=1e-5, rtol=1e-4)


def test_learnable_scale_is_clamped_to_max():
    loss = ClipLoss(temperature=0.001, learnable=True, max_scale=100.0)
    assert float(loss.scale.detach()) == pytest.approx(100.0)
    assert loss.temperature == pytest.approx(0.01)
    img, txt = _pair(6, seed=9)
    loss(img, txt).backward()
    assert loss.log_scale.grad == 0  # past the clamp, no gradient pushes the scale further
    torch.testing.assert_close(loss(img, txt), OpenClipLoss()(img, txt, torch.tensor(100.0)))


def test_shape_errors_and_bad_temperature():
    with pytest.raises(ValueError, match="one text per image"):
        clip_loss(torch.randn(4, 8), torch.randn(5, 8), 1.0)
    with pytest.raises(ValueError, match="2-d"):
        clip_loss(torch.randn(8), torch.randn(8), 1.0)
    with pytest.raises(ValueError, match="temperature"):
        ClipLoss(temperature=0.0)

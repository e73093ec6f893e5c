"""FLAME's losses (``lib.nn.losses``) and image projector against independent formulas and open_clip, a training
run, and the official code's caption formatting."""
from __future__ import annotations

import math

import lib  # noqa: F401  (torchvision fix before open_clip)
import pytest
import torch
import torch.nn.functional as F
from open_clip.loss import ClipLoss as OpenClipLoss
from open_clip.loss import SigLipLoss

from lib.core.train import TrainSettings, fit, seed_everything
from lib.methods.flame import Flame, FlameProjector, official_caption
from lib.nn.losses import FacetClipLoss, MultiPositiveSigmoidLoss, facet_clip_loss, multi_positive_sigmoid_loss


def _unit(*shape, seed=0):
    return F.normalize(torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=-1)


def _infonce_by_hand(image, text, scale):
    """CLIP loss written out as sums of logs (no cross_entropy, no matrix ops beyond dot products)."""
    n = image.shape[0]
    total = 0.0
    for i in range(n):
        row = [scale * float(image[i] @ text[j]) for j in range(n)]
        col = [scale * float(image[j] @ text[i]) for j in range(n)]
        total += -row[i] + math.log(sum(math.exp(v) for v in row))
        total += -col[i] + math.log(sum(math.exp(v) for v in col))
    return total / (2 * n)


def test_facet_clip_loss_is_the_sum_of_per_facet_infonce():
    image, text = _unit(5, 8, seed=1), _unit(5, 3, 8, seed=2)
    expected = sum(_infonce_by_hand(image, text[:, k], 1 / 0.07) for k in range(3))
    assert facet_clip_loss(image, text, 1 / 0.07).item() == pytest.approx(expected, rel=1e-9)


def test_facet_clip_loss_with_one_facet_is_open_clips_clip_loss():
    image, text = _unit(6, 4, seed=3), _unit(6, 1, 4, seed=4)
    ours = facet_clip_loss(image, text, 14.0)
    theirs = OpenClipLoss()(image, text[:, 0], torch.tensor(14.0, dtype=torch.float64))
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)


def test_facet_clip_loss_module_learns_its_temperature_from_0_07():
    loss = FacetClipLoss()
    assert loss.temperature == pytest.approx(0.07)
    value = loss(_unit(4, 8, seed=5).float(), _unit(4, 7, 8, seed=6).float())
    value.backward()
    assert loss.log_scale.grad is not None and loss.log_scale.grad.abs() > 0


def _sigmoid_by_hand(image, text, scale, bias):
    """Every image-text pair as a binary problem; text (N, P, D), positives = the image's own P texts."""
    n, p, _ = text.shape
    total = 0.0
    for i in range(n):
        for owner in range(n):
            for j in range(p):
                z = scale * float(image[i] @ text[owner, j]) + bias
                y = 1.0 if owner == i else -1.0
                total += math.log1p(math.exp(-y * z))
    return total / (n * p)


@pytest.mark.parametrize("positives", [1, 3, 6])
def test_multi_positive_sigmoid_loss_matches_the_pairwise_formula(positives):
    image, text = _unit(4, 8, seed=7), _unit(4, positives, 8, seed=8)
    expected = _sigmoid_by_hand(image, text, 10.0, -10.0)
    assert multi_positive_sigmoid_loss(image, text, 10.0, -10.0).item() == pytest.approx(expected, rel=1e-9)


def test_multi_positive_sigmoid_loss_with_one_positive_is_siglip():
    image, text = _unit(7, 16, seed=9), _unit(7, 1, 16, seed=10)
    scale, bias = torch.tensor(10.0, dtype=torch.float64), torch.tensor(-10.0, dtype=torch.float64)
    theirs = SigLipLoss()(image, text[:, 0], scale, bias)
    assert multi_positive_sigmoid_loss(image, text, scale, bias).item() == pytest.approx(theirs.item(), rel=1e-12)


def test_multi_positive_sigmoid_module_starts_at_the_official_values():
    loss = MultiPositiveSigmoidLoss()
    assert loss.temperature == pytest.approx(0.1) and float(loss.bias.detach()) == -10.0
    assert loss.scale.item() == pytest.approx(10.0)
    assert {n for n, _ in loss.named_parameters()} == {"log_scale", "bias"}


def test_losses_reject_mismatched_shapes():
    with pytest.raises(ValueError, match="N, K, D"):
        facet_clip_loss(_unit(3, 4), _unit(3, 4), 10.0)
    with pytest.raises(ValueError, match="does not match"):
        multi_positive_sigmoid_loss(_unit(3, 4), _unit(2, 2, 4), 10.0, -10.0)


def test_projector_is_the_official_two_layer_mlp():
    head = FlameProjector(1280, 640)
    layers = [type(m).__name__ for m in head.net]
    assert layers == ["Linear", "GELU", "Linear", "LayerNorm"]
    assert head.hidden_dim == 4096  # max(projector_dim, 4096)
    out = head(torch.randn(3, 1280))
    assert out.shape == (3, 640) and torch.allclose(out.norm(dim=-1), torch.ones(3), atol=1e-5)
    with pytest.raises(ValueError, match="width 1280"):
        head(torch.randn(3, 384))


def test_flame_positives_draws_a_subset_per_image():
    seed_everything(0)
    method = Flame(8, 6, loss="mp_sigmoid", hidden_dim=16, positives=2)
    seen = {}
    method.criterion.forward = lambda image, text: seen.setdefault("text", text).sum() * 0 + image.sum() * 0
    text = F.normalize(torch.randn(5, 4, 6), dim=-1)
    method.train()
    method.loss({"image": torch.randn(5, 8), "text": text})
    picked = seen["text"]
    assert picked.shape == (5, 2, 6)
    for i in range(5):  # each drawn row is one of the image's own facets, without repeats
        matches = [int((text[i] - row).abs().amax(dim=-1).argmin()) for row in picked[i]]
        assert len(set(matches)) == 2 and all(torch.allclose(text[i, m], r) for m, r in zip(matches, picked[i]))
    with pytest.raises(ValueError, match="mp_sigmoid"):
        Flame(8, 6, loss="facet_infonce", positives=2)


@pytest.mark.parametrize("loss", ["facet_infonce", "mp_sigmoid"])
def test_flame_trains_with_the_shared_loop(loss):
    """A toy problem with real structure: image features are a fixed linear map of the captions'
    shared content, facets are noisy views of it. Training must beat the initial loss and be
    deterministic under a seed."""
    torch.manual_seed(123)
    n, k, image_dim, text_dim = 96, 3, 12, 10
    content = torch.randn(n, text_dim)
    text = F.normalize(content[:, None] + 0.3 * torch.randn(n, k, text_dim), dim=-1)
    image = content @ torch.randn(text_dim, image_dim)
    data = {"image": image, "text": text}

    def run():
        seed_everything(0)
        method = Flame(image_dim, text_dim, loss=loss, hidden_dim=32, positives=2 if loss == "mp_sigmoid" else None)
        result = fit(method, data, data, TrainSettings(steps=60, batch_size=32, lr=3e-3, warmup_steps=5, eval_every=20),
                     seed=0, progress=False)
        return method, result

    method, result = run()
    first, best = result.history[0]["train_loss"], result.best_val_loss
    assert best < 0.7 * first
    _, again = run()
    assert [h["train_loss"] for h in again.history] == [h["train_loss"] for h in result.history]
    with torch.no_grad():  # image i's nearest caption (mean of facets) is mostly caption i
        method.eval()
        sims = method.embed_image(image) @ method.embed_text(text).T
        assert (sims.argmax(dim=1) == torch.arange(n)).float().mean() > 0.5


def test_official_caption_follows_the_official_code():
    """``multiprompteol_embeddings.py``: a "." unless the caption ends in . ? " ', double quotes to single, "?"
    to "."."""
    assert official_caption("a dog on a sofa") == "a dog on a sofa."
    assert official_caption("a dog on a sofa.") == "a dog on a sofa."
    assert official_caption("is it a dog?") == "is it a dog."
    assert official_caption('the "best" dog') == "the 'best' dog."
    assert official_caption("it's 'ok'") == "it's 'ok'"


def test_flame_embeds_a_caption_as_the_renormalised_mean_of_its_facets():
    method = Flame(4, 3, hidden_dim=8)
    facets = torch.tensor([[[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert torch.allclose(method.embed_text(facets), F.normalize(torch.tensor([[1.5, 0.5, 0.0]]), dim=-1))
    assert torch.allclose(method.embed_text(facets[:, :1]), torch.tensor([[1.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="text width 3"):
        method.embed_text(torch.randn(2, 5))

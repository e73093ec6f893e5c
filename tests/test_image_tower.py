"""lib.methods.image_tower: a frozen-feature method with an image tower trained from scratch in front (FLAME full)."""
import pytest
import torch

from lib.methods.flame import Flame
from lib.methods.image_tower import WithImageTower
from lib.nn.towers import ImageTowerConfig, tower_input

TOWER = ImageTowerConfig(kind="open_clip", open_clip_model="ViT-B-16", image_size=32, vit_width=64, vit_layers=1)


def _method() -> WithImageTower:
    torch.manual_seed(0)
    return WithImageTower(Flame(16, 24, hidden_dim=32), TOWER, 16, chunk=3)


def test_the_tower_trains_with_the_methods_own_loss():
    method = _method()
    batch = {"image": torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8), "text": torch.randn(6, 3, 24)}
    loss = method.loss(batch)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in method.tower.parameters() if p.requires_grad)
    assert all(p.grad is not None for p in method.method.image_head.parameters())


def test_test_time_embeddings_are_chunked_without_changing_them_and_features_are_refused():
    method = _method().eval()
    pixels = torch.randint(0, 256, (7, 3, 32, 32), dtype=torch.uint8)
    whole = method.method.embed_image(method.features(pixels))
    assert torch.allclose(method.embed_image(pixels), whole, atol=1e-5)  # chunks of 3, 3 and 1
    with pytest.raises(ValueError, match="uint8 pixels"):
        method.embed_image(torch.randn(7, 16))


def test_tower_input_maps_pixels_to_the_unit_range_on_the_towers_device():
    """Every tower trained from scratch reads its pixels through ``tower_input``: black is -1, white is +1, the batch
    follows the tower (meta stands in for a GPU), and augmentation resamples without leaving [-1, 1]."""
    pixels = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    pixels[1] = 255
    plain = tower_input(pixels, torch.nn.Linear(1, 1))
    assert plain.dtype == torch.float32 and plain[0].eq(-1).all() and plain[1].eq(1).all()
    assert tower_input(pixels, torch.nn.Linear(1, 1).to("meta")).device.type == "meta"
    torch.manual_seed(0)
    ramp = torch.arange(64, dtype=torch.uint8).repeat(2, 3, 64, 1) * 4
    moved = tower_input(ramp, torch.nn.Linear(1, 1), augmented=True)
    assert moved.shape == ramp.shape and moved.abs().max() <= 1 + 1e-6
    assert not torch.allclose(moved, tower_input(ramp, torch.nn.Linear(1, 1)))
    with pytest.raises(ValueError, match=r"uint8 pixels \(N, 3, H, W\), got a \(2, 8\) torch.float32"):
        tower_input(torch.zeros(2, 8), torch.nn.Linear(1, 1))

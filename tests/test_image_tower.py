"""lib.methods.image_tower: a frozen-feature method with an image tower trained from scratch in front (FLAME full)."""
import pytest
import torch

from lib.methods.flame import Flame
from lib.methods.image_tower import WithImageTower
from lib.nn.towers import ImageTowerConfig

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

"""Tests of lib.nn.heads: layer order (ShareLock's official Projection), normalisation, width errors."""
import lib  # noqa: F401  (must precede torchvision/timm/open_clip imports)

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lib.nn.heads import LinearHead, ShareLockHead


def _manual_eval_forward(head: ShareLockHead, x: torch.Tensor) -> torch.Tensor:
    """Linear -> BatchNorm1d (running stats) -> ReLU for all but the last Linear, then normalise,
    written with explicit formulas from the head's own tensors (dropout is the identity in eval)."""
    mods = list(head.net)
    linears = [m for m in mods if isinstance(m, nn.Linear)]
    norms = [m for m in mods if isinstance(m, nn.BatchNorm1d)]
    h = x
    for lin, bn in zip(linears[:-1], norms):
        h = h @ lin.weight.T + lin.bias
        h = (h - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
        h = torch.clamp(h, min=0)
    h = h @ linears[-1].weight.T + linears[-1].bias
    return h / h.norm(dim=1, keepdim=True)


def test_layer_order_matches_official_projection():
    head = ShareLockHead(10, 6, hidden_dim=32, num_layers=4, dropout=0.2)
    kinds = [type(m) for m in head.net]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Dropout] * 3 + [nn.Linear]
    linears = [m for m in head.net if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(10, 32), (32, 32), (32, 32), (32, 6)]
    assert all(m.p == 0.2 for m in head.net if isinstance(m, nn.Dropout))


def test_default_parameter_count():
    head = ShareLockHead(640, 384)  # hidden 4096, 4 layers
    h = 4096
    expected = (640 * h + h + 2 * h) + 2 * (h * h + h + 2 * h) + (h * 384 + 384)
    assert sum(p.numel() for p in head.parameters()) == expected


def test_eval_forward_equals_explicit_formula_and_is_normalised():
    torch.manual_seed(0)
    head = ShareLockHead(12, 5, hidden_dim=16, num_layers=3)
    # make BatchNorm's running statistics non-trivial
    head.train()
    for _ in range(5):
        head(torch.randn(32, 12) * 3 + 1)
    head.eval()
    x = torch.randn(9, 12)
    out = head(x)
    assert out.shape == (9, 5)
    torch.testing.assert_close(out, _manual_eval_forward(head, x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(9))
    # eval mode is deterministic (no dropout)
    assert torch.equal(head(x), out)


def test_train_mode_uses_dropout_and_batch_statistics():
    torch.manual_seed(0)
    head = ShareLockHead(8, 4, hidden_dim=64, num_layers=2, dropout=0.5).train()
    x = torch.randn(16, 8)
    a, b = head(x), head(x)
    assert not torch.allclose(a, b)  # different dropout masks
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(16))


def test_single_layer_is_one_linear_and_zero_layers_is_identity():
    torch.manual_seed(0)
    one = ShareLockHead(7, 3, num_layers=1)
    assert [type(m) for m in one.net] == [nn.Linear]
    x = torch.randn(4, 7)
    lin = one.net[0]
    torch.testing.assert_close(one(x), F.normalize(x @ lin.weight.T + lin.bias, dim=-1))

    zero = ShareLockHead(7, 7, num_layers=0)
    assert sum(p.numel() for p in zero.parameters()) == 0
    torch.testing.assert_close(zero(x), x / x.norm(dim=1, keepdim=True))
    with pytest.raises(ValueError, match="out_dim must equal in_dim"):
        ShareLockHead(7, 3, num_layers=0)


def test_linear_head_formula_and_bias_flag():
    torch.manual_seed(0)
    head = LinearHead(6, 4)
    x = torch.randn(5, 6)
    w, b = head.proj.weight, head.proj.bias
    expected = (x @ w.T + b) / (x @ w.T + b).norm(dim=1, keepdim=True)
    torch.testing.assert_close(head(x), expected)
    no_bias = LinearHead(6, 4, bias=False)
    assert no_bias.proj.bias is None
    assert sum(p.numel() for p in no_bias.parameters()) == 24
    # without bias the head is scale invariant: normalize(W(cx)) == normalize(Wx) for c > 0
    torch.testing.assert_close(no_bias(3.0 * x), no_bias(x))


@pytest.mark.parametrize("make", [lambda: ShareLockHead(640, 32, hidden_dim=16), lambda: LinearHead(640, 32)])
def test_wrong_width_raises_clear_error(make):
    head = make().eval()
    name = type(head).__name__
    with pytest.raises(ValueError) as err:
        head(torch.randn(3, 384))
    msg = str(err.value)
    assert f"{name} expects features of width 640, got 384" in msg
    assert "in_dim=384" in msg


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    head = ShareLockHead(8, 4, hidden_dim=16, num_layers=4)
    out = head(torch.randn(10, 8))
    (out * torch.randn_like(out)).sum().backward()
    for name, p in head.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name

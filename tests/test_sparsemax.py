"""Tests of lib.nn.sparsemax against the `entmax` package (a peer implementation) and its defining properties."""
from __future__ import annotations

import entmax
import pytest
import torch

from lib.nn.sparsemax import Sparsemax, sparsemax


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_equals_the_entmax_package(dim):
    torch.manual_seed(0)
    z = torch.randn(5, 7, 3, dtype=torch.float64) * 3
    torch.testing.assert_close(sparsemax(z, dim), entmax.sparsemax(z, dim=dim))
    z32 = z.float()
    torch.testing.assert_close(Sparsemax(dim)(z32), entmax.sparsemax(z32, dim=dim))


def test_gradient_equals_the_entmax_package():
    torch.manual_seed(1)
    z = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    z2 = z.detach().clone().requires_grad_()
    g = torch.randn(4, 9, dtype=torch.float64)
    (sparsemax(z) * g).sum().backward()
    (entmax.sparsemax(z2, dim=-1) * g).sum().backward()
    torch.testing.assert_close(z.grad, z2.grad)


def test_simplex_and_sparsity():
    torch.manual_seed(2)
    z = torch.randn(64, 100) * 5
    p = sparsemax(z)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(64))
    assert (p == 0).float().mean() > 0.5  # peaked scores: most entries exactly zero
    peaked = torch.tensor([[10.0, 0.0, -1.0, 2.0]])
    assert torch.equal(sparsemax(peaked), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    flat = torch.zeros(1, 8)  # equal scores: uniform, like softmax
    torch.testing.assert_close(sparsemax(flat), torch.full((1, 8), 1 / 8))


def test_shift_invariance_and_closed_form():
    z = torch.tensor([[1.0, 0.8, 0.1]], dtype=torch.float64)
    # support {0, 1}: tau = (1.0 + 0.8 - 1) / 2 = 0.4 -> [0.6, 0.4, 0]
    torch.testing.assert_close(sparsemax(z), torch.tensor([[0.6, 0.4, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(sparsemax(z + 100), sparsemax(z))


def test_gradcheck_float64():
    torch.manual_seed(3)
    for shape, dim in [((3, 6), -1), ((4, 5, 3), 1)]:
        z = (torch.randn(*shape, dtype=torch.float64) * 2).requires_grad_()
        assert torch.autograd.gradcheck(lambda x, dim=dim: sparsemax(x, dim), (z,), eps=1e-6, atol=1e-5)


def test_minus_inf_entries_get_zero_weight_and_zero_gradient():
    z = torch.tensor([[0.3, float("-inf"), 0.1, float("-inf")], [float("-inf"), 2.0, 1.9, 0.0]],
                     dtype=torch.float64, requires_grad=True)
    p = sparsemax(z)
    assert torch.isfinite(p).all()
    assert p[0, 1] == 0 and p[0, 3] == 0 and p[1, 0] == 0
    finite = torch.tensor([[0.3, 0.1], [2.0, 1.9]], dtype=torch.float64)
    torch.testing.assert_close(p[0, [0, 2]], sparsemax(finite)[0])
    torch.testing.assert_close(p, entmax.sparsemax(z.detach().clone(), dim=-1).nan_to_num(0.0))
    (p * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(z.grad).all() and z.grad[0, 1] == 0 and z.grad[1, 0] == 0


def test_all_minus_inf_row_is_an_error():
    with pytest.raises(ValueError, match="at least one finite"):
        sparsemax(torch.full((2, 3), float("-inf")))

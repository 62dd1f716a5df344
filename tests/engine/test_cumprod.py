"""cumprod: values and gradients (first and second order) against torch, zeros in the input included."""

import numpy
import pytest
import torch

import engine


@pytest.mark.parametrize(
    ("shape", "dim", "zeros"), [((5,), 0, (1,)), ((7,), 0, (1, 3, 4)), ((3, 4), 1, (1, 2)), ((2, 3, 4), -2, (0, 5))]
)
def test_cumprod_matches_torch_with_zeros(shape, dim, zeros):
    rng = numpy.random.default_rng(0)
    a = rng.standard_normal(shape)
    a.flat[list(zeros)] = 0.0
    g = rng.standard_normal(shape)
    t, e = torch.tensor(a, requires_grad=True), engine.tensor(a, requires_grad=True)
    (gt,) = torch.autograd.grad(t.cumprod(dim), t, torch.tensor(g), create_graph=True)
    (ge,) = engine.autograd.grad(e.cumprod(dim), e, engine.tensor(g), create_graph=True)
    numpy.testing.assert_allclose(engine.cumprod(e, dim).detach().numpy(), torch.cumprod(t, dim).detach().numpy())
    numpy.testing.assert_allclose(ge.detach().numpy(), gt.detach().numpy(), atol=1e-12)
    (g2t,) = torch.autograd.grad((gt * gt).sum(), t)
    (g2e,) = engine.autograd.grad((ge * ge).sum(), e)
    numpy.testing.assert_allclose(g2e.numpy(), g2t.numpy(), atol=1e-12)


def test_cumprod_finite_differences_and_integers():
    x = engine.tensor([[0.5, 0.0, 2.0], [1.5, -1.0, 0.0]], dtype=engine.float64, requires_grad=True)
    assert engine.autograd.gradcheck(lambda v: v.cumprod(1), (x,))
    assert engine.autograd.gradgradcheck(lambda v: v.cumprod(1), (x,))
    out = engine.cumprod(engine.tensor([1, 2, 3]), dim=0)
    assert out.dtype == engine.int64 and out.tolist() == [1, 2, 6]

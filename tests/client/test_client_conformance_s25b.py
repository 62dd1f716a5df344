"""Session 25's client leftovers (engine, embedded, against a server: `torch_like`), compared with PyTorch: `view` of
a transposed, step-sliced or expanded view refused at the call with PyTorch's RuntimeError (the client decides the
strides from the view ops it recorded), `is_contiguous`/`contiguous` as PyTorch's, and a singular or indefinite
matrix refused with torch.linalg.LinAlgError (a RuntimeError) where the client raised only its validation error."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.test_conformance_s23b import _refusal

STRIDED = {
    "t().view(6)": lambda t, x: x.t().view(6),
    "transpose(0, 1).view(-1)": lambda t, x: x.transpose(0, 1).view(-1),
    "permute(1, 0).view(2, 3)": lambda t, x: x.permute(1, 0).view(2, 3),
    "[:, ::2].view(4)": lambda t, x: x[:, ::2].view(4),
    "[:, 1:].view(4)": lambda t, x: x[:, 1:].view(4),
    "expand.view(12)": lambda t, x: x[:1].expand(4, 3).view(12),
    "t().view_as": lambda t, x: x.t().view_as(t.zeros(6)),
    "reshape then t().view": lambda t, x: x.reshape(3, 2).t().view(6),
}


@pytest.mark.parametrize("name", list(STRIDED))
def test_view_of_a_strided_view_refused_as_torch(torch_like, name):
    torch = pytest.importorskip("torch")
    call = STRIDED[name]
    want = _refusal(lambda: call(torch, torch.arange(6.0).reshape(2, 3)))
    got = _refusal(lambda: call(torch_like, torch_like.arange(6.0).reshape(2, 3)))
    assert type(want) is RuntimeError
    assert isinstance(got, RuntimeError), got
    assert str(want) == str(got)


LAYOUTS = {
    "x": lambda x: x,
    "t()": lambda x: x.t(),
    "t().t()": lambda x: x.t().t(),
    "t().contiguous()": lambda x: x.t().contiguous(),
    "t().reshape(6)": lambda x: x.t().reshape(6),
    "[0]": lambda x: x[0],
    "[:, 0]": lambda x: x[:, 0],
    "[:1, ::2]": lambda x: x[:1, ::2],
    "[1:]": lambda x: x[1:],
    "unsqueeze(0).transpose(0, 1)": lambda x: x.unsqueeze(0).transpose(0, 1),
    "expand": lambda x: x[:1].expand(3, 3),
    "diagonal": lambda x: x[:, :2].diagonal(),
    "view(3, 2).view(6)": lambda x: x.view(3, 2).view(6),
}


def test_layouts_as_torch(torch_like):
    torch = pytest.importorskip("torch")
    for name, make in LAYOUTS.items():
        ours, theirs = make(torch_like.arange(6.0).reshape(2, 3)), make(torch.arange(6.0).reshape(2, 3))
        assert ours.is_contiguous() == theirs.is_contiguous(), name
        assert ours.contiguous().is_contiguous(), name
        flat = ours.contiguous().view(-1)
        np.testing.assert_array_equal(flat.numpy(), theirs.contiguous().view(-1).numpy())


def test_view_program_with_gradients_matches_torch(torch_like):
    torch = pytest.importorskip("torch")

    def program(t):
        x = t.arange(6.0, dtype=t.float64).reshape(2, 3).requires_grad_()
        y = x.t().contiguous().view(6) * t.arange(1.0, 7.0, dtype=t.float64)
        z = x.transpose(0, 1).reshape(6).view(3, 2).sum(0)
        (y.sum() + (z * z).sum()).backward()
        return y.detach().numpy(), z.detach().numpy(), x.grad.numpy()

    for ours, theirs in zip(program(torch_like), program(torch), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


SINGULAR = {
    "linalg.inv": lambda t: t.linalg.inv(t.tensor([[1.0, 2.0], [2.0, 4.0]])),
    "inverse of a batch": lambda t: t.inverse(t.stack([t.eye(2), t.zeros(2, 2)])),
    "linalg.cholesky": lambda t: t.linalg.cholesky(t.tensor([[1.0, 2.0], [2.0, 1.0]])),
}


@pytest.mark.parametrize("name", list(SINGULAR))
def test_singular_matrix_raises_linalg_error(torch_like, name):
    torch = pytest.importorskip("torch")
    call = SINGULAR[name]
    want = _refusal(lambda: call(torch).tolist())
    got = _refusal(lambda: call(torch_like).tolist())
    assert isinstance(want, torch.linalg.LinAlgError)
    assert isinstance(got, torch_like.linalg.LinAlgError), repr(got)
    assert isinstance(got, RuntimeError)
    assert str(want) in str(got)


def test_singular_matrix_caught_as_linalg_error_in_a_program(torch_like):
    """A program that falls back to the pseudo-inverse when the inverse fails, as PyTorch's docs suggest."""

    def program(t):
        A = t.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=t.float64)
        try:
            return t.linalg.inv(A).tolist()
        except t.linalg.LinAlgError:
            return t.linalg.pinv(A).tolist()

    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(program(torch_like), program(torch), rtol=1e-10)

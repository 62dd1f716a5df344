"""Session 26's divergences from PyTorch 2.13, each a program a user writes, run with `torch` bound to the engine
and to PyTorch: casts to the small integer dtypes (`x.to(torch.uint8)`, `x.byte()`, `x.type(torch.ByteTensor)`).
Gradients are checked twice: float64 finite differences (`engine.gradcheck`) and PyTorch."""

from __future__ import annotations

import numpy
import pytest

import engine


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


SMALL_INTEGER_CASTS = {
    "to(uint8)": lambda t, x: x.to(t.uint8),
    "to(int8)": lambda t, x: x.to(t.int8),
    "to(int16)": lambda t, x: x.to(t.int16),
    "to(dtype=int16)": lambda t, x: x.to(dtype=t.int16),
    "to('cpu', uint8)": lambda t, x: x.to("cpu", t.uint8),
    "to(an int8 tensor)": lambda t, x: x.to(t.tensor([1], dtype=t.int8)),
    "type_as(an int8 tensor)": lambda t, x: x.type_as(t.tensor([1], dtype=t.int8)),
    "to(int8, copy=True)": lambda t, x: x.to(t.int8, copy=True),
    "byte()": lambda t, x: x.byte(),
    "char()": lambda t, x: x.char(),
    "short()": lambda t, x: x.short(),
    "type(torch.ByteTensor)": lambda t, x: x.type(t.ByteTensor),
    "type('torch.ShortTensor')": lambda t, x: x.type("torch.ShortTensor"),
    "type(torch.int8)": lambda t, x: x.type(t.int8),
}
SOURCES = {
    "float32": lambda t: t.tensor([-3.7, -1.2, -0.5, 0.0, 1.9, 127.5, 200.3, 255.9]),
    "float64, requiring grad": lambda t: t.tensor([-3.7, 0.5, 1.9, 126.2], dtype=t.float64, requires_grad=True),
    "int32": lambda t: t.tensor([-300, -129, -1, 0, 127, 128, 255, 256, 40000], dtype=t.int32),
    "int64": lambda t: t.tensor([-300, -129, -1, 0, 127, 128, 255, 256, 40000]),
    "bool": lambda t: t.tensor([True, False]),
    "uint8": lambda t: t.tensor([200, 3, 0], dtype=t.uint8),
}


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("cast", SMALL_INTEGER_CASTS)
def test_casts_to_small_integers_are_pytorchs(cast, source, oracle):
    """PyTorch's values (wrap-around of in-range values, truncation toward zero) and dtype, with no gradient; the
    engine refused `to(torch.uint8)` (not one of its cast op's dtypes)."""
    ours, theirs = (SMALL_INTEGER_CASTS[cast](torch, SOURCES[source](torch)) for torch in (engine, oracle))
    assert str(ours.dtype) == str(theirs.dtype)
    assert ours.tolist() == theirs.tolist()
    assert (ours.requires_grad, ours.grad_fn) == (theirs.requires_grad, None)


def test_small_integer_tensor_types_are_pytorchs(oracle):
    """`torch.ByteTensor(2, 3)`, `torch.CharTensor([1, -2])`, `x.short().type()`, `isinstance(x, torch.ByteTensor)`."""
    for torch in (engine, oracle):
        x = torch.tensor([1.7, -2.2])
        assert torch.ByteTensor(2, 3).tolist() == [[0] * 3] * 2
        assert str(torch.CharTensor([1, -2]).dtype) == "torch.int8"
        assert (x.short().type(), x.char().type(), x.byte().type()) == (
            "torch.ShortTensor",
            "torch.CharTensor",
            "torch.ByteTensor",
        )
        assert isinstance(x.byte(), torch.ByteTensor) and not isinstance(x.byte(), torch.CharTensor)


def test_an_integer_cast_cannot_require_grad(oracle):
    """An integer result of a float Variable requiring grad refuses `requires_grad_()`, with PyTorch's error."""
    errors = []
    for torch in (engine, oracle):
        with pytest.raises(RuntimeError) as caught:
            torch.tensor([1.5], requires_grad=True).to(torch.int16).requires_grad_(True)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    cast = engine.tensor([1.5, 2.5], dtype=engine.float64, requires_grad=True)
    out = (cast * cast.to(engine.int8)).sum()  # the integer factor is a constant: d/dx = int8(x)
    out.backward()
    numpy.testing.assert_array_equal(cast.grad.numpy(), [1.0, 2.0])

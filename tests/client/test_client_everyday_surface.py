"""The everyday PyTorch surface (issue 22, item 4) through the client: every program of
tests/everyday_programs.py embedded and against a live server, compared with PyTorch (values,
dtypes, requires_grad, gradients); dtypes, `set_default_dtype` and `.data` on the client; and a
hostile index reaching the server as a 4xx that names its node."""

from __future__ import annotations

import numpy as np
import pytest

import client
from client.errors import RequestError
from tests import everyday_programs as programs


@pytest.fixture(params=["embedded", "remote"])
def torch_like(request):
    url = request.getfixturevalue("server").url if request.param == "remote" else None
    with client.connect(url):
        yield client


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_program_matches_torch(name, torch_like):
    programs.assert_matches_torch(torch_like, programs.PROGRAMS[name], name)


def test_dtypes_print_as_torch_on_the_client(torch_like, oracle):
    x = torch_like.ones(2) * 3
    assert str(x.dtype) == str(oracle.float32) and repr(torch_like.float64) == "torch.float64"
    assert x.dtype == torch_like.float32 == np.float32 and x.dtype.is_floating_point and x.dtype.itemsize == 4
    assert (x // 2).dtype == torch_like.float32 and str((torch_like.tensor([7]) % 2).dtype) == "torch.int64"
    assert torch_like.finfo(x.dtype).eps == oracle.finfo(oracle.float32).eps


def test_set_default_dtype_on_the_client(torch_like):
    try:
        torch_like.set_default_dtype(torch_like.float64)
        x = torch_like.tensor([1.5, 2.5], requires_grad=True)
        y = (x * torch_like.ones(2)).sum()
        y.backward()
        assert x.dtype == torch_like.float64 and y.dtype == torch_like.float64 and x.grad.tolist() == [1.0, 1.0]
        assert torch_like.tensor([1, 2]).dtype == torch_like.int64
    finally:
        torch_like.set_default_dtype(torch_like.float32)
    assert torch_like.zeros(1).dtype == torch_like.float32


def test_data_updates_a_parameter_in_place(torch_like):
    p = torch_like.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (p * p).sum().backward()
    d = p.data
    assert d.requires_grad is False and d.grad_fn is None
    p.data += -0.5 * p.grad
    p.data[0] = 5.0
    assert p.tolist() == [5.0, 0.0, 0.0] and d.tolist() == [5.0, 0.0, 0.0]
    p.data.copy_(torch_like.tensor([7.0, 8.0, 9.0]))
    assert (p * 1).tolist() == [7.0, 8.0, 9.0]


@pytest.mark.parametrize(
    ("program", "op"),
    [
        ("x[torch.tensor([0, 5])]", "getitem"),
        ("x[[0, 3]]", "getitem"),
        ("x[range(2, 4)]", "getitem"),
        ("torch.index_add(x, 0, torch.tensor([1, 9]), torch.ones(2))", "index_add"),
        ("x.index_put((torch.tensor([4]),), torch.tensor(1.0), accumulate=True)", "index_add"),
    ],
)
def test_an_index_out_of_range_is_a_4xx_naming_the_node(torch_like, program, op):
    x = torch_like.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RequestError, match="out of bounds") as err:
        out = eval(program, {"torch": torch_like, "x": x})
        out.sum().backward()
    assert err.value.status == 422 and err.value.node and f"node {err.value.node!r} ({op})" in err.value.message

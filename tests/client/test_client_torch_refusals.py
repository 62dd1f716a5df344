"""What PyTorch refuses, refused with its exception and message on the engine, the embedded client and a live
server: a subtraction with a bool tensor, an integer division by zero, a matrix product (mm, matmul, bmm, einsum,
addmm, baddbmm, linear, tensordot) or a lerp of two dtypes, `fmod(number, tensor)`. A refusal that depends on the
dtypes is raised at the call on every side; one that depends on values (a zero divisor) when a lazy client's value
is fetched (a 4xx from the server, a RuntimeError naming the node)."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

F32, F64 = "float32", "float64"


def _ones(m, shape, dtype=F32):
    return m.ones(*shape, dtype=getattr(m, dtype))


def _refusal(m, fn):
    """(exception type, message) of fn(m), its result's values fetched (a lazy client's error comes then)."""
    with pytest.raises(Exception) as info:
        np.asarray(fn(m).detach().numpy())
    return info.value


def _same_refusal(m, fn):
    want = _refusal(torch, fn)
    got = _refusal(m, fn)
    assert isinstance(got, type(want)), (type(got), got, want)
    assert str(want).strip() in str(got), (str(got), str(want))


BOOL = [True, False, True]
SUBTRACTIONS = {
    "bool - int": lambda m: m.tensor(BOOL) - m.tensor([1, 2, 3]),
    "int - bool": lambda m: m.tensor([1, 2, 3]) - m.tensor(BOOL),
    "float - bool": lambda m: m.tensor([1.0, 2.0, 3.0]) - m.tensor(BOOL),
    "bool - 1": lambda m: m.tensor(BOOL) - 1,
    "1.5 - bool": lambda m: 1.5 - m.tensor(BOOL),
    "sub(bool, float)": lambda m: m.sub(m.tensor(BOOL), m.tensor([0.5, 1.0, 2.0])),
    "sub(int, bool, alpha=2)": lambda m: m.sub(m.tensor([1, 2, 3]), m.tensor(BOOL), alpha=2),
}


@pytest.mark.parametrize("case", list(SUBTRACTIONS))
def test_a_subtraction_with_a_bool_tensor_is_refused(torch_like, case):
    _same_refusal(torch_like, SUBTRACTIONS[case])


def test_an_in_place_subtraction_of_a_bool_tensor_is_refused(torch_like):
    def fn(m):
        x = m.tensor([1, 2, 3])
        x -= m.tensor(BOOL)
        return x

    _same_refusal(torch_like, fn)


DIVISIONS = {
    "int // tensor": lambda m: m.tensor([7, 8]) // m.tensor([2, 0]),
    "int % tensor": lambda m: m.tensor([7, 8]) % m.tensor([0, 3]),
    "int // 0": lambda m: m.tensor([7, 8]) // 0,
    "7 % int": lambda m: 7 % m.tensor([0, 1]),
    "fmod": lambda m: m.fmod(m.tensor([7, 8]), m.tensor([0, 3])),
    "remainder": lambda m: m.remainder(m.tensor([7, 8], dtype=m.uint8), m.tensor([3, 0], dtype=m.uint8)),
    "floor_divide by a bool": lambda m: m.floor_divide(m.tensor([7, 8]), m.tensor([True, False])),
}


@pytest.mark.parametrize("case", list(DIVISIONS))
def test_an_integer_division_by_zero_is_refused(torch_like, case):
    _same_refusal(torch_like, DIVISIONS[case])


def test_divisions_by_zero_that_pytorch_computes_are_computed(torch_like):
    for fn in (
        lambda m: m.tensor([7.0, 8.0]) // m.tensor([2.0, 0.0]),  # floating: IEEE results
        lambda m: m.fmod(m.tensor([7.0, -8.0]), 0),
        lambda m: m.tensor([], dtype=m.int64) // 0,  # nothing is divided
    ):
        want = fn(torch).numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            got = np.asarray(fn(torch_like).numpy())
        np.testing.assert_array_equal(got, want)


# (first shape, second shape) of every kind of kernel matmul reaches: dot, addmv, mm (also folded), batched
PRODUCT_SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 2)),
    ((2, 3), (3, 2)),
    ((4, 2, 3), (3, 2)),
    ((4, 2, 3), (4, 3, 2)),
    ((2, 3), (4, 3, 2)),
]


@pytest.mark.parametrize("shapes", PRODUCT_SHAPES, ids=str)
@pytest.mark.parametrize("dtypes", [(F32, F64), (F64, F32), (F32, "int64"), ("int64", F32), ("float16", F32)])
def test_a_matrix_product_of_two_dtypes_is_refused(torch_like, shapes, dtypes):
    a, b = shapes

    def fn(m):
        return m.matmul(_ones(m, a, dtypes[0]), _ones(m, b, dtypes[1]))

    _same_refusal(torch_like, fn)


PRODUCTS = {
    "mm": lambda m: m.mm(_ones(m, (2, 3)), _ones(m, (3, 2), F64)),
    "@": lambda m: _ones(m, (2, 3), F64) @ _ones(m, (3, 2)),
    "bmm": lambda m: m.bmm(_ones(m, (4, 2, 3), F64), _ones(m, (4, 3, 2))),
    "dot": lambda m: m.dot(_ones(m, (3,)), _ones(m, (3,), "int64")),
    "mv": lambda m: m.mv(_ones(m, (2, 3), F64), _ones(m, (3,))),
    "einsum ij,jk": lambda m: m.einsum("ij,jk->ik", _ones(m, (2, 3)), _ones(m, (3, 2), F64)),
    "einsum i,i": lambda m: m.einsum("i,i->", _ones(m, (3,), F64), _ones(m, (3,))),
    "einsum ij,ij->i": lambda m: m.einsum("ij,ij->i", _ones(m, (2, 3)), _ones(m, (2, 3), "int64")),
    "addmm self": lambda m: m.addmm(_ones(m, (2, 2), F64), _ones(m, (2, 3)), _ones(m, (3, 2))),
    "addmm mat1": lambda m: m.addmm(_ones(m, (2, 2)), _ones(m, (2, 3), F64), _ones(m, (3, 2))),
    "addmm mat2": lambda m: m.addmm(_ones(m, (2, 2)), _ones(m, (2, 3)), _ones(m, (3, 2), F64)),
    "addmv": lambda m: m.addmv(_ones(m, (2,)), _ones(m, (2, 3), F64), _ones(m, (3,))),
    "baddbmm input": lambda m: m.baddbmm(_ones(m, (4, 2, 2), F64), _ones(m, (4, 2, 3)), _ones(m, (4, 3, 2))),
    "baddbmm batch2": lambda m: m.baddbmm(_ones(m, (4, 2, 2)), _ones(m, (4, 2, 3)), _ones(m, (4, 3, 2), F64)),
    "tensordot": lambda m: m.tensordot(_ones(m, (2, 3), F64), _ones(m, (3, 2)), dims=1),
    "linear": lambda m: m.nn.functional.linear(_ones(m, (5, 2, 3)), _ones(m, (4, 3), F64)),
    "linear bias": lambda m: m.nn.functional.linear(_ones(m, (2, 3)), _ones(m, (4, 3)), _ones(m, (4,), F64)),
    "linear input": lambda m: m.nn.functional.linear(_ones(m, (2, 3), F64), _ones(m, (4, 3)), _ones(m, (4,))),
    "lerp end": lambda m: m.lerp(_ones(m, (3,)), _ones(m, (3,), F64), 0.5),
    "lerp 0-d end": lambda m: m.lerp(_ones(m, (3,)), m.tensor(1.0, dtype=m.float64), 0.5),
    "lerp weight": lambda m: m.lerp(_ones(m, (3,)), _ones(m, (3,)), _ones(m, (3,), F64)),
}


@pytest.mark.parametrize("case", list(PRODUCTS))
def test_products_and_lerp_of_two_dtypes_are_refused(torch_like, case):
    _same_refusal(torch_like, PRODUCTS[case])


def test_what_pytorch_computes_across_dtypes_still_is(torch_like):
    for fn in (
        lambda m: m.einsum("ij,j->ij", _ones(m, (2, 3)), _ones(m, (3,), F64)),  # no contraction: promoted
        lambda m: m.einsum("ij,k->", _ones(m, (2, 3)), _ones(m, (4,), F64)),
        lambda m: m.lerp(_ones(m, (3,)), _ones(m, (3,)), m.tensor(0.25, dtype=m.float64)),  # a 0-d weight
        lambda m: m.outer(_ones(m, (3,)), _ones(m, (2,), F64)),
        lambda m: m.tensor([True, False]) + m.tensor([1, 2]),
    ):
        want, got = fn(torch), fn(torch_like)
        assert str(got.dtype) == str(want.dtype)
        np.testing.assert_allclose(np.asarray(got.detach().numpy()), want.numpy())


def test_fmod_of_a_number_and_a_tensor_is_a_type_error(torch_like):
    with pytest.raises(TypeError) as want:
        torch.fmod(7.5, torch.ones(3))
    with pytest.raises(TypeError, match=re.escape(str(want.value).splitlines()[0])):
        torch_like.fmod(7.5, torch_like.ones(3))
    assert torch_like.remainder(7.5, torch_like.tensor([2.0])).tolist() == [1.5]  # (remainder takes one)

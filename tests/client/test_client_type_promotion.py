"""Type promotion on the embedded client and a live server (`torch_like`), against PyTorch: the dtype a
recorded op says before the server computes (the client's shape rule, the numbers' typing) is the dtype the
server computes and PyTorch's (the engine's table: tests/engine/test_type_promotion.py)."""

from __future__ import annotations

import pytest

from tests.engine.test_type_promotion import FIX, GRAD_CASES, LEFT, OPS, RIGHT, build, check, gradients, pairs, torch

pytestmark = pytest.mark.torch

SUBSET = ["add", "truediv", "floordiv", "pow", "lt", "where", "maximum", "atan2", "cat"]
DTYPES = ("bool", "uint8", "int8", "int64", "float16", "float32", "float64")


def _kept(spec) -> bool:
    return not isinstance(spec, tuple) or spec[0] in DTYPES


def _recorded(m, name, left, right):
    """The op recorded by the client (a float operand requires grad: nothing is computed at the call)."""
    x, y = build(m, left, LEFT), build(m, right, RIGHT)
    for v in (x, y):
        if not isinstance(v, (bool, int, float)) and v.dtype.is_floating_point:
            v.requires_grad_(True)
    return FIX.get(name, OPS[name][0])(m, x, y)


@pytest.mark.parametrize("name", SUBSET)
def test_client_ops_promote_as_pytorch_and_the_inferred_dtype_is_the_computed_one(torch_like, name):
    cases = [(left, right) for left, right in pairs(name) if _kept(left) and _kept(right)]
    compared = 0
    for left, right in cases:
        got = check(torch_like, name, left, right, to_numpy=lambda v: v.detach().numpy())
        if got is None:
            continue
        compared += 1
        recorded = _recorded(torch_like, name, left, right)
        inferred = recorded.dtype  # what the client says before anything computes it
        assert str(inferred) == str(got.dtype), f"{name}({left}, {right}): recorded {inferred}, computed {got.dtype}"
        assert recorded.detach().numpy().dtype == recorded.dtype, f"{name}({left}, {right})"
    assert compared > len(cases) // 2


@pytest.mark.parametrize(("name", "left", "right"), GRAD_CASES[:6], ids=lambda c: str(c))
def test_client_gradients_of_mixed_dtype_ops_keep_each_inputs_dtype(torch_like, name, left, right):
    want, want_grads = gradients(torch, name, left, right)
    got, got_grads = gradients(torch_like, name, left, right)
    assert str(got.dtype) == str(want.dtype)
    for g, w in zip(got_grads, want_grads):
        assert str(g.dtype) == str(w.dtype)
        assert g.numpy().tolist() == pytest.approx(w.numpy().tolist(), rel=1e-2)


def test_integers_in_floating_ops_take_this_sides_default_dtype(torch_like):
    """`int / int`, `sqrt(int)`, `int * 2.5`: the client's default dtype, which a server does not share."""
    a, b = torch_like.tensor([1, 2, 3]), torch_like.tensor([2, 4, 5])
    try:
        torch_like.set_default_dtype(torch_like.float64)
        results = [a / b, torch_like.sqrt(a), torch_like.atan2(a, b), a * 2.5, a / 2]
        for out in results:
            assert out.dtype == torch_like.float64 and out.numpy().dtype == "float64"
        assert results[0].tolist() == [0.5, 0.5, 0.6]
    finally:
        torch_like.set_default_dtype(torch_like.float32)
    assert (a / b).dtype == torch_like.float32 and (a / b).numpy().dtype == "float32"

"""Session 23's conformance programs: small programs as users write them from today's tutorials, run with
`torch` bound to the engine, the client embedded and the client against a live server (`torch_like`), and
compared with real PyTorch (the oracle): values, gradients, dtypes, grad_fn names and exceptions."""

from __future__ import annotations

import numpy as np
import pytest

UNARY_SAVING_RESULT = ("exp", "sqrt", "tanh", "sigmoid", "tan")


def outcome(fn):
    """fn()'s result, or (exception type's name, whether it is a RuntimeError, the message's start)."""
    try:
        return fn()
    except RuntimeError as error:
        return ("RuntimeError", str(error).split(":")[0])


def input_modified_after_a_result_saving_op(torch, name):
    """PyTorch saves exp/sqrt/tanh/sigmoid/tan's result, not their input: changing the input in place
    before the backward is allowed; changing the result is refused."""
    a = torch.tensor([1.0, 0.5], requires_grad=True)
    b = a * 1
    c = getattr(b, name)()
    b.add_(1)
    c.sum().backward()
    d = getattr(a * 1, name)()
    d.mul_(2)
    return a.grad.tolist(), outcome(lambda: d.sum().backward())


@pytest.mark.parametrize("name", UNARY_SAVING_RESULT)
def test_result_saving_ops_allow_their_input_changed_in_place(torch_like, name):
    torch = pytest.importorskip("torch")
    (got, got_error), (want, want_error) = (
        input_modified_after_a_result_saving_op(m, name) for m in (torch_like, torch)
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (
        got_error
        == want_error
        == (
            "RuntimeError",
            "one of the variables needed for gradient computation has been modified by an inplace operation",
        )
    )


@pytest.mark.parametrize("name", UNARY_SAVING_RESULT)
def test_a_second_backward_through_a_result_saving_op_is_refused(torch_like, name):
    x = torch_like.tensor([0.3, 0.4], requires_grad=True)
    y = getattr(x, name)().sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    assert x.grad is not None  # the first backward's gradient stays, not doubled
    y2 = getattr(x, name)().sum()
    y2.backward(retain_graph=True)
    y2.backward()  # retained: a second backward is fine

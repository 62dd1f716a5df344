"""PyTorch's views under autograd (engine.views): an in-place op on a view changes its base's values and history
(`CopySlices`), a base's in-place change reaches its views, version counters are shared, `_base`/`_is_view()`
answer as torch's, and torch's errors. Checked against torch and by finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.view_programs import (
    INPLACE,
    OVERLAP,
    OVERLAPPING,
    VIEWS,
    C,
    X,
    base_changed,
    brief,
    case,
    detached,
    overlapping,
    run,
    saved_view_refuses,
)

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("inplace", sorted(INPLACE))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_an_inplace_op_on_a_view_is_torchs(view, inplace):
    got, want = case(engine, view, inplace), case(torch, view, inplace)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert got[3] == want[3] == "CopySlices"


@pytest.mark.parametrize(
    "view, inplace",
    [
        ("rows", "mul_"),
        ("t of view", "exp_"),
        ("element", "iadd"),
        ("view of view", "setitem"),
        ("diagonal of t", "mul_"),
    ],
)
def test_the_gradients_are_finite_differences(view, inplace):
    x = engine.tensor(X.copy().reshape(3, 4), requires_grad=True)
    c = engine.tensor(C.copy(), requires_grad=True)
    assert engine.autograd.gradcheck(lambda x, c: run(engine, view, inplace, x, c), (x, c))
    assert engine.autograd.gradgradcheck(lambda x, c: run(engine, view, inplace, x, c), (x, c))


def test_create_graph_through_copy_slices_is_torchs():
    got, want = brief(engine), brief(torch)
    np.testing.assert_allclose(got[1], [32.274506, 23.77811, 6.0, 4.0], rtol=1e-6)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert got[3] == want[3] == "CopySlices"


def test_a_change_of_the_base_reaches_its_views_and_retain_graph_holds():
    got, want = base_changed(engine), base_changed(torch)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    np.testing.assert_allclose(got[2], 2 * got[1])
    assert got[3:] == want[3:] == (2, 2)


def test_a_saved_view_whose_base_changed_refuses_a_backward():
    for m in (engine, torch):
        x = m.tensor(X.copy(), requires_grad=True)
        saved_view_refuses(m, x)
        y = x * 1
        z = y * y
        y[0:2].mul_(2)  # and the other way round: the base saved, a view changed
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


def test_no_grad_writes_through_and_the_version_is_shared():
    for m in (engine, torch):
        y = m.zeros(3, 4)
        v = y.t()[1]
        with m.no_grad():
            v[2] = 5.0
        y[0, 0] = 1.0
        assert y[2, 1].item() == 5.0 and y._version == v._version == 2
        assert v._base is y and y.t()._base is y and y._base is None
        assert v._is_view() and not y._is_view() and not y[[0]]._is_view() and not y.t().reshape(12)._is_view()
        assert y.diagonal(1)._is_view() and not y.diag()._is_view()


@pytest.mark.parametrize(
    "program, message",
    [
        (lambda m, x: x[0:2].mul_(2), "a view of a leaf Variable that requires grad"),
        (lambda m, x: x.view(2, 3)[1].__setitem__(0, 2.0), "a view of a leaf Variable that requires grad"),
        (lambda m, x: (x * 1).unbind()[1].mul_(2), "Output 1 of Unbind is a view and is being modified inplace"),
        (lambda m, x: (x * 1).split(2)[0].exp_(), "Output 0 of Split is a view and is being modified inplace"),
        (lambda m, x: (x * 1).chunk(3)[2].exp_(), "Output 2 of Split is a view"),
        (lambda m, x: (x * 1).split([4, 2])[1].zero_(), "Output 1 of SplitWithSizes is a view"),
        (lambda m, x: _made_without_grad(m, x).mul_(2), "A view was created in no_grad mode"),
        (lambda m, x: _made_without_grad(m, m.ones(6)).mul_(x[0:2]), "A view was created in no_grad mode"),
        (lambda m, x: (x * 1).as_strided((2, 3), (0, 1)).add_(1), "more than one element of the written-to"),
        (lambda m, x: x.as_strided((3, 3), (1, 2)), r"setStorage: sizes \[3, 3\], strides \[1, 2\], storage offset 0"),
        (lambda m, x: x.as_strided((2,), (-1,), 2), "as_strided: Negative strides are not supported"),
    ],
)
def test_torchs_errors(program, message):
    for m in (engine, torch):
        x = m.tensor(X[:6].copy(), requires_grad=True)
        with pytest.raises(RuntimeError, match=message):
            program(m, x)


def _made_without_grad(m, base):
    y = base * 1
    with m.no_grad():
        return y[0:2]


def test_views_of_many_outputs_and_no_grad_views_change_under_no_grad():
    for m in (engine, torch):
        y = m.tensor(X[:6].copy(), requires_grad=True) * 1
        a, b = y.split(3)
        with m.no_grad():
            b.mul_(2)
            a[0] = 9.0
        np.testing.assert_allclose(y.detach().numpy(), [9.0, *X[1:3], *(2 * X[3:6])])


@pytest.mark.parametrize("write", sorted(OVERLAPPING))
def test_an_expanded_view_is_written_or_refused_as_torchs(write):
    try:
        want = overlapping(torch, write)
    except RuntimeError as error:
        if write in ("fill_", "zero_"):  # (torch's backward raises; the values written are torch's)
            assert overlapping(engine, write)[1].tolist() == [[2.0 if write == "fill_" else 0.0] * 4] * 3
            return
        assert OVERLAP in str(error)
        with pytest.raises(RuntimeError, match=OVERLAP):
            overlapping(engine, write)
        with engine.no_grad(), pytest.raises(RuntimeError, match=OVERLAP):
            engine.zeros(4).expand(3, 4).__setitem__((slice(None), 1), 2.0)
        return
    for g, w in zip(overlapping(engine, write), want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_a_detached_variable_shares_the_version_counter_and_memory():
    assert detached(engine) == detached(torch) == (2, 2, 2, 1, None, False, True)
    for m in (engine, torch):
        y = m.tensor(X[:4].copy(), requires_grad=True) * 1
        d = y.detach()
        d[1:3].mul_(m.tensor(C, requires_grad=True))  # the detached one's history changes, its source's not
        assert type(d.grad_fn).__name__ == "CopySlices" and type(y.grad_fn).__name__ == "MulBackward0"
        np.testing.assert_allclose(y.detach().numpy(), [X[0], X[1] * C[0], X[2] * C[1], X[3]])


def test_a_view_made_without_grad_of_a_base_that_requires_grad_is_torchs():
    for m in (engine, torch):
        y = m.tensor(X[:4].copy(), requires_grad=True) * 1
        with m.no_grad():
            v = y[0:2]
        assert v.requires_grad and v.is_leaf and v.grad_fn is None and v._base is y and v[1:].requires_grad
        (v * y[2:4]).sum().backward()  # used before its family changes: PyTorch's leaf
        with m.no_grad():
            y.mul_(2)
        stale = "created in no_grad mode and its base or another view of its base"
        with pytest.raises(RuntimeError, match=stale):
            v.grad_fn  # noqa: B018
        with pytest.raises(RuntimeError, match=stale):
            (v * y[2:]).sum().backward()
        with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
            v.mul_(2)


@pytest.mark.parametrize("side", ["engine", "client"])
def test_detaching_a_variable_every_step_keeps_its_family_bounded(side):
    # each detach joins the source's version family; the dead ones must not pile up (a parameter detached per step)
    import client
    from engine import views

    x = (engine if side == "engine" else client).randn(3, requires_grad=True)
    for _ in range(1000):
        x.detach()
    kept = x.detach()
    assert len(views.KNOWN[id(x)]) <= 17
    x.data.add_(1.0)  # the family is still one: a live detached one still shares the counter
    assert kept._version == x._version

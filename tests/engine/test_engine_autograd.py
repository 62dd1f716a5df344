"""Autograd semantics: backward, grad(), grad modes, retained graphs, accumulation, in-place
checks and higher-order derivatives, as PyTorch defines them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import engine
from engine import Variable, enable_grad, grad, no_grad

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (used as the oracle)")


def leaf(values, requires_grad=True):
    return Variable(np.asarray(values, dtype=np.float64), requires_grad=requires_grad)


# --- requires_grad ---------------------------------------------------------------------------


def test_requires_grad_is_contagious():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0], requires_grad=False)
    assert (a * b).requires_grad and (b + a).requires_grad and (a.sum() * 2).requires_grad
    c = b * 2 + b.exp()
    assert not c.requires_grad and c.grad_fn is None and c.is_leaf
    assert (c + a).requires_grad


def test_requires_grad_on_non_leaf_raises():
    y = leaf([1.0]) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad = True
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)
    assert y.requires_grad_(True) is y and y.requires_grad  # (PyTorch 2.13: no error, a non-leaf requires grad)


def test_requires_grad_can_be_set_on_leaf():
    x = leaf([1.0, 2.0], requires_grad=False)
    assert x.requires_grad_() is x and x.requires_grad
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    x.requires_grad = False
    assert not (x * x).requires_grad


@pytest.mark.parametrize("array", [np.arange(3), np.arange(3, dtype=np.int32), np.array([True, False])])
def test_integer_and_bool_variables_cannot_require_grad(array):
    with pytest.raises(RuntimeError, match="floating point"):
        Variable(array, requires_grad=True)
    v = Variable(array)
    with pytest.raises(RuntimeError, match="floating point"):
        v.requires_grad = True
    assert not v.requires_grad


def test_backward_on_variable_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        leaf([1.0], requires_grad=False).sum().backward()


# --- backward basics ---------------------------------------------------------------------------


def test_backward_on_non_scalar_without_gradient_raises():
    y = leaf([1.0, 2.0]) * 2
    with pytest.raises(RuntimeError, match="scalar"):
        y.backward()
    with pytest.raises(RuntimeError, match="shape"):
        y.backward(np.ones(3))


def test_backward_on_single_element_non_scalar_is_implicit():
    x = leaf([[2.0]])
    (x * x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[4.0]])


def test_backward_on_leaf_itself():
    x = leaf([1.0, 2.0])
    g = np.array([5.0, 6.0])
    x.backward(g)
    np.testing.assert_array_equal(x.grad.numpy(), g)
    g[0] = 100.0  # the gradient handed in is copied, not aliased
    x.backward(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 7.0])


def test_gradient_accumulates_across_backward_calls_and_none_resets():
    w = leaf([1.0, -2.0, 3.0])
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 2 * w.detach().numpy())
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 4 * w.detach().numpy())
    w.grad = None
    (w * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0, 3.0])
    w.grad.zero_()
    (w * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0, 3.0])


def test_leaves_sharing_a_gradient_get_separate_arrays():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    ((a + b) * 2).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])
    assert not np.shares_memory(a.grad.data, b.grad.data)
    (a * 10).sum().backward()  # accumulating into a.grad must leave b.grad alone
    np.testing.assert_array_equal(a.grad.numpy(), [12.0, 12.0])
    np.testing.assert_array_equal(b.grad.numpy(), [2.0, 2.0])


def test_same_leaf_used_twice_sums_its_gradients():
    x = leaf([1.0, 2.0])
    (x * x + x * 3 + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * x.detach().numpy() + 4)


def test_broadcast_gradients_are_summed_to_input_shape():
    x, b = leaf(np.ones((3, 4))), leaf([1.0, 2.0, 3.0, 4.0])
    s = leaf(2.0)
    (x * b * s).sum().backward()
    np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 6.0))
    assert s.grad.shape == () and s.grad.item() == 30.0


def test_float32_leaf_gets_float32_gradient_from_float64_graph():
    x = Variable(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    y = x * np.array([3.0, 4.0])  # float64 array: the product is float64
    assert y.dtype == np.float64
    y.sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


# --- retain_graph and the freed graph ------------------------------------------------------------


def test_second_backward_through_freed_graph_raises():
    x = leaf([1.0, 2.0, 3.0])
    z = (x * x).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        z.backward()


def test_retain_graph_allows_second_backward_and_doubles_grads():
    x = leaf([1.0, 2.0, 3.0])
    z = (x * x).exp().sum()
    z.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="retain_graph"):
        z.backward()


def test_grad_frees_graph_unless_retained():
    x = leaf([1.0, 2.0])
    z = (x * x).sum()
    grad(z, x, retain_graph=True)
    (g,) = grad(z, x)
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="retain_graph"):
        grad(z, x)


# --- retain_grad -------------------------------------------------------------------------------


def test_retain_grad_on_non_leaf():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.retain_grad()
    assert y.retains_grad
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), 2 * y.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), 4 * y.detach().numpy())


def test_non_leaf_grad_stays_none_without_retain_grad():
    x = leaf([1.0, 2.0])
    y = x * 2
    (y * y).sum().backward()
    assert y.grad is None and not y.retains_grad
    assert x.grad is not None


def test_retain_grad_on_leaf_is_noop_and_on_constant_raises():
    x = leaf([1.0])
    x.retain_grad()
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0])
    with pytest.raises(RuntimeError):
        leaf([1.0], requires_grad=False).retain_grad()


def test_retained_grad_accumulates_across_backwards():
    x = leaf([1.0, 2.0])
    y = x * 3
    y.retain_grad()
    z = y.sum()
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])


# --- detach, no_grad, enable_grad ----------------------------------------------------------------


def test_detach_shares_data_and_cuts_graph():
    x = leaf([1.0, 2.0])
    y = x * 2
    d = y.detach()
    assert d.grad_fn is None and not d.requires_grad and d.is_leaf
    assert np.shares_memory(d.data, y.data)
    np.testing.assert_array_equal(d.detach().numpy(), y.detach().numpy())
    out = (d * x).sum()
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), d.numpy())  # no gradient through d


def test_no_grad_records_nothing():
    x = leaf([1.0, 2.0])
    with no_grad():
        assert not engine.is_grad_enabled()
        y = x * 2
        z = (y + x).sum()
        with enable_grad():
            assert engine.is_grad_enabled()
            w = x * 2
        v = x.exp()
    assert engine.is_grad_enabled()
    for r in (y, z, v):
        assert r.grad_fn is None and not r.requires_grad
    assert w.grad_fn is not None and w.requires_grad
    w.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_no_grad_restores_mode_after_exception():
    with pytest.raises(ValueError):
        with no_grad():
            raise ValueError("boom")
    assert engine.is_grad_enabled()


def test_set_grad_enabled():
    x = leaf([1.0])
    engine.set_grad_enabled(False)
    try:
        assert (x * 2).grad_fn is None
    finally:
        engine.set_grad_enabled(True)
    assert (x * 2).grad_fn is not None


def test_grad_mode_is_thread_local():
    seen = {}

    def worker():
        seen["enabled"] = engine.is_grad_enabled()
        seen["records"] = (leaf([1.0]) * 2).grad_fn is not None

    with no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen == {"enabled": True, "records": True}


# --- grad() --------------------------------------------------------------------------------------


def test_grad_leaves_leaves_dot_grad_but_fills_a_retained_non_leafs_as_torch():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.retain_grad()
    (g,) = grad((y * y).sum(), x)
    np.testing.assert_array_equal(g.numpy(), [8.0, 16.0])
    assert x.grad is None  # PyTorch 2.13: a retain_grad() non-leaf the gradient flows through gets its .grad
    np.testing.assert_array_equal(y.grad.numpy(), [4.0, 8.0])
    assert g.grad_fn is None and not g.requires_grad
    torch = pytest.importorskip("torch")
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = tx * 2
    ty.retain_grad()
    torch.autograd.grad((ty * ty).sum(), tx)
    assert tx.grad is None and ty.grad.tolist() == y.grad.numpy().tolist()


def test_grad_wrt_non_leaf():
    x = leaf([1.0, 2.0])
    y = x * 2
    z = (y * y).sum()
    gy, gx = grad(z, [y, x])
    np.testing.assert_array_equal(gy.detach().numpy(), 2 * y.detach().numpy())
    np.testing.assert_array_equal(gx.detach().numpy(), 4 * y.detach().numpy())


def test_grad_allow_unused():
    x, unused = leaf([1.0, 2.0]), leaf([5.0])
    z = (x * x).sum()
    with pytest.raises(RuntimeError, match="allow_unused"):
        grad(z, [x, unused], retain_graph=True)
    gx, gu = grad(z, [x, unused], allow_unused=True)
    assert gu is None
    np.testing.assert_array_equal(gx.numpy(), [2.0, 4.0])


def test_grad_inputs_must_require_grad():
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        grad((x * 2).sum(), leaf([1.0], requires_grad=False))


def test_grad_with_several_outputs_and_grad_outputs():
    x = leaf([1.0, 2.0, 3.0])
    a, b = x * 2, (x * x).sum()
    (gx,) = grad([a, b], [x], grad_outputs=[Variable(np.array([1.0, 0.0, 1.0])), None])
    np.testing.assert_array_equal(gx.detach().numpy(), np.array([2.0, 0.0, 2.0]) + 2 * x.detach().numpy())


def test_grad_only_runs_the_needed_part_of_the_graph():
    calls = []

    class Spy(engine.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return g

    x, other = leaf([1.0]), leaf([2.0])
    z = (x * 2 + Spy.apply(other)).sum()
    grad(z, x)
    assert calls == []


@needs_torch
def test_nodes_run_latest_first_as_in_torch_when_a_later_node_waits():
    """The node a vjp reaches first waits beside the heap; it must still yield to a later one."""

    def order(lib, function, x):
        calls = []

        def tag(name, v):
            class Tag(function):
                @staticmethod
                def forward(ctx, a):
                    return a * 1

                @staticmethod
                def backward(ctx, g):
                    calls.append(name)
                    return g

            return Tag.apply(v)

        a = tag("a", x * 2)
        p = tag("p", a * 3)
        r = tag("r", tag("q", a * 5) * 7)
        (p + r).sum().backward()
        return calls, x.grad

    calls, gx = order(engine, engine.Function, leaf([1.0, 2.0]))
    torch_calls, tgx = order(torch, torch.autograd.Function, torch.tensor([1.0, 2.0], requires_grad=True))
    assert calls == torch_calls == ["r", "q", "p", "a"]
    np.testing.assert_allclose(gx.numpy(), tgx.numpy())


@needs_torch
def test_backward_multiple_roots_matches_torch():
    rng = np.random.default_rng(8)
    xa = rng.standard_normal((3, 2))
    x, tx = leaf(xa), torch.tensor(xa, requires_grad=True)
    ga = rng.standard_normal((3, 2))
    engine.autograd.backward([(x * x).sum(), x.exp()], [None, Variable(ga)])
    torch.autograd.backward([(tx * tx).sum(), tx.exp()], [None, torch.tensor(ga)])
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


# --- create_graph: higher-order derivatives ------------------------------------------------------


@pytest.mark.parametrize(
    ("f", "d1", "d2"),
    [
        (lambda x: x**3, lambda x: 3 * x**2, lambda x: 6 * x),
        (lambda x: x.sin(), np.cos, lambda x: -np.sin(x)),
        (lambda x: x.tanh(), lambda x: 1 - np.tanh(x) ** 2, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
        (lambda x: x.exp() * x, lambda x: np.exp(x) * (1 + x), lambda x: np.exp(x) * (2 + x)),
        (
            lambda x: x.sigmoid(),
            lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s),
            lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s) * (1 - 2 * s),
        ),
        (lambda x: 1 / x, lambda x: -1 / x**2, lambda x: 2 / x**3),
        (lambda x: x.sqrt(), lambda x: 0.5 / np.sqrt(x), lambda x: -0.25 * x**-1.5),
    ],
    ids=["cube", "sin", "tanh", "x_exp", "sigmoid", "reciprocal", "sqrt"],
)
def test_second_derivatives_closed_form(f, d1, d2):
    xa = np.array([0.3, 1.1, 2.0])
    x = leaf(xa)
    (g,) = grad(f(x).sum(), x, create_graph=True)
    assert g.grad_fn is not None and g.requires_grad
    np.testing.assert_allclose(g.detach().numpy(), d1(xa), rtol=1e-12)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), d2(xa), rtol=1e-10)


def test_third_derivative():
    x = leaf([0.5, 2.0])
    (g1,) = grad((x**4).sum(), x, create_graph=True)
    (g2,) = grad(g1.sum(), x, create_graph=True)
    (g3,) = grad(g2.sum(), x)
    np.testing.assert_allclose(g3.detach().numpy(), 24 * x.detach().numpy())


def test_backward_with_create_graph_gives_differentiable_grad():
    x = leaf([1.0, 2.0])
    (x**3).sum().backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn is not None
    (h,) = grad(x.grad.sum(), x)
    np.testing.assert_allclose(h.detach().numpy(), 6 * x.detach().numpy())


def test_grad_without_create_graph_is_detached():
    x = leaf([1.0, 2.0])
    (g,) = grad((x**3).sum(), x)
    assert g.grad_fn is None and not g.requires_grad


@needs_torch
def test_hessian_vector_product_of_mlp_matches_torch():
    rng = np.random.default_rng(9)
    xa, ta = rng.standard_normal((6, 4)), rng.standard_normal((6, 2))
    w1a, w2a = rng.standard_normal((4, 5)) * 0.5, rng.standard_normal((5, 2)) * 0.5
    v1a, v2a = rng.standard_normal((4, 5)), rng.standard_normal((5, 2))

    w1, w2 = leaf(w1a), leaf(w2a)
    x, t = Variable(xa), Variable(ta)
    loss = ((x.mm(w1).tanh().mm(w2) - t) ** 2).mean() + (w1 * w1).sum() * 0.01
    g1, g2 = grad(loss, [w1, w2], create_graph=True)
    hv1, hv2 = grad((g1 * Variable(v1a)).sum() + (g2 * Variable(v2a)).sum(), [w1, w2])

    tw1, tw2 = torch.tensor(w1a, requires_grad=True), torch.tensor(w2a, requires_grad=True)
    tloss = ((torch.tensor(xa).mm(tw1).tanh().mm(tw2) - torch.tensor(ta)) ** 2).mean() + (tw1 * tw1).sum() * 0.01
    tg1, tg2 = torch.autograd.grad(tloss, [tw1, tw2], create_graph=True)
    thv1, thv2 = torch.autograd.grad((tg1 * torch.tensor(v1a)).sum() + (tg2 * torch.tensor(v2a)).sum(), [tw1, tw2])

    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(g1.detach().numpy(), tg1.detach().numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(hv1.numpy(), thv1.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hv2.numpy(), thv2.numpy(), rtol=1e-9, atol=1e-12)


# --- in-place updates and the version counter -----------------------------------------------------


def test_setitem_on_leaf_requiring_grad_raises_under_grad_mode():
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 5.0
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0, 3.0])
    with no_grad():
        x[0] = 5.0
        x[1:] = Variable(np.array([7.0, 8.0]))
    np.testing.assert_array_equal(x.detach().numpy(), [5.0, 7.0, 8.0])
    assert x.is_leaf and x.requires_grad and x.grad_fn is None


def test_setitem_on_plain_variable_is_in_place():
    x = Variable(np.zeros(4))
    data = x.data
    x[1] = 2.0
    x[np.array([False, False, True, True])] = 3.0
    np.testing.assert_array_equal(data, [0.0, 2.0, 3.0, 3.0])
    assert np.shares_memory(x.data, data) and not x.requires_grad


@pytest.mark.parametrize(
    "key",
    [0, -1, slice(1, 3), slice(None, None, 2), (slice(None), 1), "mask", "int_array"],
    ids=["int", "neg-int", "slice", "step", "column", "bool-variable-mask", "int-array"],
)
def test_setitem_on_non_leaf_gradients_match_torch(key):
    torch_ = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    xa = rng.standard_normal((4, 3))
    va = rng.uniform(1, 2, (3,))
    if key == "mask":
        mask = xa > 0
        e_key, t_key = Variable(mask), torch_.tensor(mask)
        e_val, t_val = Variable(va[0], requires_grad=True), torch_.tensor(va[0], requires_grad=True)
    elif key == "int_array":
        e_key, t_key = np.array([0, 2]), torch_.tensor([0, 2])
        e_val, t_val = Variable(va, requires_grad=True), torch_.tensor(va, requires_grad=True)
    else:
        e_key = t_key = key
        e_val = Variable(rng.uniform(1, 2, np.zeros((4, 3))[key].shape), requires_grad=True)
        t_val = torch_.tensor(e_val.detach().numpy(), requires_grad=True)
    x, tx = leaf(xa), torch_.tensor(xa, requires_grad=True)
    y, ty = x * 2, tx * 2
    y[e_key] = e_val * 3
    ty[t_key] = t_val * 3
    assert y.requires_grad and not y.is_leaf
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy())
    w = rng.standard_normal((4, 3))
    (y * Variable(w)).sum().backward()
    (ty * torch_.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(e_val.grad.numpy(), t_val.grad.numpy(), rtol=1e-12)


def test_setitem_value_requiring_grad_makes_constant_require_grad():
    v = leaf([1.0, 2.0])
    y = Variable(np.zeros(3))
    y[1:] = v * 5
    assert y.requires_grad and not y.is_leaf
    (y * Variable(np.array([1.0, 2.0, 3.0]))).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), [10.0, 15.0])


def test_inplace_modification_of_saved_input_raises():
    a = leaf([1.0, 2.0, 3.0])
    b = a * 1
    c = b * b  # saves b
    b[0] = 10.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_one_input_nodes_point_at_their_input_and_check_its_version():
    a = leaf([1.0, 2.0])
    b = a * 1
    c = b.sin()  # one input, saved (its values are read) and reached through b's node
    s = c.sum()  # one input, not saved (its shape only)
    assert c.grad_fn.next_functions == ((b.grad_fn, 0),) and s.grad_fn.next_functions == ((c.grad_fn, 0),)
    assert a.sin().grad_fn.next_functions[0][0].variable is a
    b[0] = 0.0
    with pytest.raises(RuntimeError, match="an input of SinBackward0 is at version 1; expected version 0 instead"):
        s.backward()


def test_inplace_modification_under_no_grad_of_saved_input_raises():
    a = leaf([1.0, 2.0, 3.0])
    b = a.exp()
    c = (b * a).sum()  # saves b
    with no_grad():
        b[1] = 0.0
    with pytest.raises(RuntimeError, match="inplace"):
        c.backward()


@pytest.mark.parametrize("method", ["zero_", "fill_"])
def test_zero_and_fill_bump_the_version(method):
    w = Variable(np.ones(3))
    x = leaf([1.0, 2.0, 3.0])
    y = (x * w).sum()  # saves w
    getattr(w, method)(*(() if method == "zero_" else (2.0,)))
    with pytest.raises(RuntimeError, match="inplace"):
        y.backward()


def test_inplace_modification_of_unsaved_input_is_fine():
    a = leaf([1.0, 2.0])
    b = a * 1
    c = (b + 1) * 3 + b.reshape(2, 1).sum() + b[0] + b.sum()  # none of these read b's values in backward
    b[0] = 5.0
    c.sum().backward()
    # per element of b: 3 from (b + 1) * 3; each scalar term is broadcast over c's 2 elements
    np.testing.assert_array_equal(a.grad.numpy(), [3.0 + 2 + 2 + 2, 3.0 + 2 + 2])


def test_inplace_modification_of_saved_output_raises():
    for in_grad_mode in (True, False):
        a = leaf([1.0, 2.0])
        b = a.exp()  # exp's backward reads its output
        if in_grad_mode:
            b[0] = 0.0
        else:
            with no_grad():
                b[0] = 0.0
        with pytest.raises(RuntimeError, match="inplace"):
            b.sum().backward()


def test_inplace_modification_of_index_array_raises():
    a = leaf([1.0, 2.0, 3.0])
    index = Variable(np.array([0, 2]))
    z = (a * 1)[index]
    index[0] = 1
    with pytest.raises(RuntimeError, match="inplace"):
        z.sum().backward()


def test_inplace_modification_of_function_saved_tensor_raises():
    class Times(engine.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x

    a = leaf([1.0, 2.0])
    b = a * 1
    c = Times.apply(b)
    b[0] = 3.0
    with pytest.raises(RuntimeError, match="inplace"):
        c.sum().backward()


def test_zero_and_fill_on_leaf_requiring_grad():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.zero_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.fill_(3.0)
    with no_grad():
        assert x.fill_(3.0) is x
    np.testing.assert_array_equal(x.detach().numpy(), [3.0, 3.0])
    assert x.is_leaf and x.requires_grad


def test_zero_on_non_leaf_is_recorded_with_zero_gradient():
    a = leaf([1.0, 2.0])
    b = a * 2
    assert b.zero_() is b
    np.testing.assert_array_equal(b.detach().numpy(), [0.0, 0.0])
    assert b.requires_grad and b.grad_fn is not None
    (b + a).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("kind", ["setitem-array", "index_add"])
def test_second_backward_through_freed_index_op_raises(kind):
    x = leaf(np.arange(4.0))
    if kind == "setitem-array":
        y = x * 1
        y[np.array([0, 2])] = 0.0
        z = y.sum()
    else:
        z = engine.registry.F.index_add([x, np.array([0, 1, 0, 1])], index=({"tensor": 0},), shape=(2,)).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        z.backward()


def test_grad_through_a_freed_graph_skips_nodes_nobody_needs():
    # PyTorch's rule: only the nodes on a path to the requested inputs run, so a freed node that
    # read its inputs is an error only when it is needed
    x, y, z = (Variable(np.ones(3, np.float32), requires_grad=True) for _ in range(3))
    out = x * y
    loss = (out + (z + 1)).sum()
    loss.backward()
    (gz,) = grad(loss, [z])
    np.testing.assert_array_equal(gz.numpy(), np.ones(3))
    assert grad(out, [z], grad_outputs=np.ones(3, np.float32), allow_unused=True) == (None,)
    with pytest.raises(RuntimeError, match="second time"):
        grad(loss, [x])


# --- vjps on arrays (a backward without create_graph) ---------------------------------------


def _seed_net(x, y, w1, w2, power):
    return (x.mm(w1).clamp(min=0).mm(w2).relu() - y).pow(power).sum()


@needs_torch
@pytest.mark.parametrize("power", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vjps_on_arrays_match_the_recorded_ones_and_pytorch(power, dtype):
    """mm, clamp, relu, pow and sum compute their gradients on the arrays unless create_graph is set
    (the recorded ops otherwise): both give PyTorch's gradients, and the gradients of the gradients."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in ((5, 7), (5, 3), (7, 4), (4, 3))]
    ex, ey, ew1, ew2 = [Variable(a, requires_grad=i >= 2) for i, a in enumerate(arrays)]
    tx, ty, tw1, tw2 = [torch.tensor(a, requires_grad=i >= 2) for i, a in enumerate(arrays)]
    plain = grad(_seed_net(ex, ey, ew1, ew2, power), [ew1, ew2])
    recorded = grad(_seed_net(ex, ey, ew1, ew2, power), [ew1, ew2], create_graph=True)
    expected = torch.autograd.grad(_seed_net(tx, ty, tw1, tw2, power), [tw1, tw2], create_graph=True)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    for a, b, t in zip(plain, recorded, expected):
        assert a.dtype == b.dtype == dtype and a.grad_fn is None and b.grad_fn is not None
        np.testing.assert_array_equal(a._data, b._data)
        np.testing.assert_allclose(a._data, t.detach().numpy(), **tol)
    (second,) = grad((recorded[0] * recorded[0]).sum() + recorded[1].sum(), [ew2])
    (t_second,) = torch.autograd.grad((expected[0] * expected[0]).sum() + expected[1].sum(), [tw2])
    np.testing.assert_allclose(second._data, t_second.numpy(), **tol)


def test_a_pow_gradient_made_in_place_leaves_the_incoming_gradient_alone():
    """pow's vjp multiplies g into its fresh local derivative, never into g (the caller's array here)."""
    x = leaf([1.0, -2.0, 3.0])
    given = np.array([0.5, 1.0, 2.0])
    for power in (2, 3):
        x.grad = None
        x.pow(power).backward(Variable(given))
        np.testing.assert_array_equal(given, [0.5, 1.0, 2.0])
        np.testing.assert_array_equal(x.grad._data, power * x._data ** (power - 1) * given)
        assert not np.shares_memory(x.grad._data, given)


def test_add_passes_its_gradient_on_and_mul_multiplies_arrays_with_broadcasts_and_second_derivatives():
    # add's node hands its gradient on without calling its vjps and mul's vjp multiplies the arrays directly
    # where nothing records: a broadcast input's gradient is still summed to its shape, and with create_graph
    # (b requires grad) the first gradient is recorded, so its own gradient is PyTorch's
    torch = pytest.importorskip("torch")
    x0, b0 = np.arange(6.0).reshape(2, 3), np.array([0.5, -1.0, 2.0])
    x, b = Variable(x0, requires_grad=True), Variable(b0, requires_grad=True)
    tx, tb = torch.tensor(x0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    gx, gb = grad(((x + b) * b + x).sum(), [x, b], create_graph=True)
    tgx, tgb = torch.autograd.grad(((tx + tb) * tb + tx).sum(), [tx, tb], create_graph=True)
    assert gb.shape == (3,) and gx.grad_fn is not None
    np.testing.assert_allclose(gx.detach().numpy(), tgx.detach().numpy())
    np.testing.assert_allclose(gb.detach().numpy(), tgb.detach().numpy())
    (hb,) = grad(gb.sum(), [b])
    (thb,) = torch.autograd.grad(tgb.sum(), [tb])
    np.testing.assert_allclose(hb.numpy(), thb.numpy())


@pytest.mark.parametrize("retain_graph", [None, False, True])
@pytest.mark.parametrize("create_graph", [False, True])
def test_scalar_backward_keeps_the_graph_and_fills_grads_as_torch(retain_graph, create_graph):
    # `loss.backward()` of one scalar with no gradient or inputs given takes a shorter way in (no lists, no Size)
    # and a leaf's first `.grad` is stored without the property setter: the graph is kept as retain_graph (default:
    # create_graph) says, a retained non-leaf's `.grad` is filled, a second backward adds into the first `.grad`
    # (a scalar leaf's, whose first is a copy of the implied root gradient), and a non-scalar or constant output is
    # still refused
    torch = pytest.importorskip("torch")
    x0 = np.array([[1.0, -2.0], [0.5, 3.0]])
    outcomes = []
    for make in (lambda a: Variable(a.copy(), requires_grad=True), lambda a: torch.tensor(a, requires_grad=True)):
        x, w = make(x0), make(x0.T)
        y = x.mm(w)
        y.retain_grad()
        loss = (y.clamp(min=0) - 1.0).pow(2).sum()
        loss.backward(retain_graph=retain_graph, create_graph=create_graph)
        first = (x.grad.detach().numpy().copy(), w.grad.detach().numpy().copy(), y.grad.detach().numpy().copy())
        try:
            loss.backward()
            again = x.grad.detach().numpy().copy()
        except RuntimeError as error:
            again = "freed" if "second time" in str(error) else str(error)
        leaf_root = make(np.array(2.0))
        leaf_root.backward()
        kept = leaf_root.grad
        leaf_root.backward()  # added into the first `.grad` in place
        outcomes.append((first, again, float(kept.detach().numpy()), leaf_root.grad is kept))
        with pytest.raises(RuntimeError, match="scalar outputs"):
            y.backward()
        with pytest.raises(RuntimeError, match="does not require grad"):
            make(np.array(1.0)).detach().backward()
    (first, again, root_grad, root), (tfirst, tagain, troot_grad, troot) = outcomes
    for ours, theirs in zip(first, tfirst):
        np.testing.assert_allclose(ours, theirs)
    if isinstance(tagain, str):
        assert again == tagain
    else:
        np.testing.assert_allclose(again, tagain)
    assert root_grad == troot_grad == 2.0 and root and troot

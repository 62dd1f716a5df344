"""Autograd semantics through the client, mirrored from the engine: every program here runs
through `client` (embedded and remote) and through `engine`, and must agree."""

from __future__ import annotations

import numpy as np
import pytest

import client
import engine
from engine.node import FREED_MESSAGE


def arrays(result):
    """Numbers of a program's result (Variables -> arrays, None kept), for comparison."""
    if isinstance(result, (list, tuple)):
        return [arrays(r) for r in result]
    if isinstance(result, (client.Variable, engine.Variable)):
        return np.asarray(result.data)
    return result


def assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), got
        assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    else:
        assert got == want


def both(program):
    got = program(client)
    want = program(engine)
    assert_same(arrays(got), arrays(want))
    return got


X = np.array([[1.0, -2.0, 3.0], [-0.5, 0.25, 2.0]])


def test_detach_cuts_the_gradient(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        y = x * 2
        d = y.detach()
        assert d.is_leaf and not d.requires_grad and d.grad_fn is None
        (d * x).sum().backward()
        fetched = x * 3
        fetched.item() if fetched.numel() == 1 else fetched.data  # a detach of a fetched value, too
        e = fetched.detach()
        (e * x).sum().backward()
        return x.grad, d, e

    both(program)


def test_no_grad_and_enable_grad(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        with m.no_grad():
            y = x * 2
            with m.enable_grad():
                w = x * 5
        assert y.grad_fn is None and not y.requires_grad and y.is_leaf
        assert w.requires_grad and type(w.grad_fn).__name__ == "MulBackward0"
        (y * x + w).sum().backward()
        return x.grad, y

    both(program)


def test_retain_grad_and_accumulation(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        y = x * 2
        y.retain_grad()
        assert y.retains_grad and not x.retains_grad
        z = (y * y).sum()
        z.backward()
        first = x.grad.data.copy()
        (x * 3).sum().backward()  # accumulates into x.grad
        accumulated = x.grad
        x.grad = None
        (x * 3).sum().backward()
        return first, accumulated, y.grad, x.grad

    got = both(program)
    np.testing.assert_allclose(got[2].data, 4 * X)


def test_second_backward_raises_the_engine_error(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        out = (x * x).sum()
        out.backward()
        with pytest.raises(RuntimeError) as err:
            out.backward()
        assert str(err.value) == FREED_MESSAGE
        kept = (x * x).sum()
        kept.backward(retain_graph=True)
        kept.backward()  # allowed once more: the first one retained the graph
        linear = (x + 2).sum()  # add and sum save nothing: the engine lets these run again
        linear.backward()
        linear.backward()
        return x.grad

    both(program)


def test_grad_fn_names_match_the_engine(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        w = m.Variable(np.ones((3, 2)), requires_grad=True)
        exprs = [
            x + 1,
            1 - x,
            x * x,
            x / 2,
            x**2,
            2**x,
            -x,
            abs(x),
            x.mm(w),
            x @ w,
            x.clamp(min=0),
            x.sum(),
            x.mean(1),
            x[0],
            x[:, 1:],
            x.T,
            x.t(),
            x.reshape(3, 2),
            x.exp(),
            x.softmax(1),
            x.var(),
            x.unsqueeze(0),
            m.cat([x, x]),
            x.max(),
            x.norm(),
        ]
        return [type(e.grad_fn).__name__ for e in exprs]

    both(program)


def test_requires_grad_rules(session):
    def program(m):
        a = m.Variable(X)
        b = a * 2
        assert not b.requires_grad and b.grad_fn is None and b.is_leaf
        x = m.Variable(X, requires_grad=True)
        c = x + a
        with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
            c.requires_grad = False
        with pytest.raises(RuntimeError, match="floating point"):
            m.Variable(np.arange(3)).requires_grad_()
        b.requires_grad = True  # a result without grad_fn becomes a leaf of its own
        (b * x).sum().backward()
        return b.grad, x.grad

    both(program)


def test_setitem_rules(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            x[0] = 1.0
        y = x * 1
        y[0, 1] = 7.0  # on a non-leaf: recorded
        assert type(y.grad_fn).__name__ == "CopySlices"
        plain = m.Variable(np.zeros(3))
        plain[1] = 4.0  # raw assignment into a plain leaf
        v = m.Variable(np.array([2.0, 3.0]), requires_grad=True)
        target = m.Variable(np.zeros(3))
        target[:2] = v  # a value that requires grad: the leaf becomes a result
        assert not target.is_leaf
        (y.sum() + (target * target).sum() + plain.sum()).backward()
        return y, plain, target, x.grad, v.grad

    both(program)


def test_inplace_change_of_a_saved_input_is_caught(session):
    def program(m):
        w = m.Variable(np.array([1.0, 2.0, 3.0]), requires_grad=True)
        a = m.Variable(np.ones(3))
        y = (a * w).sum()
        a[0] = 5.0
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
        return a

    both(program)


def test_grad_function_rules(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        u = m.Variable(X, requires_grad=True)
        out = (x * x).sum()
        with pytest.raises(RuntimeError, match="appears to not have been used"):
            m.grad(out, [x, u])
        out = (x * x).sum()
        gx, gu = m.grad(out, [x, u], allow_unused=True)
        assert gu is None and x.grad is None  # grad() leaves .grad alone
        with pytest.raises(RuntimeError, match="does not require grad"):
            m.grad((x * 2).sum(), [m.Variable(X)])
        h = x * 2
        (gh,) = m.grad((h * h).sum(), [h])  # with respect to an intermediate
        return gx, gh

    both(program)


def test_backward_argument_checks(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        with pytest.raises(RuntimeError, match="implicitly created only for scalar"):
            (x * 2).backward()
        with pytest.raises(RuntimeError, match="Mismatch in shape"):
            (x * 2).backward(m.Variable(np.ones(3)))
        with pytest.raises(RuntimeError, match="does not require grad"):
            m.Variable(X).sum().backward()
        return x.grad

    both(program)


def test_values_and_branches(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        s = x.sum()
        taken = "positive" if s > 0 else "negative"
        count = 0
        y = x
        while y.norm().item() < 100:
            y = y * 3
            count += 1
        mx = m.max(x)
        values, indices = x.max(1)
        return [
            taken,
            count,
            float(s),
            int(m.Variable(np.array(3)) + 1),
            x.tolist(),
            mx,
            values,
            indices,
            len(x),
            [row.sum() for row in x],
            y.grad_fn.name,
        ]

    both(program)


def test_registry_ops_agree_with_the_engine(session):
    """Every sample of every registry op: value, shape, dtype, grad_fn name and input gradients."""
    import sys

    from client_testkit import ROOT

    sys.path.insert(0, str(ROOT / "tests" / "engine"))
    from engine_testkit import sample_arrays

    from client.ops import record
    from engine.indexing import to_key

    def client_call(op, vs, attrs):
        if op.name == "getitem":  # the client's x[key] (a boolean mask's count needs its values)
            return vs[0][to_key(attrs["index"], vs[1:])]
        return record(op, vs, attrs)

    checked = 0
    for name, op in sorted(engine.OPS.items()):
        for sample in op.samples:
            arrays_ = sample_arrays(sample, np.random.default_rng(0))
            attrs = op.check_attrs(dict(sample.attrs))
            results = []
            for m, call in ((engine, op.call), (client, lambda vs, a, op=op: client_call(op, vs, a))):
                vs = [m.Variable(a, requires_grad=a.dtype.kind == "f") for a in arrays_]
                out = call(vs, attrs)
                grads = None
                if out.requires_grad:
                    targets = [v for v in vs if v.requires_grad]
                    seed = m.Variable(np.full(out.shape, 0.5, out.dtype))
                    grads = m.grad(out, targets, grad_outputs=seed, allow_unused=True)
                results.append((out, grads))
            (e_out, e_grads), (c_out, c_grads) = results
            where = f"{name} {sample.attrs}"
            assert c_out.shape == e_out.shape and c_out.dtype == e_out.dtype, where
            assert type(c_out.grad_fn).__name__ == type(e_out.grad_fn).__name__, where
            np.testing.assert_allclose(c_out.data, e_out.data, rtol=1e-12, err_msg=where)
            if e_grads is not None:
                for c, e in zip(c_grads, e_grads):
                    assert (c is None) == (e is None), where
                    if e is not None:
                        np.testing.assert_allclose(c.data, e.data, rtol=1e-12, err_msg=where)
            checked += 1
    assert checked >= len(engine.OPS)


def test_inplace_rules_under_no_grad_and_on_outputs(session):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        w = m.Variable(np.zeros(3), requires_grad=True)
        with m.no_grad():
            w[0] = (x * 2).sum()  # a computed value assigned raw: w stays a leaf that requires grad
        assert w.is_leaf and w.requires_grad
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            w.zero_()
        y = x.exp()  # exp's backward reads its output: changing it in place must be caught
        y[0, 0] = 0.0
        with pytest.raises(RuntimeError, match="ExpBackward0's output"):
            y.sum().backward()
        as_int = x.long()
        assert as_int.grad_fn is None and not as_int.requires_grad
        g = m.Variable(np.ones(3))
        g.zero_()
        return w, y, as_int, g

    both(program)


def test_boolean_masks(session, recorder):
    def program(m):
        x = m.Variable(X, requires_grad=True)
        picked = x[x > 0]  # its length depends on the mask's values: the mask is fetched
        assert picked.shape == (4,)
        (picked * picked).sum().backward()
        fixed = x[m.Variable(X < 0)]
        return picked, x.grad, fixed

    both(program)
    assert recorder.paths()[0] == "/forward"

    class Positive(client.Function):
        @staticmethod
        def forward(ctx, x):
            return x[x > 0]

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(client.TracingError, match="depends on values"):
        Positive.apply(client.Variable(X, requires_grad=True))

"""Custom Functions as PyTorch's "Extending PyTorch" docs write them, against torch 2.13, on the engine, the
embedded client and a live server: `setup_context`-style LinearFunction and MulConstant, a (sorted, indices)
pair with `mark_non_differentiable`, two outputs with `set_materialize_grads(False)`, in-place Functions with
`mark_dirty`; values, gradients, grad_fn identity and `output_nr`, finite differences in float64, create_graph and
retain_graph through two outputs, and forward-mode AD through a `jvp` with `save_for_forward`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

X = np.array([[0.5, -1.25, 2.0], [1.5, 0.25, -0.75]])
W = np.array([[0.3, -0.2, 0.1], [0.7, 0.4, -0.6], [-0.5, 0.9, 0.2], [0.05, -0.35, 0.8]])
B = np.array([0.1, -0.2, 0.3, 0.4])
SEED = np.linspace(-1.0, 1.0, 8).reshape(2, 4)


def functions(m):
    """The docs' Functions, written against module `m` (torch, engine or client)."""
    Function = m.autograd.Function

    class LinearFunction(Function):
        @staticmethod
        def forward(input, weight, bias):
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def setup_context(ctx, inputs, output):
            input, weight, bias = inputs
            ctx.save_for_backward(input, weight, bias)

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.mm(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.t().mm(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    class MulConstant(Function):
        @staticmethod
        def forward(tensor, constant):
            return tensor * constant

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, constant = inputs
            ctx.constant = constant

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.constant, None

    class Sorted(Function):
        @staticmethod
        def forward(ctx, x):
            values, idx = x.sort()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x, idx)
            return values, idx

        @staticmethod
        def backward(ctx, g1, g2):
            x, idx = ctx.saved_tensors
            grad_input = m.zeros_like(x)
            grad_input.index_add_(0, idx, g1)
            return grad_input

    class TwoClones(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x.clone() * 2, x.clone(), "label"

        @staticmethod
        @m.autograd.function.once_differentiable
        def backward(ctx, g1, g2, g3):
            x_grad = None
            if g1 is not None:
                x_grad = g1 * 2
            if g2 is not None:
                x_grad = g2 if x_grad is None else x_grad + g2
            return x_grad

    class ScaleInplace(Function):
        @staticmethod
        def forward(ctx, x, k):
            x.mul_(k)
            ctx.mark_dirty(x)
            ctx.k = k
            return x

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.k, None

    return LinearFunction, MulConstant, Sorted, TwoClones, ScaleInplace


def run(m):
    """Values and gradients of the docs' Functions in float64 (what the oracle compares)."""
    LinearFunction, MulConstant, Sorted, TwoClones, ScaleInplace = functions(m)
    x = m.tensor(X, requires_grad=True)
    w = m.tensor(W, requires_grad=True)
    b = m.tensor(B, requires_grad=True)
    y = MulConstant.apply(LinearFunction.apply(x, w, b), 1.5)
    flat = x.reshape(-1)
    values, idx = Sorted.apply(flat)
    first, second, label = TwoClones.apply(values[:3])
    z = x * 1.0
    z0 = z._version
    scaled = ScaleInplace.apply(z, -2.0)
    facts = {
        "alias": scaled is z,
        "version": z._version - z0,
        "shared": values.grad_fn is idx.grad_fn or idx.grad_fn is None,
        "idx_rg": idx.requires_grad,
        "nr": (first.output_nr, second.output_nr),
        "same_fn": first.grad_fn is second.grad_fn,
        "label": label,
        "name": type(first.grad_fn).__name__,
        "next": [(type(fn).__name__, nr) for fn, nr in (first + second).grad_fn.next_functions],
        "dirty_fn": type(z.grad_fn).__name__,
    }
    loss = (y * m.tensor(SEED)).sum() + (values * values).sum() + second.sum() * 3 + (z * z).sum()
    grads = m.autograd.grad(loss, [x, w, b])
    arrays = [y, values, idx, first, second, z, *grads]
    return [np.asarray(a.detach().numpy()) for a in arrays], facts


def test_docs_functions_match_torch(torch_like):
    want, want_facts = run(torch)
    got, facts = run(torch_like)
    assert facts == want_facts
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_leaf_marked_dirty_is_refused_as_torch(torch_like):
    messages = []
    for m in (torch, torch_like):
        with pytest.raises(RuntimeError) as err:
            functions(m)[-1].apply(m.tensor(X, requires_grad=True), 2.0)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == "a leaf Variable that requires grad has been used in an in-place operation."


def _finite_differences(m):
    """Analytic gradient of the two-output Functions' sum against central differences, in float64."""
    _, _, Sorted, TwoClones, _ = functions(m)

    def f(x):
        values, _ = Sorted.apply(x)
        first, second, _ = TwoClones.apply(values * values)
        return (first * m.tensor([1.0, -2.0, 0.5, 3.0, 1.5, -1.0])).sum() + second.sin().sum()

    x = m.tensor(X.reshape(-1), requires_grad=True)
    (analytic,) = m.autograd.grad(f(x), [x])
    eps, numeric = 1e-6, np.zeros(6)
    for i in range(6):
        up, down = X.reshape(-1).copy(), X.reshape(-1).copy()
        up[i] += eps
        down[i] -= eps
        numeric[i] = (float(f(m.tensor(up))) - float(f(m.tensor(down)))) / (2 * eps)
    return np.asarray(analytic.numpy()), numeric


def test_two_output_gradients_match_finite_differences(torch_like):
    analytic, numeric = _finite_differences(torch_like)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7)


def _second_order(m):
    """A two-output Function whose backward is differentiable: a backward kept with retain_graph, then
    create_graph's gradients differentiated again, then the freed graph's error (the client takes no
    gradient hooks: tests/engine/test_engine_function_outputs.py has those)."""

    class ProdSum(m.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * y, x + y

        @staticmethod
        def backward(ctx, g_prod, g_sum):
            x, y = ctx.saved_tensors
            return g_prod * y + g_sum, g_prod * x + g_sum

    x = m.tensor(X[0], requires_grad=True)
    y = m.tensor(X[1], requires_grad=True)
    prod, total = ProdSum.apply(x, y)
    loss = (prod * prod).sum() + (total * total.sin()).sum()
    loss.backward(retain_graph=True)
    first = [x.grad.numpy().copy(), y.grad.numpy().copy()]
    gx, gy = m.autograd.grad(loss, [x, y], create_graph=True)
    hx, hy = m.autograd.grad((gx * gy).sum(), [x, y])
    with pytest.raises(RuntimeError) as err:
        loss.backward()
    arrays = [*first, gx, gy, hx, hy]
    return [np.asarray(a.detach().numpy() if hasattr(a, "detach") else a) for a in arrays], str(err.value)


def test_create_graph_and_retain_graph_through_two_outputs_match_torch(torch_like):
    want, want_error = _second_order(torch)
    got, error = _second_order(torch_like)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert error == want_error


def _forward_ad(m):
    class PolarLike(m.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x * k, x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.k = k
            ctx.save_for_backward(output[1])
            ctx.save_for_forward(output[1])

        @staticmethod
        def backward(ctx, ga, gb):
            (e,) = ctx.saved_tensors
            return ga * ctx.k + gb * e, None

        @staticmethod
        def jvp(ctx, tx, tk):
            (e,) = ctx.saved_tensors
            return tx * ctx.k, tx * e

    fw = m.autograd.forward_ad
    with fw.dual_level():
        dual = fw.make_dual(m.tensor(X[0]), m.tensor([1.0, 0.5, -2.0]))
        a, b = PolarLike.apply(dual, 3.0)
        tangents = [np.asarray(fw.unpack_dual(v).tangent.detach().numpy()).tolist() for v in (a, b)]
    x = m.tensor(X[0], requires_grad=True)
    a, b = PolarLike.apply(x, 3.0)
    (a.sum() + b.sum()).backward()
    return tangents, x.grad.numpy().tolist()


def test_forward_ad_through_a_two_output_function_matches_torch(torch_like):
    """The engine runs `jvp` (with what `setup_context` saved by `save_for_forward`); the client's tangent
    comes from the traced backward (see README's Known limitations): the same numbers."""
    got, want = _forward_ad(torch_like), _forward_ad(torch)
    np.testing.assert_allclose(np.array(got[0]), np.array(want[0]), rtol=1e-12)
    np.testing.assert_allclose(np.array(got[1]), np.array(want[1]), rtol=1e-12)


def _dirty_without_grad(m):
    ScaleInplace = functions(m)[-1]
    x = m.tensor(X, requires_grad=True)
    with m.no_grad():
        out = ScaleInplace.apply(x, 3.0)
    return (out is x, out.requires_grad, x.requires_grad, x.is_leaf, x._version), x.detach().numpy(), out.numpy()


def test_mark_dirty_of_a_leaf_under_no_grad_matches_torch(torch_like):
    got, want = _dirty_without_grad(torch_like), _dirty_without_grad(torch)
    assert got[0] == want[0] == (False, False, True, True, 2)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def _keywords(m):
    seen = []

    class Scale(m.autograd.Function):  # torch 2 binds apply's arguments to forward's signature, defaults applied
        @staticmethod
        def forward(x, k=2.0, shift=0.0):
            return x * k + shift

        @staticmethod
        def setup_context(ctx, inputs, output):
            seen.append(len(inputs))
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None, None

    class OldScale(m.autograd.Function):  # forward(ctx, ...) takes keywords too: inputs, as positional ones
        @staticmethod
        def forward(ctx, x, k=2.0):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    x = m.tensor(X, requires_grad=True)
    out = Scale.apply(x) + Scale.apply(x, k=3.0, shift=1.0) + OldScale.apply(x, k=-1.5) + OldScale.apply(x)
    out.sum().backward()
    return seen, out.detach().numpy(), x.grad.numpy()


def test_keywords_and_defaults_of_apply_match_torch(torch_like):
    got, want = _keywords(torch_like), _keywords(torch)
    assert got[0] == want[0] == [3, 3]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12)


def _dirty_non_leaf(m):
    class Scale(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(3)
            ctx.mark_dirty(x)
            ctx.save_for_backward(x)
            return x

        @staticmethod
        def backward(ctx, g):
            (out,) = ctx.saved_tensors
            return g * 3 + 0 * out

    x = m.tensor(X[0], requires_grad=True)
    z = x * 2
    before = z.grad_fn
    out = Scale.apply(z)
    facts = (out is z, z._version, type(z.grad_fn).__name__, z.grad_fn.next_functions[0][0] is before, z.is_leaf)
    (z * z).sum().backward()
    return facts, x.grad.numpy().tolist()


def test_mark_dirty_rebases_a_non_leaf_as_torch(torch_like):
    assert _dirty_non_leaf(torch_like) == _dirty_non_leaf(torch)

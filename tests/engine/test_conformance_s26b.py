"""Session 26's second round of divergences from PyTorch 2.13, each a program a user writes, run with `torch` bound
to the engine and to PyTorch: the deprecated `torch.triangular_solve` (missing: AttributeError), the shape and dtype
checks of `linalg.solve_triangular`, and `add`/`sub` with `alpha=` in float32 rounded once, as PyTorch's fused
multiply-add. Gradients are checked twice: float64 finite differences (`engine.gradcheck`) and PyTorch."""

from __future__ import annotations

import warnings

import numpy
import pytest

import engine


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# --- torch.triangular_solve -----------------------------------------------------------------------------------------

RNG = numpy.random.default_rng(26)
COEFFICIENTS = RNG.standard_normal((2, 1, 3, 3)) + 3 * numpy.eye(3)  # (a batch broadcast against b's)
RIGHT_SIDES = RNG.standard_normal((4, 3, 2))


@pytest.mark.parametrize("unitriangular", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("upper", [True, False])
def test_triangular_solve_is_pytorchs(upper, transpose, unitriangular, oracle):
    """(solution, cloned_coefficient) of `torch.triangular_solve(b, A, ...)`: values, the broadcast copy of A, the
    return type, the node names and both gradients (A's through the solution's triangle and the copy's clone)."""
    outs = []
    for torch in (engine, oracle):
        A, b = torch.tensor(COEFFICIENTS, requires_grad=True), torch.tensor(RIGHT_SIDES, requires_grad=True)
        kwargs = dict(upper=upper, transpose=transpose, unitriangular=unitriangular)
        result = _quiet(torch.triangular_solve, b, A, **kwargs)
        solution, copy = result
        (solution.sin().sum() + (copy * copy.detach().cos()).sum()).backward()
        names = (type(result).__name__, result._fields if hasattr(result, "_fields") else None)
        nodes = (solution.grad_fn.name(), copy.grad_fn.name(), result.solution is solution)
        values = [t.detach().numpy() for t in (solution, result.cloned_coefficient, A.grad, b.grad)]
        outs.append((names[0], nodes, values, tuple(copy.shape)))
    assert outs[0][0] == outs[1][0] == "triangular_solve"
    assert outs[0][1] == outs[1][1] == ("TriangularSolveBackward0", "TriangularSolveBackward0", True)
    assert outs[0][3] == outs[1][3] == (2, 4, 3, 3)
    for ours, theirs in zip(outs[0][2], outs[1][2]):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)

    def both(a, v):
        solution, copy = _quiet(engine.triangular_solve, v, a, **kwargs)
        return solution.sum(-1, keepdim=True) * 2 + copy.sum((-2, -1), keepdim=True)

    A = engine.tensor(COEFFICIENTS[0], requires_grad=True)
    assert engine.gradcheck(both, (A, engine.tensor(RIGHT_SIDES[:2], requires_grad=True)))


def test_triangular_solve_warns_as_pytorch(oracle):
    """PyTorch's deprecation words (at most once), and the solution that of linalg.solve_triangular(A, b)."""
    for torch in (engine, oracle):
        A, b = torch.tensor(COEFFICIENTS[0, 0]), torch.tensor(RIGHT_SIDES[0])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            first = torch.triangular_solve(b, A, upper=False).solution
            torch.triangular_solve(b, A)
        assert len(seen) <= 1
        assert all("torch.triangular_solve is deprecated in favor of" in str(w.message) for w in seen)
        assert torch.equal(first, torch.linalg.solve_triangular(A, b, upper=False))


REFUSALS = {
    "triangular_solve: b of 1 dimension": lambda t: t.triangular_solve(t.ones(3), t.eye(3)),
    "triangular_solve: A of 1 dimension": lambda t: t.triangular_solve(t.ones(3, 2), t.ones(3)),
    "triangular_solve: A not square": lambda t: t.triangular_solve(t.ones(3, 2), t.ones(3, 4)),
    "triangular_solve: sizes": lambda t: t.triangular_solve(t.ones(3, 2), t.eye(4)),
    "triangular_solve: dtypes": lambda t: t.triangular_solve(t.ones(3, 2), t.eye(3, dtype=t.float64)),
    "solve_triangular: A not square": lambda t: t.linalg.solve_triangular(t.ones(3, 4), t.ones(3, 2), upper=True),
    "solve_triangular: AX = B sizes": lambda t: t.linalg.solve_triangular(t.eye(4), t.ones(3, 2), upper=True),
    "solve_triangular: XA = B sizes": lambda t: t.linalg.solve_triangular(
        t.eye(3), t.ones(2, 2), upper=True, left=False
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_triangular_refusals_are_pytorchs(case, oracle):
    """PyTorch's error type and words; the engine's substitution raised a matmul's ShapeMismatch for A's wrong sizes
    (or, solving X A = B with a B of the wrong width, returned a result)."""
    raised = []
    for torch in (engine, oracle):
        with pytest.raises(RuntimeError) as error:
            _quiet(REFUSALS[case], torch)
        raised.append(str(error.value))
    assert raised[0] == raised[1]


@pytest.mark.parametrize("left", [True, False])
def test_solve_triangular_takes_as_dtype(left, oracle):
    """PyTorch solves in A's dtype when B's differs (even a narrower one); the engine's matmul refused the mix."""
    for a_dtype, b_dtype in (("float64", "float32"), ("float32", "float64")):
        outs = []
        for torch in (engine, oracle):
            A = torch.tensor(COEFFICIENTS[0, 0], dtype=getattr(torch, a_dtype))
            B = torch.tensor(RIGHT_SIDES[0], dtype=getattr(torch, b_dtype), requires_grad=True)
            X = torch.linalg.solve_triangular(A, B if left else B.mT, upper=True, left=left)
            X.sum().backward()
            outs.append((str(X.dtype), X.detach().double().numpy(), str(B.grad.dtype), B.grad.double().numpy()))
        assert outs[0][0] == outs[1][0] == f"torch.{a_dtype}" and outs[0][2] == outs[1][2]
        numpy.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-5)
        numpy.testing.assert_allclose(outs[0][3], outs[1][3], rtol=1e-5)


# --- add / sub with alpha= in float32: rounded once --------------------------------------------------------------

FIRST, SECOND = (RNG.standard_normal(1003).astype(numpy.float32) for _ in range(2))
ALPHA_CALLS = {
    "torch.add": lambda t, x, y, a: t.add(x, y, alpha=a),
    "torch.sub": lambda t, x, y, a: t.sub(x, y, alpha=a),
    "x.add": lambda t, x, y, a: x.add(y, alpha=a),
    "x.sub": lambda t, x, y, a: x.sub(y, alpha=a),
    "x.clone().add_": lambda t, x, y, a: x.clone().add_(y, alpha=a),
    "x.clone().sub_": lambda t, x, y, a: x.clone().sub_(y, alpha=a),
}


@pytest.mark.parametrize("alpha", [0.37, -1.3, 3])
@pytest.mark.parametrize("call", ALPHA_CALLS)
def test_float32_alpha_rounds_once_as_pytorch(call, alpha, oracle):
    """Every element PyTorch's (its float32 kernel is a fused multiply-add: input + other * alpha rounded once; the
    engine rounded the product first, ~20% of the elements 1 ulp away), the dtype, node name and both gradients."""
    outs = []
    for torch in (engine, oracle):
        x, y = torch.tensor(FIRST, requires_grad=True), torch.tensor(SECOND, requires_grad=True)
        out = ALPHA_CALLS[call](torch, x, y, alpha)
        out.backward(torch.tensor(SECOND[::-1].copy()))
        outs.append((str(out.dtype), out.grad_fn.name(), out.detach().numpy(), x.grad.numpy(), y.grad.numpy()))
    assert outs[0][:2] == outs[1][:2]
    assert outs[0][0] == "torch.float32" and outs[0][1] in ("AddBackward0", "SubBackward0")
    for ours, theirs in zip(outs[0][2:], outs[1][2:]):
        assert ours.dtype == theirs.dtype and numpy.array_equal(ours, theirs)


@pytest.mark.parametrize("other", [2.1, 3, -7.25])
def test_float32_alpha_with_a_number_is_fused(other, oracle):
    """A number `other`: the float32 fused value input + f32(other) * f32(alpha), PyTorch's in its vectorized loop (its
    last elements, fewer than two AVX-512 vectors' worth, are rounded twice: not compared exactly)."""
    x = engine.tensor(FIRST)
    product = float(numpy.float32(other)) * float(numpy.float32(0.37))  # (exact in float64)
    for name, sign in (("add", 1), ("sub", -1)):
        ours = getattr(engine, name)(x, other, alpha=0.37)
        reference = (FIRST.astype(numpy.float64) + sign * product).astype(numpy.float32)
        assert str(ours.dtype) == "torch.float32" and numpy.array_equal(ours.numpy(), reference)
        theirs = getattr(oracle, name)(oracle.tensor(FIRST), other, alpha=0.37).numpy()
        assert numpy.array_equal(ours.numpy()[:-32], theirs[:-32])
        numpy.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-6, atol=1e-6)


def test_alpha_gradients_and_other_dtypes(oracle):
    """float64 finite differences through the float32 path's float64 arithmetic and the float64 path (unchanged);
    integers and mixed dtypes keep PyTorch's result dtypes and values."""
    a, b = (engine.tensor(v, dtype=engine.float64, requires_grad=True) for v in RNG.standard_normal((2, 3, 4)))
    assert engine.gradcheck(lambda u, v: engine.add(u, v[0], alpha=0.37) - u.sub(v, alpha=-2.5), (a, b))
    for torch in (engine, oracle):
        ints = torch.add(torch.tensor([1, 2]), torch.tensor([3, 4]), alpha=2)
        mixed = torch.sub(torch.tensor([1.5, 2.0]), torch.tensor([0.25, 1.0], dtype=torch.float64), alpha=0.5)
        assert (str(ints.dtype), ints.tolist()) == ("torch.int64", [7, 10])
        assert (str(mixed.dtype), mixed.tolist()) == ("torch.float64", [1.375, 1.5])


# --- a first `.grad` made with create_graph: CopyBackwards' edges --------------------------------------------------


@pytest.mark.parametrize("shape", [(3,), ()])
def test_create_graph_grads_copy_lists_its_destination(shape, oracle):
    """PyTorch's CopyBackwards (the leaf's first `.grad`, a copy into zeros) lists (None, 0) for the destination
    before the source; ours listed only the source. The values, version and second derivative stay PyTorch's."""
    outs = []
    for torch in (engine, oracle):
        w = torch.tensor(numpy.full(shape, 1.5), requires_grad=True)
        (w * w * w).sum().backward(create_graph=True)
        node = w.grad.grad_fn
        edges = [(None if f is None else f.name(), n) for f, n in node.next_functions]
        (second,) = torch.autograd.grad(w.grad.sum(), w)
        outs.append((node.name(), edges, w.grad.tolist(), w.grad._version, second.tolist()))
    assert outs[0] == outs[1]
    assert outs[0][1][0] == (None, 0)


@pytest.mark.parametrize("call", ["solve", "solve_ex"])
@pytest.mark.parametrize("batched", [True, False])
def test_a_singular_solve_names_its_batch_element_as_pytorchs(oracle, call, batched):
    """`torch.linalg.solve(stack([eye(2), singular]), b)`: 'torch.linalg.solve: (Batch element 1): The solver failed
    ...' (the engine solves through inv, whose error names the element; solve's words replaced it whole)."""
    a = numpy.stack([numpy.eye(2), numpy.array([[1.0, 2.0], [2.0, 4.0]])])
    b = numpy.ones((2, 2, 1))
    if not batched:
        a, b = a[1], b[1]
    messages = []
    for torch in (engine, oracle):
        kwargs = {"check_errors": True} if call == "solve_ex" else {}
        with pytest.raises(torch.linalg.LinAlgError) as raised:
            getattr(torch.linalg, call)(torch.tensor(a), torch.tensor(b), **kwargs)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]

"""Session 26's divergences from PyTorch 2.13, each a program a user writes, run with `torch` bound to the engine
and to PyTorch: casts to the small integer dtypes (`x.to(torch.uint8)`, `x.byte()`, `x.type(torch.ByteTensor)`),
`linalg.solve_triangular` of a singular triangle, the node names of a first `.grad` made with `create_graph` and of
a spectrum's `abs`/`angle`, LBFGS's float32 vectors, and `clone()` keeping a view's strides (`preserve_format`).
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
        sized = torch.ByteTensor(2, 3)  # its values: PyTorch leaves the memory uninitialized
        assert (tuple(sized.shape), str(sized.dtype)) == ((2, 3), "torch.uint8")
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


SINGULAR_TRIANGLE = [[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1.0, 3.0, 4.0]]
RHS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
SINGULAR_SOLVES = {
    "lower": lambda t, A, B: t.linalg.solve_triangular(A, B, upper=False),
    "upper": lambda t, A, B: t.linalg.solve_triangular(A.mT, B, upper=True),
    "lower, right": lambda t, A, B: t.linalg.solve_triangular(A, B.mT, upper=False, left=False),
    "upper, right": lambda t, A, B: t.linalg.solve_triangular(A.mT, B.mT, upper=True, left=False),
    "unitriangular (the zero diagonal unread)": lambda t, A, B: t.linalg.solve_triangular(
        A, B, upper=False, unitriangular=True
    ),
    "zeros": lambda t, A, B: t.linalg.solve_triangular(t.zeros(2, 2), t.ones(2, 1), upper=True),
    "a batch, broadcast": lambda t, A, B: t.linalg.solve_triangular(
        t.stack([A, A.tril() + 5 * t.eye(3)]), B.expand(3, 1, 3, 2), upper=False
    ),
    "float64": lambda t, A, B: t.linalg.solve_triangular(A.double(), B.double(), upper=False),
}


@pytest.mark.parametrize("name", SINGULAR_SOLVES)
def test_solve_triangular_of_a_singular_triangle_is_lapacks(name, oracle):
    """A zero on the triangle's diagonal: PyTorch's substitution divides by it (infs, and NaNs of 0/0 or inf - inf)
    where the engine's solve through the inverse raised LinAlgError."""
    ours, theirs = (
        SINGULAR_SOLVES[name](torch, torch.tensor(SINGULAR_TRIANGLE), torch.tensor(RHS)) for torch in (engine, oracle)
    )
    assert str(ours.dtype) == str(theirs.dtype) and ours.shape == theirs.shape
    numpy.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
def test_solve_triangular_of_a_batch_by_substitution(upper, left, oracle):
    """Broadcast batches, one triangle singular: values, node name and the good triangles' gradients as PyTorch's
    (and as finite differences)."""
    rng = numpy.random.default_rng(5)
    values = rng.uniform(-2.0, 2.0, (2, 1, 4, 4)) + 4 * numpy.eye(4)
    values[0, 0, 2, 2] = 0.0
    rhs = rng.uniform(-2.0, 2.0, (3, 4, 5) if left else (3, 5, 4))
    results = []
    for torch in (engine, oracle):
        A = torch.tensor(values, requires_grad=True)
        B = torch.tensor(rhs, requires_grad=True)
        X = torch.linalg.solve_triangular(A, B, upper=upper, left=left)
        assert type(X.grad_fn).__name__ == "LinalgSolveTriangularBackward0"
        (X[1] * torch.linspace(-1.0, 2.0, X[1].numel(), dtype=torch.float64).reshape(X[1].shape)).sum().backward()
        results.append((X.detach().numpy(), A.grad[1].numpy(), B.grad.numpy()))
    for ours, theirs in zip(*results):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12, equal_nan=True)
    good = engine.tensor(values[1], requires_grad=True)
    B = engine.tensor(rhs, requires_grad=True)
    assert engine.gradcheck(lambda a, b: engine.linalg.solve_triangular(a, b, upper=upper, left=left), (good, B))


FIRST_CREATE_GRAPH_GRADIENTS = {
    "x * x": lambda t, x: (x * x).sum(),
    "x ** 3": lambda t, x: (x**3).sum(),
    "exp(x) * x, x used twice": lambda t, x: (x.exp() * x).sum(),
    "x * 2 (a constant gradient)": lambda t, x: (x * 2).sum(),
}


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
@pytest.mark.parametrize("name", FIRST_CREATE_GRAPH_GRADIENTS)
def test_first_create_graph_gradient_is_a_recorded_copy(name, oracle):
    """`loss.backward(create_graph=True)` into an empty `.grad`: PyTorch's AccumulateGrad keeps a copy of the sum
    of the leaf's gradients (`CopyBackwards`, none when that sum needs no grad), where the engine kept the last
    edge's gradient (`AddBackward0` of `x * x`); the next backward adds (`AddBackward0`). The values, and the
    second derivative through `.grad`, as PyTorch's and as finite differences."""
    results = []
    for torch in (engine, oracle):
        x = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
        FIRST_CREATE_GRAPH_GRADIENTS[name](torch, x).backward(create_graph=True)
        first = type(x.grad.grad_fn).__name__ if x.grad.grad_fn is not None else None
        grad = x.grad
        second = torch.autograd.grad(grad.pow(2).sum(), x, allow_unused=True)[0] if grad.requires_grad else None
        FIRST_CREATE_GRAPH_GRADIENTS[name](torch, x).backward(create_graph=True)
        then = type(x.grad.grad_fn).__name__ if x.grad.grad_fn is not None else None
        results.append((first, then, grad.detach().numpy(), None if second is None else second.numpy()))
    (name_ours, then_ours, grad_ours, second_ours), (name_theirs, then_theirs, grad_theirs, second_theirs) = results
    assert (name_ours, then_ours) == (name_theirs, then_theirs)
    numpy.testing.assert_allclose(grad_ours, grad_theirs, rtol=1e-12)
    if second_theirs is None:
        assert second_ours is None
        return
    numpy.testing.assert_allclose(second_ours, second_theirs, rtol=1e-12)

    def squared_gradient(values):
        x = engine.tensor(values, dtype=engine.float64, requires_grad=True)
        FIRST_CREATE_GRAPH_GRADIENTS[name](engine, x).backward()
        return float((x.grad**2).sum())

    at, h = numpy.array([0.5, -1.5, 2.0]), 1e-6
    finite = [(squared_gradient(at + h * e) - squared_gradient(at - h * e)) / (2 * h) for e in numpy.eye(3)]
    numpy.testing.assert_allclose(second_ours, finite, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_create_graph_gradients_of_retained_and_chosen_inputs(oracle):
    """A retained non-leaf's first `.grad` is a clone (`CloneBackward0`), a leaf's a copy, also with `inputs=` and
    of a root's own gradient (not the seed itself)."""
    names = []
    for torch in (engine, oracle):
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = x * x
        y.retain_grad()
        (y * y).sum().backward(create_graph=True)
        z = torch.tensor([1.0, 2.0], requires_grad=True)
        (z**3).sum().backward(inputs=[z], create_graph=True)
        seed = torch.ones(2, requires_grad=True) * 1
        w = torch.tensor([3.0, 4.0], requires_grad=True)
        w.backward(seed, create_graph=True)
        names.append([type(v.grad.grad_fn).__name__ for v in (y, x, z, w)] + [w.grad is seed])
    assert names[0] == names[1] == ["CloneBackward0", "CopyBackwards", "CopyBackwards", "CopyBackwards", False]


def test_spectrum_abs_and_angle_node_names(oracle):
    """`|torch.fft.fft(x)|` and its angle, of `torch.polar` and `torch.complex`: AbsBackward0 and AngleBackward0
    (the engine showed its real view's LinalgVectorNormBackward0 and Atan2Backward0); values and gradients."""
    results = []
    for torch in (engine, oracle):
        x = torch.tensor([0.5, -1.5, 2.0, 0.25], dtype=torch.float64, requires_grad=True)
        outs = [
            torch.fft.fft(x).abs(),
            torch.fft.rfft(x).angle(),
            torch.polar(x.abs() + 1, x).abs(),
            torch.complex(x, 2 * x).angle(),
        ]
        assert [type(o.grad_fn).__name__ for o in outs] == ["AbsBackward0", "AngleBackward0"] * 2
        sum((o * torch.arange(1.0, o.numel() + 1, dtype=torch.float64)).sum() for o in outs).backward()
        results.append(([o.detach().numpy() for o in outs], x.grad.numpy()))
    for ours, theirs in zip(results[0][0], results[1][0]):
        numpy.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    numpy.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-10, atol=1e-12)
    x = engine.tensor([0.5, -1.5, 2.0, 0.25], dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda v: engine.fft.fft(v).abs() + engine.fft.fft(v).angle(), (x,))


def test_lbfgs_keeps_float32_with_a_parameter_without_gradient(oracle):
    """LBFGS over float32 parameters, one unused (no `.grad`): PyTorch's flat gradient, directions and history are
    float32 (its zeros are the parameter's dtype); the engine's zeros were float64, so every vector after was."""
    results = []
    for torch in (engine, oracle):
        rng = numpy.random.default_rng(1)
        w = torch.nn.Parameter(torch.tensor(rng.standard_normal((3, 4)) * 0.5, dtype=torch.float32))
        unused = torch.nn.Parameter(torch.ones(2))
        x = torch.tensor(rng.standard_normal((8, 4)), dtype=torch.float32)
        y = torch.tensor(rng.standard_normal((8, 3)), dtype=torch.float32)
        optimizer = torch.optim.LBFGS([w, unused], max_iter=3)

        def closure(torch=torch, w=w, x=x, y=y, optimizer=optimizer):
            optimizer.zero_grad()
            loss = ((torch.tanh(x @ w.t()) - y) ** 2).mean()
            loss.backward()
            return loss

        optimizer.step(closure)
        state = optimizer.state_dict()["state"][0]
        vectors = [state["d"], state["prev_flat_grad"], state["H_diag"], *state["old_dirs"], *state["old_stps"]]
        results.append(([str(numpy.dtype(str(v.dtype).removeprefix("torch."))) for v in vectors], w.detach().numpy()))
    assert results[0][0] == results[1][0] == ["float32"] * len(results[1][0])
    numpy.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5, atol=1e-6)


CLONE_LAYOUTS = {
    "t().clone().view(-1)": lambda t, x: x.t().clone().view(-1),
    "torch.clone(x.t()).view(-1)": lambda t, x: t.clone(x.t()).view(-1),
    "t().clone(preserve_format).view(2, 3)": lambda t, x: x.t().clone(memory_format=t.preserve_format).view(2, 3),
    "t().clone(contiguous_format).view(-1)": lambda t, x: x.t().clone(memory_format=t.contiguous_format).view(-1),
    "t().contiguous().view(-1)": lambda t, x: x.t().contiguous().view(-1),
    "t().clone().contiguous().view(-1)": lambda t, x: x.t().clone().contiguous().view(-1),
    "t().clone().reshape(-1)": lambda t, x: x.t().clone().reshape(-1),
    "t().clone().t().view(-1)": lambda t, x: x.t().clone().t().view(-1),
    "t().clone().mT.view(-1)": lambda t, x: x.t().clone().mT.view(-1),
    "x[:, ::2].clone().view(-1)": lambda t, x: x[:, ::2].clone().view(-1),
    "x[:, 1:].clone().view(-1)": lambda t, x: x[:, 1:].clone().view(-1),
    "x[:1].expand(3, 3).clone().view(-1)": lambda t, x: x[:1].expand(3, 3).clone().view(-1),
    "permute(2, 0, 1).clone().view(-1)": lambda t, x: x.reshape(1, 2, 3).permute(2, 0, 1).clone().view(-1),
    "permute(2, 0, 1).clone().permute(1, 2, 0).view(-1)": lambda t, x: (
        x.reshape(1, 2, 3).permute(2, 0, 1).clone().permute(1, 2, 0).view(-1)
    ),
    "t().clone()[1].view(-1)": lambda t, x: x.t().clone()[1].view(-1),
}


@pytest.mark.parametrize("name", CLONE_LAYOUTS)
def test_clone_keeps_a_views_layout(name, oracle):
    """PyTorch's clone keeps the strides of a dense view (`preserve_format`), so its copy of a transpose refuses
    `view(-1)` with PyTorch's error where the engine's (every copy row-major) ran it; `contiguous()`,
    `contiguous_format`, `reshape`, and the copies of steps and expands, are row-major as PyTorch's. Values, or
    the error, and `is_contiguous()`/`stride()` of the copy as PyTorch's."""
    outcomes = []
    for torch in (engine, oracle):
        x = torch.arange(6.0).reshape(2, 3)
        try:
            out = CLONE_LAYOUTS[name](torch, x)
        except RuntimeError as error:
            outcomes.append(str(error))
        else:
            outcomes.append(out.tolist())
    assert outcomes[0] == outcomes[1]


def test_clone_layout_strides_and_gradients(oracle):
    """`stride()` and `is_contiguous()` of copies of views as PyTorch's; the copy is still CloneBackward0, its
    values and gradients PyTorch's, in-place changes keep its layout, and its views see its memory."""
    layouts, results = [], []
    for torch in (engine, oracle):
        x = torch.arange(24.0, dtype=torch.float64).reshape(2, 3, 4)
        copies = [
            x.permute(2, 0, 1).clone(),
            x.permute(1, 2, 0)[::2].clone(),
            x.transpose(0, 2)[1:].clone(),
            x[0].t().unsqueeze(1).clone(),
            x[:, :1].expand(2, 3, 4).clone(),
            x.transpose(0, 1).clone(memory_format=torch.contiguous_format),
        ]
        layouts.append([(c.stride(), c.is_contiguous()) for c in copies])
        w = x.clone().requires_grad_()
        copy = w.transpose(0, 2).clone()
        assert type(copy.grad_fn).__name__ == "CloneBackward0"
        (copy * torch.linspace(-1.0, 1.0, 24, dtype=torch.float64).reshape(4, 3, 2)).sum().backward()
        changed = x.t().clone() if x.ndim == 2 else x[0].t().clone()
        changed.add_(1)
        changed[1].mul_(10)
        results.append((w.grad.numpy(), changed.tolist(), changed.is_contiguous()))
    assert layouts[0] == layouts[1]
    numpy.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
    assert results[0][1:] == results[1][1:]
    w = engine.arange(24.0, dtype=engine.float64).reshape(2, 3, 4).requires_grad_()
    assert engine.gradcheck(lambda v: v.transpose(0, 2).clone() * v.transpose(0, 2), (w,))

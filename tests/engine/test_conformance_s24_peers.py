"""Programs written from the test suites of autograd's peers (PyTorch's test_autograd.py, HIPS autograd's and
tinygrad's op tests, micrograd's), run on the engine and on PyTorch 2.13 (the oracle): where session 24 found
them diverging, each test names the program and what PyTorch does."""

from __future__ import annotations

import numpy as np
import pytest

import engine


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _both(oracle):
    return (engine, oracle)


def _outcome(program, torch):
    """What `program(torch)` returns, or its error's type (a subclass of RuntimeError, IndexError or TypeError as
    that class: the engine's refusals also subclass ValueError) and text."""
    try:
        return "returned", program(torch)
    except Exception as error:  # noqa: BLE001  (any error: its type's name is compared)
        kind = next((k for k in (RuntimeError, IndexError, TypeError) if isinstance(error, k)), type(error))
        return kind.__name__, str(error)


def _same_outcome(program, oracle):
    got, want = (_outcome(program, torch) for torch in _both(oracle))
    assert got == want
    return got


def _values(*tensors):
    return [None if t is None else t.detach().numpy().tolist() for t in tensors]


# --- test_autograd.py: hooks, requires_grad, detach_, .grad's dtype ---------------------------------------------


def test_post_accumulate_grad_hook_that_returns_something_is_refused_as_torch(oracle):
    for returned, kind in ((lambda p: p * 2, "RuntimeError"), (lambda p: 1, "TypeError")):

        def program(torch, returned=returned):
            x = torch.ones(2, requires_grad=True)
            x.register_post_accumulate_grad_hook(returned)
            x.sum().backward()

        assert _same_outcome(program, oracle)[0] == kind

    def quiet(torch):  # a hook returning None sees the accumulated .grad, each backward
        x, seen = torch.ones(2, requires_grad=True), []
        x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
        (x * 3).sum().backward()
        (x * 3).sum().backward()
        return seen

    assert _same_outcome(quiet, oracle) == ("returned", [[3.0, 3.0], [6.0, 6.0]])


def test_requires_grad_of_a_non_leaf_as_torch(oracle):
    """requires_grad_(True) of a non-leaf is no error (it requires grad already); the setter refuses both."""

    def program(torch, how):
        y = torch.ones(2, requires_grad=True) * 2
        if how == "method":
            return y.requires_grad_(True) is y, y.requires_grad, y.is_leaf
        if how == "method_false":
            y.requires_grad_(False)
        y.requires_grad = how == "set_true"

    assert _same_outcome(lambda t: program(t, "method"), oracle) == ("returned", (True, True, False))
    for how in ("method_false", "set_true", "set_false"):
        assert _same_outcome(lambda t, how=how: program(t, how), oracle)[0] == "RuntimeError"


def test_retain_grad_of_a_tensor_without_grad_says_tensor_as_torch(oracle):
    assert _same_outcome(lambda t: t.ones(2).retain_grad(), oracle)[0] == "RuntimeError"


def test_detach_in_place_of_a_view_is_refused_as_torch(oracle):
    def program(torch, make):
        base = torch.ones(3, requires_grad=True)
        v = make(base)
        v.detach_()
        return v.requires_grad, v.is_leaf

    for make in (lambda b: (b * 2)[:2], lambda b: b[1:], lambda b: b.detach()[:2], lambda b: torch_free(b)):
        assert _same_outcome(lambda t, make=make: program(t, make), oracle)[0] == "RuntimeError"
    assert _same_outcome(lambda t: program(t, lambda b: b * 2), oracle) == ("returned", (False, True))
    assert _same_outcome(lambda t: program(t, lambda b: b.detach()), oracle) == ("returned", (False, True))


def torch_free(base):
    """A view of a tensor that requires no grad."""
    return base.detach().clone().view(3)


def test_a_grad_of_another_dtype_is_refused_as_torch(oracle):
    for dtype in ("float64", "int64", "float16"):

        def program(torch, dtype=dtype):
            w = torch.ones(3, requires_grad=True)
            w.grad = torch.ones(3, dtype=getattr(torch, dtype))

        assert _same_outcome(program, oracle)[0] == "RuntimeError"


def test_grad_of_an_output_without_grad_names_the_output_first_as_torch(oracle):
    def program(torch):
        x = torch.ones(2)
        torch.autograd.grad(x.sum(), x)

    assert _same_outcome(program, oracle) == (
        "RuntimeError",
        "element 0 of tensors does not require grad and does not have a grad_fn",
    )


# --- test_autograd.py: custom Functions ---------------------------------------------------------------------


def _function(torch, forward, backward):
    return type(
        "MyFn", (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    )


def test_function_backward_with_an_extra_gradient_is_refused_as_torch(oracle):
    def program(torch, extra):
        fn = _function(torch, lambda ctx, x: x * 2, lambda ctx, g: (g, extra(g)))
        x = torch.ones(2, requires_grad=True)
        fn.apply(x).sum().backward()
        return x.grad.tolist()

    assert _same_outcome(lambda t: program(t, lambda g: g), oracle) == (
        "RuntimeError",
        "function MyFnBackward returned an incorrect number of gradients (expected 1, got 2)",
    )
    assert _same_outcome(lambda t: program(t, lambda g: None), oracle) == ("returned", [1.0, 1.0])


def test_saved_tensors_of_a_freed_function_ctx_are_refused_as_torch(oracle):
    """The ctx a backward kept: its saved tensors are freed with the graph (even when none were saved), its other
    attributes stay, so a second backward of a Function that saved nothing runs."""

    def read_later(torch, save):
        kept = []

        def forward(ctx, x):
            ctx.save_for_backward(*save(x))
            return x * 2

        def backward(ctx, g):
            kept.append(ctx)
            return g * 2

        x = torch.ones(2, requires_grad=True)
        _function(torch, forward, backward).apply(x).sum().backward()
        return kept[0].saved_tensors

    for save in (lambda x: (x,), lambda x: ()):
        assert _same_outcome(lambda t, save=save: read_later(t, save), oracle)[0] == "RuntimeError"

    def twice(torch):
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        y = _function(torch, forward, lambda ctx, g: (g * ctx.k, None)).apply(torch.ones(2, requires_grad=True), 3.0)
        total = y.sum()
        total.backward()
        total.backward()
        return y.grad_fn.next_functions[0][0].variable.grad.tolist()

    assert _same_outcome(twice, oracle) == ("returned", [6.0, 6.0])


def test_save_for_backward_of_a_non_tensor_is_refused_as_torch(oracle):
    def program(torch, value, requires_grad=True):
        def forward(ctx, x):
            ctx.save_for_backward(x, value)
            return x * 2

        return _function(torch, forward, lambda ctx, g: g).apply(torch.ones(1, requires_grad=requires_grad)).shape

    for value in (3, "a", [1.0]):
        assert _same_outcome(lambda t, value=value: program(t, value), oracle) == (
            "TypeError",
            f"save_for_backward can only save variables, but argument 1 is of type {type(value).__name__}",
        )
    assert _same_outcome(lambda t: program(t, None), oracle)[0] == "returned"
    assert _same_outcome(lambda t: program(t, 3, requires_grad=False), oracle)[0] == "returned"


# --- tinygrad's test_ops: max/min over a dim with ties, std of constant values, empty reductions ---------------


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_over_a_dim_sends_a_tie_gradient_to_its_index_as_torch(name, keepdim, oracle):
    data = [[1.0, 3.0, 3.0], [2.0, 2.0, 0.0], [5.0, 5.0, 5.0]]
    results = []
    for torch in _both(oracle):
        x = torch.tensor(data, dtype=torch.float64, requires_grad=True)
        values, index = getattr(x, name)(1, keepdim=keepdim)
        (values * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).reshape(values.shape)).sum().backward()
        whole = getattr(torch, name)(x.detach().requires_grad_(), dim=0)
        results.append(_values(values, index, x.grad) + [values.grad_fn.name(), whole.values.grad_fn.name()])
    assert results[0] == results[1]


def test_max_of_a_zero_dim_tensor_over_dim_0_as_torch(oracle):
    got = [
        _values(*torch.tensor(3.0, requires_grad=True).max(0)) + [torch.tensor(3.0).max(0).values.shape]
        for torch in _both(oracle)
    ]
    assert got[0] == got[1] == [3.0, 0, ()]


@pytest.mark.parametrize(("shape", "call"), [((0,), "max()"), ((2, 0), "max(1)"), ((2, 0), "min(-1)")])
def test_max_of_nothing_is_refused_as_torch(shape, call, oracle):
    assert _same_outcome(lambda t: eval(f"t.zeros(*shape).{call}"), oracle)[0] != "returned"  # noqa: S307
    got = [_outcome(lambda t: eval(f"t.zeros(*shape).{call}"), t) for t in _both(oracle)]  # noqa: S307
    assert got[0] == got[1]
    assert _same_outcome(lambda t: _values(*t.zeros(0, 2).max(1)), oracle) == ("returned", [[], []])


@pytest.mark.parametrize(
    "keywords", [{}, {"dim": 0}, {"dim": 1, "keepdim": True}, {"correction": 0}, {"dim": (0, 1), "correction": 2}]
)
def test_std_of_constant_values_has_a_zero_gradient_as_torch(keywords, oracle):
    data = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    got = []
    for torch in _both(oracle):
        x = torch.tensor(data, dtype=torch.float64, requires_grad=True)
        s = x.std(**keywords)
        s.sum().backward()
        m = torch.std_mean(x, **keywords)
        got.append(_values(s, x.grad) + [s.grad_fn.name(), m[0].grad_fn.name(), torch.var_mean(x)[0].grad_fn.name()])
    assert got[0] == got[1]
    assert not np.isnan(got[0][1]).any()


def test_std_gradient_matches_torch_and_finite_differences(oracle):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3, 4))
    grads = []
    for torch in _both(oracle):
        x = torch.tensor(data, requires_grad=True)
        total = x.std() + x.std(0).sum() + x.std(1, correction=2).sum() + torch.std_mean(x, 1)[0].sum()
        (g,) = torch.autograd.grad(total, x, create_graph=True)
        (gg,) = torch.autograd.grad((g * g).sum(), x)
        grads.append([g.detach().numpy(), gg.numpy()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    x = engine.tensor(data, requires_grad=True)
    assert engine.autograd.gradcheck(lambda v: v.std(1), (x,))
    assert engine.autograd.gradgradcheck(lambda v: v.std(), (x,))


def test_std_and_var_of_integers_are_refused_as_torch(oracle):
    for call in ("std", "var", "std_mean", "var_mean"):
        assert _same_outcome(lambda t, call=call: getattr(t, call)(t.tensor([1, 2])), oracle) == (
            "RuntimeError",
            f"{'std and var' if call in ('std', 'var') else call} only support floating point and complex dtypes",
        )


# --- HIPS autograd's and tinygrad's unary/binary op tests at edge values ----------------------------------------


def _value_and_grads(torch, call, *arrays, dtype="float64"):
    """call(*leaves)'s values, dtype and grad_fn name, and the gradients of a weighted sum of it (None: no path)."""
    leaves = [torch.tensor(np.asarray(a, dtype=dtype), requires_grad=True) for a in arrays]
    out = call(torch, *leaves)
    weights = torch.arange(1, out.numel() + 1, dtype=out.dtype).reshape(out.shape)
    grads = torch.autograd.grad((out * weights).sum(), leaves, allow_unused=True)
    return [out.detach().numpy(), str(out.dtype).split(".")[-1], out.grad_fn.name()] + [
        None if g is None else g.numpy() for g in grads
    ]


def _assert_same(got, want, rtol=1e-10):
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-300)
        else:
            assert g == w


EDGES = [-np.inf, -1e8, -2.0, -1.0, -0.5, -1e-10, 0.0, 1e-10, 0.5, 1.0, 2.0, 1e8, np.inf, np.nan]


@pytest.mark.parametrize("name", ["asinh", "acosh", "atanh", "arcsinh", "arctanh"])
def test_inverse_hyperbolic_functions_exact_at_edges_as_torch(name, oracle):
    """asinh(-1e8) was -inf and atanh(1e-10) lost 8 digits (composites of logs); their gradients at +-1 and inf
    were NaN where PyTorch's are inf and 0."""
    got, want = (_value_and_grads(t, lambda t, x: getattr(t, name)(x), EDGES) for t in _both(oracle))
    _assert_same(got, want)
    x = engine.tensor([0.3, -0.4] if name != "acosh" else [1.5, 2.5], dtype=engine.float64, requires_grad=True)
    assert engine.autograd.gradcheck(getattr(engine, name), (x,))
    assert engine.autograd.gradgradcheck(getattr(engine, name), (x,))


def test_atan2_gradient_at_the_origin_is_zero_as_torch(oracle):
    ys, xs = [0.0, 0.0, 1.0, -2.0, 0.0], [0.0, -1.0, 0.0, 3.0, 2.0]
    got, want = (_value_and_grads(t, lambda t, y, x: t.atan2(y, x), ys, xs) for t in _both(oracle))
    _assert_same(got, want)
    assert not np.isnan(got[3]).any()


def test_sign_of_nan_and_abs_gradient_at_nan_as_torch(oracle):
    data = [np.nan, -np.inf, -1.0, -0.0, 0.0, 2.0, np.inf]
    for call in (lambda t, x: t.sign(x), lambda t, x: x.abs(), lambda t, x: t.sgn(x) * x):
        got, want = (_value_and_grads(t, call, data) for t in _both(oracle))
        _assert_same(got[:2] + got[3:], want[:2] + want[3:])
    assert engine.sign(engine.tensor([np.nan, -3.0], dtype=engine.float32)).tolist() == [0.0, -1.0]


@pytest.mark.parametrize("name", ["xlogy", "special.xlogy", "special.xlog1py"])
def test_xlogy_gradient_where_x_is_zero_and_the_log_infinite_as_torch(name, oracle):
    """d/dx xlogy(x, y) is xlogy(x != 0, y): 0 at x == 0 even where log(y) is -inf (NaN before)."""
    xs, ys = [0.0, 0.0, 0.0, 1.0, 2.0, 0.0], [0.0, -1.0, 1.0, 0.0, 3.0, np.nan]

    def call(t, x, y):
        module, _, function = name.rpartition(".")
        return getattr(getattr(t, module) if module else t, function)(x, y)

    got, want = (_value_and_grads(t, call, xs, ys) for t in _both(oracle))
    _assert_same(got[:2] + got[3:], want[:2] + want[3:])


def test_copysign_gives_other_a_zero_gradient_and_promotes_as_torch(oracle):
    xs, ys = [-2.0, 0.0, 1.5, 3.0], [1.0, -0.0, -2.0, np.nan]
    got, want = (_value_and_grads(t, lambda t, x, y: t.copysign(x, y), xs, ys) for t in _both(oracle))
    _assert_same(got[:2] + got[3:], want[:2] + want[3:])
    dtypes = [str(t.copysign(t.ones(2), t.ones(2, dtype=t.float64)).dtype)[-7:] for t in _both(oracle)]
    assert dtypes[0] == dtypes[1] == "float64"


# --- test_autograd.py: hooks returning other values, grad modes around generators, inference-mode views ---------


def test_tensor_hook_returning_a_non_tensor_is_a_type_error_as_torch(oracle):
    def program(torch, leaf):
        x = torch.ones(2, requires_grad=True)
        y = x if leaf else x * 2
        y.register_hook(lambda g: 5)
        y.sum().backward()

    for leaf in (False, True):
        assert _same_outcome(lambda t, leaf=leaf: program(t, leaf), oracle) == (
            "TypeError",
            "expected Variable, but hook returned 'int'",
        )


@pytest.mark.parametrize("mode", ["no_grad", "enable_grad", "inference_mode", "set_grad_enabled"])
def test_grad_mode_decorating_a_generator_holds_in_each_step_as_torch(mode, oracle):
    """PyTorch's decorators run each step of a generator function in their mode, the caller's code between the
    steps in its own (a data loader written as a generator under @torch.no_grad())."""

    def program(torch):
        decorate = getattr(torch, mode)(False) if mode == "set_grad_enabled" else getattr(torch, mode)()
        seen = []

        @decorate
        def steps(x):
            sent = yield torch.is_grad_enabled(), (x * 2).requires_grad
            seen.append(sent)
            try:
                yield torch.is_grad_enabled()
            except ValueError:
                yield "thrown", torch.is_grad_enabled()
            return "done"

        outer = torch.no_grad() if mode == "enable_grad" else torch.enable_grad()
        with outer:
            g = steps(torch.ones(1, requires_grad=True))
            first = next(g)
            between = torch.is_grad_enabled()
            second = g.send("hello")
            thrown = g.throw(ValueError("x"))
            try:
                next(g)
            except StopIteration as stop:
                returned = stop.value
        return first, between, second, thrown, returned, seen, torch.is_grad_enabled()

    assert _same_outcome(program, oracle)[0] == "returned"


def test_a_view_of_a_normal_tensor_made_in_inference_mode_is_normal_as_torch(oracle):
    def program(torch):
        x = torch.ones(3)
        with torch.inference_mode():
            made = [x[:2], x.view(3), x.t(), x.detach(), x * 2, (x * 2)[:1], x.clone()]
        flags = [v.is_inference() for v in made]
        made[0].add_(1)  # (in place outside inference mode: allowed on a normal view)
        return flags, x.tolist()

    assert _same_outcome(program, oracle) == (
        "returned",
        ([False, False, False, False, True, True, True], [2.0, 2.0, 1.0]),
    )


# --- test_autograd.py: as_tensor of a tensor, autograd.backward's keywords, grad() of no inputs -----------------


def test_as_tensor_of_a_tensor_is_that_tensor_with_its_graph_as_torch(oracle):
    def program(torch):
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        y = x * 3
        same, cast = torch.as_tensor(y), torch.as_tensor(y, dtype=torch.float64)
        (same.sum() + cast.sum()).backward()
        copied = torch.tensor(y.detach())
        return same is y, cast.grad_fn.name(), str(cast.dtype)[-7:], x.grad.tolist(), copied.requires_grad

    assert _same_outcome(program, oracle) == ("returned", (True, "ToCopyBackward0", "float64", [6.0, 6.0], False))


def test_autograd_backward_takes_grad_tensors_by_name_as_torch(oracle):
    def program(torch):
        x = torch.ones(2, requires_grad=True)
        torch.autograd.backward([(x * 2).sum(), x * 3], grad_tensors=[None, torch.tensor([1.0, 2.0])])
        torch.autograd.backward(x * 5, torch.ones(2), inputs=[x])
        return x.grad.tolist()

    assert _same_outcome(program, oracle) == ("returned", [10.0, 13.0])


def test_grad_of_no_inputs_is_refused_as_torch(oracle):
    def program(torch):
        x = torch.ones(2, requires_grad=True)
        torch.autograd.grad((x * 2).sum(), [])

    assert _same_outcome(program, oracle) == ("RuntimeError", "`inputs` argument to `grad()` cannot be empty.")


def test_asarray_of_a_tensor_keeps_it_and_its_requires_grad_as_torch(oracle):
    def program(torch):
        x = torch.ones(2, requires_grad=True)
        y = x * 2
        with pytest.warns(UserWarning, match="unspecified requires_grad now defaults to obj.requires_grad"):
            same = torch.asarray(y)
        detached = torch.asarray(y, requires_grad=False)
        plain = torch.asarray(torch.ones(2))
        made = torch.asarray([1.0, 2.0], requires_grad=True)
        return same is y, detached.requires_grad, detached.grad_fn, plain.requires_grad, made.requires_grad

    assert _same_outcome(program, oracle) == ("returned", (True, False, None, False, True))


# --- HIPS autograd's test_linalg: the `_ex` functions' results by name --------------------------------------


def test_linalg_ex_functions_return_named_results_as_torch(oracle):
    data = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]]
    got = []
    for torch in _both(oracle):
        a = torch.tensor(data, dtype=torch.float64, requires_grad=True)
        inv, chol, solved = (
            torch.linalg.inv_ex(a),
            torch.linalg.cholesky_ex(a, upper=True),
            torch.linalg.solve_ex(a, torch.ones(3, dtype=torch.float64), left=True),
        )
        (inv.inverse.sum() + chol.L.sum() + solved.result.sum()).backward()
        got.append(
            [inv.inverse, chol.L, solved.result, a.grad]
            + [(r.info.item(), str(r.info.dtype)[-5:], type(r).__name__) for r in (inv, chol, solved)]
        )
    for g, w in zip(*got):
        if isinstance(w, tuple):
            assert g == w
        else:
            np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-10)


# --- tinygrad's test_ops: 0-d tensors reduced over dim 0 or -1, empty reductions, t() of fewer dims ----------


ZERO_D_REDUCTIONS = {
    "sum": lambda x, d: x.sum(d),
    "mean": lambda x, d: x.mean(d, keepdim=True),
    "prod": lambda x, d: x.prod(d),
    "amax": lambda x, d: x.amax(d),
    "logsumexp": lambda x, d: x.logsumexp(d),
    "softmax": lambda x, d: x.softmax(d),
    "log_softmax": lambda x, d: x.log_softmax(d),
    "std": lambda x, d: x.std(d, correction=0),
    "var_mean": lambda x, d: x.var_mean(d, correction=0)[0] if hasattr(x, "var_mean") else None,
    "norm": lambda x, d: x.norm(dim=d),
    "max": lambda x, d: x.max(d).values,
}


@pytest.mark.parametrize("name", sorted(ZERO_D_REDUCTIONS))
@pytest.mark.parametrize("dim", [0, -1, 1])
def test_a_zero_d_tensor_reduced_over_dim_0_or_minus_1_as_torch(name, dim, oracle):
    def program(torch):
        x = torch.tensor(-1.5, dtype=torch.float64, requires_grad=True)
        out = ZERO_D_REDUCTIONS[name](x, dim) if name != "var_mean" else torch.var_mean(x, dim, correction=0)[0]
        (grad,) = torch.autograd.grad(out * 3, x)
        return out.shape, out.item(), grad.item()

    got = _same_outcome(program, oracle)
    assert got[0] == ("returned" if dim != 1 else "IndexError")


@pytest.mark.parametrize(("shape", "dim"), [((0, 3), 0), ((0, 3), 1), ((2, 0), -1)])
def test_softmax_and_logsumexp_over_nothing_as_torch(shape, dim, oracle):
    def program(torch):
        x = torch.zeros(*shape, dtype=torch.float64, requires_grad=True)
        outs = [x.logsumexp(dim), x.softmax(dim), torch.log_softmax(x, dim)]
        sum(o.sum() for o in outs).backward()
        return [(o.shape, o.tolist()) for o in outs] + [x.grad.shape]

    _same_outcome(program, oracle)


def test_t_of_a_vector_or_a_scalar_is_a_view_as_torch(oracle):
    def program(torch):
        got = []
        for data in (2.0, [1.0, 2.0]):
            x = torch.tensor(data, requires_grad=True)
            y = x.t()
            (y * 3).sum().backward()
            got.append((y is x, y.grad_fn.name(), y._base is x, x.grad.tolist(), y.shape == x.shape))
        return got

    assert _same_outcome(program, oracle)[1][0] == (False, "TBackward0", True, 3.0, True)


def test_cat_and_stack_refusals_in_torchs_words(oracle):
    calls = [
        lambda t: t.cat([t.ones(2, 3), t.ones(3, 3)], 1),
        lambda t: t.cat([t.ones(2, 3), t.ones(2, 4), t.ones(3, 3)], -2),
        lambda t: t.cat([t.ones(2, 3), t.ones(2, 3, 1)]),
        lambda t: t.cat([t.tensor(1.0), t.tensor(2.0)]),
        lambda t: t.stack([t.ones(2), t.ones(2), t.ones(3)]),
    ]
    for call in calls:
        assert _same_outcome(call, oracle)[0] == "RuntimeError"


# --- test_autograd.py: retain_grad across an in-place op, a backward returning a non-tensor, func.grad's output ---


def test_retain_grad_follows_the_tensor_through_an_in_place_op_as_torch(oracle):
    def program(torch):
        got = []
        for change in (lambda y: y.mul_(3), lambda y: y.__setitem__(0, 5.0)):
            x = torch.ones(3, requires_grad=True)
            y = x * 2
            y.retain_grad()
            change(y)
            (y * y).sum().backward()
            got.append((y.grad.tolist(), x.grad.tolist(), y.retains_grad))
        return got

    assert _same_outcome(program, oracle) == (
        "returned",
        [([12.0] * 3, [72.0] * 3, True), ([10.0, 4.0, 4.0], [0.0, 8.0, 8.0], True)],
    )


def test_function_backward_returning_a_non_tensor_is_refused_as_torch(oracle):
    for value in ("a", 2.0, [1.0, 1.0]):

        def program(torch, value=value):
            fn = _function(torch, lambda ctx, x: x * 2, lambda ctx, g: value)
            fn.apply(torch.ones(2, requires_grad=True)).sum().backward()

        assert _same_outcome(program, oracle) == (
            "RuntimeError",
            f"expected Variable or None (got {type(value).__name__})",
        )


def test_func_grad_of_a_function_returning_a_number_is_refused_as_torch(oracle):
    got = _same_outcome(lambda t: t.func.grad(lambda x: 3.0)(t.tensor([1.0, 2.0])), oracle)
    assert got == (
        "RuntimeError",
        "grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got <class 'float'>",
    )


# --- HIPS autograd's test_systematic: binary ops over broadcast shapes, values, gradients and node names --------

BINARY = {
    "copysign": lambda t, a, b: t.copysign(a, b),
    "lerp": lambda t, a, b: t.lerp(a, b, 0.3),
    "lerp_tensor": lambda t, a, b: t.lerp(a, b, b.sigmoid()),
    "fmax": lambda t, a, b: t.fmax(a, b),
    "fmin": lambda t, a, b: t.fmin(a, b),
    "xlogy": lambda t, a, b: t.xlogy(a, b.abs()),
    "ldexp": lambda t, a, b: t.ldexp(a, b),
    "atan2": lambda t, a, b: t.atan2(a, b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize(("sa", "sb"), [((), (3,)), ((2, 1), (1, 3)), ((4, 1, 3), (2, 3))])
def test_binary_ops_over_broadcast_shapes_as_torch(name, sa, sb, oracle):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(sa) + 0.1, rng.standard_normal(sb) + 0.1
    got, want = (_value_and_grads(t, BINARY[name], a, b) for t in _both(oracle))
    _assert_same(got, want)


def test_nansum_and_aminmax_name_their_nodes_as_torch(oracle):
    def program(torch):
        x = torch.tensor([[1.0, float("nan"), 3.0], [4.0, -5.0, 6.0]], dtype=torch.float64, requires_grad=True)
        low, high = torch.aminmax(x.nan_to_num(), dim=1)
        whole = torch.aminmax(x.nan_to_num())
        total = x.nansum() + x.nansum(1).sum() + low.sum() + 2 * high.sum() + whole.max
        total.backward()
        names = [v.grad_fn.name() for v in (x.nansum(), x.nansum(0, keepdim=True), low, high, whole.min)]
        return names, x.grad.tolist()

    got = _same_outcome(program, oracle)
    assert got[1][0][0] == "NansumBackward0" and got[1][0][2] == "AminmaxBackward0"


@pytest.mark.parametrize("which", ["view", "base"])
def test_mark_dirty_of_a_view_or_its_base_rebases_the_other_as_torch(which, oracle):
    """A Function that doubles a view of `base` in place (mark_dirty): `base`'s gradient went around it (its node
    stayed MulBackward0); PyTorch rebases base onto the Function's node (CopySlices), and a base's views onto it."""

    def program(torch):
        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(2)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, g):
                return g * 5

        x = torch.ones(3, requires_grad=True)
        base = x * 1
        view = base[1:]
        out = Double.apply(view if which == "view" else base)
        read = base if which == "view" else view
        (read * torch.arange(1.0, read.numel() + 1).reshape(read.shape)).sum().backward()
        return x.grad.tolist(), read.tolist(), base._version, view._version, out is (view if which == "view" else base)

    _same_outcome(program, oracle)


def test_python_number_conversions_refuse_in_torchs_words(oracle):
    calls = [
        lambda t: int(t.ones(2)),
        lambda t: float(t.ones(2, requires_grad=True)),
        lambda t: [1, 2][t.ones(2, dtype=t.int64)],
        lambda t: bool(t.ones(2)),
        lambda t: len(t.tensor(1.0)),
        lambda t: list(t.tensor(1.0)),
        lambda t: (float(t.tensor([2.5])), int(t.tensor(3.7)), bool(t.tensor([0.0]))),
    ]
    kinds = [_same_outcome(call, oracle)[0] for call in calls]
    assert kinds == ["ValueError", "ValueError", "TypeError", "RuntimeError", "TypeError", "TypeError", "returned"]


def test_zero_and_fill_in_place_name_their_nodes_as_torch(oracle):
    def program(torch):
        a = torch.ones(3, requires_grad=True)
        b, c, d, e = a * 2, a * 3, a * 4, a * 5
        b.zero_()
        c.fill_(3.0)
        d.fill_(torch.tensor(2.0, requires_grad=True))
        view = e[:2]
        view.zero_()
        (b + c * a + d + e).sum().backward()
        return [v.grad_fn.name() for v in (b, c, d, e)], a.grad.tolist()

    got = _same_outcome(program, oracle)
    assert got[1][0][:2] == ["ZeroBackward0", "FillBackward2"]

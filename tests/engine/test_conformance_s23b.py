"""Programs a user writes from the PyTorch tutorials and docs, run on the engine and on PyTorch 2.13 (the
oracle): the differences session 23's first sweep left (README's "Known limitations"), and training programs of
kinds the earlier sweeps did not cover; each test names the program and what PyTorch does."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import engine
from tests import training_programs_s23b as training

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def _refusal(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        return error
    raise AssertionError("accepted where PyTorch refuses")


# --- refusals of PyTorch's type (and still of the type they were, where code caught that) ----------------


REFUSED = {
    "zeros(-1)": (lambda t: t.zeros(-1), ValueError),
    "ones(2, -3)": (lambda t: t.ones(2, -3), ValueError),
    "randn((-1,))": (lambda t: t.randn((-1,)), ValueError),
    "int ** -1": (lambda t: t.tensor([2]) ** -1, ValueError),
    "max() of empty": (lambda t: t.ones(0).max(), ValueError),
    "cat([])": (lambda t: t.cat([]), IndexError),
    "stack([])": (lambda t: t.stack([]), IndexError),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refusals_are_of_torchs_type(name, oracle):
    call, before = REFUSED[name]
    want = _refusal(lambda: call(oracle))
    got = _refusal(lambda: call(engine))
    assert isinstance(got, type(want)), (got, want)
    if before is not IndexError:  # (cat's IndexError was an accident: `tensors[0]` of nothing)
        assert isinstance(got, before)
    if name in ("ones(2, -3)", "randn((-1,))", "cat([])"):
        assert str(got) == str(want)


# --- calls PyTorch refuses ---------------------------------------------------------------------------------


def test_a_float_index_tensor_is_refused_a_float_list_is_not(oracle):
    for torch in (engine, oracle):
        x = torch.arange(6.0).reshape(2, 3)
        for key in (torch.tensor([0.0]), torch.tensor(1.0), (slice(None), torch.tensor([1.5]))):
            with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
                x[key]
        with pytest.raises(IndexError, match="must be long"):
            x[torch.tensor([0.0])] = 1.0
        assert x[[1.0]].tolist() == [[3.0, 4.0, 5.0]]
        assert x[torch.tensor([1])].tolist() == [[3.0, 4.0, 5.0]]
        assert x[[]].shape == (0, 3)


def test_a_negative_slice_step_is_refused_as_torch(oracle):
    for torch in (engine, oracle):
        x = torch.arange(10)
        for key in (slice(None, None, -1), (slice(2, None, -2),)):
            with pytest.raises(ValueError, match="^step must be greater than zero$"):
                x[key]
        with pytest.raises(ValueError, match="slice step cannot be zero"):
            x[::0]
        assert x[8:1:3].tolist() == [] and x[1::3].tolist() == [1, 4, 7]
        assert torch.flip(x, [0])[:3].tolist() == [9, 8, 7]


def test_a_grad_of_another_size_is_refused(oracle):
    messages = []
    for torch in (engine, oracle):
        w = torch.ones(2, 3, requires_grad=True)
        with pytest.raises(RuntimeError) as refused:
            w.grad = torch.ones(3)
        messages.append(str(refused.value))
        assert w.grad is None
        w.grad = torch.full((2, 3), 2.0)
        (w * 3).sum().backward()
        assert w.grad.tolist() == [[5.0] * 3] * 2
        w.grad = None
        assert w.grad is None
    assert messages[0] == messages[1]


# --- IEEE arithmetic is silent as PyTorch's; std/var of too few values warn as PyTorch's ---------------------

IEEE_PROGRAM = """
import {} as torch
x = torch.tensor([-1.0, 0.0, 1.0], requires_grad=True)
ys = [x.sqrt(), x.log(), x / 0, 1 / x, x.rsqrt(), x.log2(), (x * 2).acos(), x ** -1, x.fmod(0), x.pow(0.5),
      x[x > 5].mean(), torch.ones(0, 3).mean(0)]
sum((y * 0).sum() for y in ys).backward()
print([y.isnan().sum().item() for y in ys], [y.isinf().sum().item() for y in ys], x.grad.isnan().all().item())
"""


def _fresh(program, *options):
    """What `program` prints in a fresh interpreter (with `options`), this tree's packages first."""
    done = subprocess.run(
        [sys.executable, *options, "-c", program],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=120,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout


def test_nan_and_inf_of_ops_and_their_gradients_are_silent_as_torch(oracle):
    """NumPy's RuntimeWarnings (turned into errors here) never reach a program, on the engine or the embedded
    client: PyTorch warns of none of these.
    In a fresh interpreter: pytest keeps no warnings filter that a module installs while it collects."""
    printed = [
        _fresh(IEEE_PROGRAM.format(name), "-W", "error::RuntimeWarning") for name in ("engine", "client", "torch")
    ]
    assert printed[0] == printed[1] == printed[2]


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.ones(1).std(),
        lambda t: t.ones(1).var(),
        lambda t: t.ones(2, 1).std(1),
        lambda t: t.ones(3).var(correction=3),
        lambda t: t.std_mean(t.ones(1)),
        lambda t: t.var_mean(t.ones(4, 1), 1),
        lambda t: t.ones(0).var(unbiased=False),
    ],
)
def test_std_and_var_of_too_few_values_warn_as_torch(call, oracle):
    shown = []
    for torch in (engine, oracle):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("ignore", category=RuntimeWarning)
            out = call(torch)
        first = out[0] if isinstance(out, tuple) else out
        shown.append(
            (
                [str(w.message).split(" (Triggered")[0] for w in caught],
                [w.category for w in caught],
                first.isnan().all(),
            )
        )
        assert all(w.filename == __file__ for w in caught)
    assert shown[0] == shown[1] and len(shown[0][0]) == 1


def test_std_and_var_of_enough_values_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert engine.ones(2).std().item() == 0.0
        assert engine.ones(3).var(correction=2).item() == 0.0
        assert engine.ones(2, 3).std(1, unbiased=False).tolist() == [0.0, 0.0]


# --- finfo, the `.T` deprecation, the scheduler-order warning, load_state_dict post hooks ---------------------


def test_finfo_limits_are_python_floats_as_torch(oracle):
    for name in ("float16", "float32", "float64"):
        got, want = engine.finfo(getattr(engine, name)), oracle.finfo(getattr(oracle, name))
        for limit in ("eps", "max", "min", "tiny", "smallest_normal", "resolution"):
            assert type(getattr(got, limit)) is float and getattr(got, limit) == getattr(want, limit), (name, limit)
        assert (got.bits, str(got.dtype), repr(got)) == (want.bits, str(want.dtype), repr(want))
    assert engine.finfo().eps == oracle.finfo().eps
    # the everyday use: a clamp away from zero, in the tensor's dtype
    x = engine.tensor([0.0, 0.5])
    assert x.clamp(min=engine.finfo(x.dtype).eps).dtype == engine.float32


def _warned(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [(w.category, str(w.message).split(" (Triggered")[0], w.filename) for w in caught]


T_PROGRAM = """
import warnings
import {} as torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    shapes = [torch.ones(s).T.shape for s in [(2, 3), (3,), (2, 3, 4), (), (4, 1), (1, 2, 3)]]
print([tuple(s) for s in shapes], [(w.category.__name__, str(w.message).split(" (Triggered")[0]) for w in caught])
"""


def test_T_of_a_tensor_not_2d_warns_once_a_process_as_torch(oracle):
    """PyTorch's warnings are TORCH_WARN_ONCE: compared in fresh interpreters."""
    printed = [_fresh(T_PROGRAM.format(name)) for name in ("engine", "torch")]
    assert printed[0] == printed[1] and printed[0].count("UserWarning") == 2


def _scheduler_program(torch, order):
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.SGD([w], lr=0.5, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    lrs = []
    for _ in range(3):
        for step in order:
            if step == "opt":
                opt.zero_grad()
                (w * w).sum().backward()
                opt.step()
            else:
                sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs, w.detach().tolist()


@pytest.mark.parametrize("order", [("sched", "opt"), ("opt", "sched")])
def test_scheduler_stepped_before_the_optimizer_warns_once_as_torch(order, oracle):
    got, want = (_warned(lambda t=t: _scheduler_program(t, order)) for t in (engine, oracle))
    assert got == want and len(got[1]) == (order[0] == "sched")


def test_load_state_dict_post_hooks_run_children_first_and_may_forgive_keys(oracle):
    runs = []
    for torch in (engine, oracle):
        nn = torch.nn
        torch.manual_seed(0)
        model, source = (nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 1))) for _ in range(2))
        seen = []

        def forgive_biases(module, keys, seen=seen):
            seen.append((type(module).__name__, list(keys.missing_keys), list(keys.unexpected_keys)))
            keys.missing_keys[:] = [k for k in keys.missing_keys if not k.endswith("bias")]

        model.register_load_state_dict_post_hook(forgive_biases)
        inner = model[1][0].register_load_state_dict_post_hook(forgive_biases)
        state = {k: v for k, v in source.state_dict().items() if k != "1.0.bias"}
        result = model.load_state_dict(state)
        loaded = torch.equal(model[1][0].weight, source[1][0].weight)
        inner.remove()
        with pytest.raises(RuntimeError) as refused:
            model.load_state_dict({k: v for k, v in source.state_dict().items() if k != "0.weight"})
        model.register_load_state_dict_post_hook(lambda module, keys: keys)
        with pytest.raises(AssertionError, match="not expected to return new values"):
            model.load_state_dict(source.state_dict())
        runs.append((seen, repr(result), loaded, str(refused.value)))
    assert runs[0] == runs[1]


# --- torch.gradient, unique(dim=) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"spacing": 2.0}, {"dim": 1, "edge_order": 2}, {"spacing": [0.5, 3.0]}, {"dim": (-1,), "spacing": 0.25}],
)
def test_gradient_values_and_backward_as_torch(kwargs, oracle):
    rng = np.random.default_rng(1)
    x, seed = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    got, want = [], []
    for torch, out in ((engine, got), (oracle, want)):
        v = torch.tensor(x, requires_grad=True)
        parts = torch.gradient(v, **kwargs)
        sum((p * torch.tensor(seed)).sum() for p in parts).backward()
        out.append(([p.detach().numpy() for p in parts], v.grad.numpy(), [p.grad_fn.name() for p in parts]))
    np.testing.assert_allclose(np.stack(got[0][0]), np.stack(want[0][0]), rtol=1e-12)
    np.testing.assert_allclose(got[0][1], want[0][1], rtol=1e-12)
    assert got[0][2] == want[0][2]

    def f(a):
        return sum((p * engine.tensor(seed)).sum() for p in engine.gradient(engine.tensor(a), **kwargs)).item()

    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1e-6
        numeric[i] = (f(x + e) - f(x - e)) / 2e-6
    np.testing.assert_allclose(got[0][1], numeric, rtol=1e-6, atol=1e-8)


def test_gradient_of_integers_and_its_refusal_as_torch(oracle):
    for torch in (engine, oracle):
        (g,) = torch.gradient(torch.tensor([1, 4, 9, 16]))
        assert g.dtype == torch.float32 and g.tolist() == [3.0, 4.0, 6.0, 7.0]
        with pytest.raises(RuntimeError, match="at least edge_order\\+1"):
            torch.gradient(torch.ones(2, 3), edge_order=2)
        assert not hasattr(torch.ones(2), "gradient")


@pytest.mark.parametrize(
    "kwargs",
    [{"dim": 0}, {"dim": 1, "return_inverse": True, "return_counts": True}, {"dim": -1, "return_counts": True}],
)
def test_unique_along_a_dim_as_torch(kwargs, oracle):
    x = np.array([[[1, 2], [1, 2]], [[0, 1], [0, 1]], [[1, 2], [1, 2]]])
    got, want = (
        [
            (a.tolist(), str(a.dtype))
            for a in (lambda r: r if isinstance(r, tuple) else (r,))(t.unique(t.tensor(x), **kwargs))
        ]
        for t in (engine, oracle)
    )
    assert got == want
    floats = np.array([[0.5, -1.0], [0.5, -1.0], [-2.0, 3.0]], dtype=np.float32)
    assert engine.unique(engine.tensor(floats), dim=0).tolist() == oracle.unique(oracle.tensor(floats), dim=0).tolist()


# --- func.jacrev/jacfwd/hessian keep the graph to the parameters a function closes over ----------------------


def _jacobian_run(torch):
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -1.0, 2.0], [0.1, 0.2, -0.3]]))
        lin.bias.fill_(0.25)
    x = torch.tensor([0.3, -0.2, 0.7])
    jac = torch.func.jacrev(lambda t: lin(t).tanh())(x)  # a Jacobian penalty that trains lin
    fwd = torch.func.jacfwd(lambda t: lin(t).tanh())(x)
    hess = torch.func.hessian(lambda t: lin(t).tanh().sum())(x)
    (jac.pow(2).sum() + fwd.sum() + hess.sum()).backward()
    plain = torch.func.jacrev(lambda t: (t**3).sum())(x)
    with torch.no_grad():
        quiet = torch.func.jacrev(lambda t: lin(t).tanh())(x)
    flags = [v.requires_grad for v in (jac, fwd, hess, plain, quiet)]
    values = [v.detach().numpy() for v in (jac, fwd, hess, lin.weight.grad, lin.bias.grad, plain, quiet)]
    return flags, values


def test_jacrev_jacfwd_hessian_keep_the_graph_to_parameters_they_close_over(oracle):
    (got_flags, got), (want_flags, want) = _jacobian_run(engine), _jacobian_run(oracle)
    assert got_flags == want_flags == [True, True, True, False, False]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# --- training programs of kinds not covered before (tests/training_programs_s23b.py) ---------------------------


def _assert_same(got, want, where="result"):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and (got.shape, got.dtype) == (want.shape, want.dtype), where
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=where)
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6), where
    else:
        assert got == want, where


@pytest.mark.parametrize("name", sorted(training.PROGRAMS))
def test_training_program_matches_torch(name, oracle):
    program = training.PROGRAMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (PyTorch's own deprecations; the engine's warnings are tested above)
        want, got = program(oracle), program(engine)
    _assert_same(got, want, name)

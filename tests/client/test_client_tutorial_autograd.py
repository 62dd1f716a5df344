"""PyTorch's autograd and torch.func tutorials (tests/tutorial_autograd_programs.py) run with `import engine as
torch`, with the client embedded and through a live server (the `torch_like` fixture), each compared with what
PyTorch 2.13 itself gives for the same program and the same random draws."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests import tutorial_autograd_programs as programs
from tests.modern_programs import with_numpy_draws

ENGINE_ONLY = {
    # the client's backward is computed by the server: saved tensors, their hooks and node hooks are not there
    "graph_internals": (NotImplementedError, "client Variable's grad_fn: its backward is one request"),
    # the client traces a custom Function's backward to differentiate it, forward-mode too; its jvp is not used
    "forward_ad_custom_function": (NotImplementedError, "jvp is not used on the client"),
}


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


def host(value):
    """A program's result with tensors as float64 arrays (nested lists, tuples and dicts kept)."""
    if hasattr(value, "detach"):
        return np.asarray(value.detach().numpy(), dtype=np.float64)
    if isinstance(value, (list, tuple)):
        return [host(v) for v in value]
    if isinstance(value, dict):
        return {k: host(v) for k, v in value.items()}
    return value


def assert_same(got, want, where):
    if isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=where)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-5), where
    else:
        assert got == want, where


def run(program, torch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation and create_graph warnings: their own tests check them
        return host(program(torch))


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_tutorial_gives_torchs_results(torch_like, oracle, name):
    program = programs.PROGRAMS[name]
    on_client = torch_like.__name__ == "client"
    if on_client and name in ENGINE_ONLY:
        error, message = ENGINE_ONLY[name]
        with pytest.raises(error, match=message):
            run(program, torch_like)
        return
    assert_same(run(program, torch_like), run(program, with_numpy_draws(oracle)), name)


def test_the_tutorials_own_checks_pass(torch_like):
    """What the tutorials assert about their own results holds on every side."""
    ntk = run(programs.neural_tangent_kernel, torch_like)
    assert ntk["same"] and ntk["full"].shape == (4, 3, 3, 3) and ntk["trace"].shape == (4, 3)
    ensemble = run(programs.model_ensembling, torch_like)
    assert ensemble["different matches loop"] and ensemble["same matches loop"]
    assert run(programs.per_sample_grads, torch_like)["agree"]
    assert run(programs.jacobians_hessians, torch_like)["agree"]
    checks = run(programs.gradchecks, torch_like)
    assert all(checks[k] is True for k in ("mm", "mm gradgrad", "fast", "forward ad", "nondet"))
    assert checks["wrong quiet"] is False and checks["wrong raises"] == ["GradcheckError", True]


def test_jacrev_of_a_dict_of_parameters_is_a_dict_as_torch_func_gives(torch_like, oracle):
    """jacrev/vjp/jvp over a pytree (the NTK tutorial's parameter dict): it was refused ("must be a Variable")."""
    sides = {}
    for m in (torch_like, oracle):
        w, b = m.tensor([[1.0, 2.0], [3.0, -1.0]]), m.tensor([0.5, -0.5])
        x = m.tensor([0.3, -0.2])

        def f(params, x=x):
            return (params["w"] @ x + params["b"]).tanh()

        params = {"w": w, "b": b}
        jac = m.func.jacrev(f)(params)
        hess = m.func.jacrev(m.func.jacrev(lambda p: f(p).sum()))(params)
        out, vjp_fn = m.func.vjp(f, params)
        (cotangent,) = vjp_fn(m.ones_like(out))
        _, tangent = m.func.jvp(f, (params,), ({"w": m.ones_like(w), "b": m.zeros_like(b)},))
        sides[m.__name__] = host([jac, hess, cotangent, tangent])
        assert isinstance(jac, dict) and isinstance(hess["w"], dict) and isinstance(cotangent, dict)
    assert_same(sides[torch_like.__name__], sides["torch"], "pytrees")


def test_only_inputs_is_accepted_with_torchs_warning(torch_like):
    x = torch_like.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(FutureWarning, match="only_inputs argument is deprecated"):
        (g,) = torch_like.autograd.grad((x * x).sum(), x, only_inputs=False)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_like.autograd.grad((x * x).sum(), x, only_inputs=True)


def test_inference_mode_is_told_and_false_enables_grad_as_torchs(torch_like, oracle):
    def states(m):
        seen = [m.is_inference_mode_enabled()]
        with m.no_grad(), m.inference_mode(False):
            seen.append((m.is_inference_mode_enabled(), m.is_grad_enabled()))
        with m.inference_mode():
            seen.append((m.is_inference_mode_enabled(), m.is_grad_enabled()))
        decorated = m.inference_mode(lambda: (m.is_inference_mode_enabled(), m.is_grad_enabled()))
        return [*seen, decorated(), m.is_inference_mode_enabled(), m.is_grad_enabled()]

    assert states(torch_like) == states(oracle)


def _inference_outcomes(m):
    """What PyTorch's inference mode notes say of inference tensors (made in `inference_mode()`, and views of
    them): inside it they are changed in place and made to require grad; outside it they may be read and used by
    ops that save no input, but not changed in place, made to require grad or saved for a backward."""
    x = m.tensor([1.0, -2.0], dtype=m.float64, requires_grad=True)

    def made():
        with m.inference_mode():
            return x * 2

    with m.inference_mode():
        inside = made().add_(1).tolist(), made().requires_grad_().requires_grad, made()[0:1].mul_(3).tolist()
    y = made()
    seen = [inside, y.is_inference(), y.requires_grad, y[0:1].is_inference(), y.clone().is_inference()]

    def add_in_place(t):
        t += 1

    class Saves(m.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g * ctx.saved_tensors[0], None

    attempts = {
        "requires_grad_": lambda t: t.requires_grad_(),
        "requires_grad = True": lambda t: setattr(t, "requires_grad", True),
        "add_": lambda t: t.add_(1),
        "+=": add_in_place,
        "setitem": lambda t: t.__setitem__(0, 5.0),
        "a view's mul_": lambda t: t[0:1].mul_(2),
        "zero_": lambda t: t.zero_(),
        "copy_": lambda t: t.copy_(x.detach()),
        "mul saves it": lambda t: (t * x).sum().backward(),
        "mm saves it": lambda t: t.reshape(1, 2).mm(x.reshape(2, 1)),
        "a view saved": lambda t: (t[0:1] * x[0:1]).sum().backward(),
        "a Function saves it": lambda t: Saves.apply(x, t).sum().backward(),
    }
    for name, attempt in attempts.items():
        try:
            attempt(made())
            seen.append((name, "ok"))
        except RuntimeError as error:
            seen.append((name, str(error)))
    (y + x).sum().backward()  # add saves no input
    (y.exp() * x).sum().backward()  # exp's output is no inference tensor
    with m.no_grad():
        product = (y * x).sum().item() + Saves.apply(x, y).sum().item()  # nothing saved
    return [*seen, x.grad.tolist(), y.tolist(), product, y.requires_grad_(False).requires_grad]


def test_inference_tensors_are_refused_outside_inference_mode_as_torchs(torch_like, oracle):
    assert _inference_outcomes(torch_like) == _inference_outcomes(oracle)


def test_gradcheck_error_is_a_runtime_error_as_torchs(torch_like):
    x = torch_like.tensor([0.5, 1.5], dtype=torch_like.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        torch_like.autograd.gradcheck(lambda t: torch_like.tensor(t.detach().numpy() * 2) + t, (x,))


JACOBIAN_OPTIONS = [
    {"strategy": "forward-mode"},  # PyTorch's forward mode needs vectorize=True
    {"strategy": "forward-mode", "vectorize": True, "create_graph": True},
    {"strategy": "forward-mode", "vectorize": True, "strict": True},
    {"strict": True, "vectorize": True},
    {"strategy": "sideways"},
]


@pytest.mark.parametrize("options", JACOBIAN_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_jacobian_refuses_torchs_option_pairs_with_its_errors(torch_like, oracle, options):
    for m in (oracle, torch_like):
        x = m.tensor([0.5, 1.5], dtype=m.float64)
        with pytest.raises(Exception) as raised:
            m.autograd.functional.jacobian(lambda t: t.sin(), x, **options)
        if m is oracle:
            want = raised
    assert (raised.type, str(raised.value)) == (want.type, str(want.value))


def test_jacrev_refuses_a_chunk_size_below_one_as_torch(torch_like):
    with pytest.raises(ValueError, match="jacrev: `chunk_size` should be greater than 0."):
        torch_like.func.jacrev(lambda t: t, chunk_size=0)

"""Programs a user writes from the PyTorch tutorials and docs, run on the engine and on PyTorch 2.13 (the
oracle): the differences session 23's first sweep left (README's "Known limitations"), and training programs of
kinds the earlier sweeps did not cover; each test names the program and what PyTorch does."""

from __future__ import annotations

import warnings

import pytest

import engine


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
ys = [x.sqrt(), x.log(), x / 0, 1 / x, x.rsqrt(), x.log2(), (x * 2).acos(), x ** -1, x.fmod(0), x.pow(0.5)]
sum((y * 0).sum() for y in ys).backward()
print([y.isnan().sum().item() for y in ys], [y.isinf().sum().item() for y in ys], x.grad.isnan().all().item())
"""


def test_nan_and_inf_of_ops_and_their_gradients_are_silent_as_torch(oracle):
    """NumPy's RuntimeWarnings (turned into errors here) never reach a program: PyTorch warns of none of these.
    In a fresh interpreter: pytest keeps no warnings filter that a module installs while it collects."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    printed = []
    for name in ("engine", "torch"):
        done = subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-c", IEEE_PROGRAM.format(name)],
            capture_output=True,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": root},
            timeout=120,
        )
        assert done.returncode == 0 and not done.stderr, done.stderr
        printed.append(done.stdout)
    assert printed[0] == printed[1]


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

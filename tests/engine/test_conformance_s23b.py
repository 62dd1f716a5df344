"""Programs a user writes from the PyTorch tutorials and docs, run on the engine and on PyTorch 2.13 (the
oracle): the differences session 23's first sweep left (README's "Known limitations"), and training programs of
kinds the earlier sweeps did not cover; each test names the program and what PyTorch does."""

from __future__ import annotations

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

"""`sum`/`mean`/`nansum`/`nanmean` with `dtype=`, NaN's place in `sort`/`argsort`/`topk`/`msort` (the largest:
first when descending, last when ascending), and the value checks of `nll_loss`/`cross_entropy` (a class out of
range) and `binary_cross_entropy` (an input outside [0, 1]), against torch on the engine, the embedded client and a
live server. Gradients are torch's, and finite differences' in float64."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

NAN = float("nan")
VALUES = [[1.5, NAN, 3.0, -2.0], [4.0, 5.0, 6.25, NAN]]
INTEGERS = [[1, 2, 3], [4, 5, 6]]

REDUCTIONS = {
    "sum f64": lambda m, x, i: m.sum(i, dtype=m.float64),
    "sum dim f32": lambda m, x, i: i.sum(1, dtype=m.float32),
    "sum keepdim": lambda m, x, i: m.sum(i, dim=0, keepdim=True, dtype=m.float64),
    "sum axis": lambda m, x, i: i.sum(axis=1, dtype=m.float64),
    "sum int64": lambda m, x, i: i.to(m.int32).sum(),
    "mean int f64": lambda m, x, i: i.mean(dtype=m.float64),
    "mean dim f64": lambda m, x, i: m.mean(x, 1, dtype=m.float64),
    "nansum f64": lambda m, x, i: m.nansum(x, dtype=m.float64),
    "nansum dim": lambda m, x, i: x.nansum(1, dtype=m.float64),
    "nansum int f32": lambda m, x, i: m.nansum(i, dtype=m.float32),
    "nanmean f64": lambda m, x, i: m.nanmean(x, dtype=m.float64),
    "nanmean keepdim": lambda m, x, i: x.nanmean(0, True, dtype=m.float64),
}


@pytest.mark.parametrize("case", list(REDUCTIONS))
def test_reductions_take_dtype_as_torch(torch_like, case):
    fn = REDUCTIONS[case]
    want = fn(torch, torch.tensor(VALUES), torch.tensor(INTEGERS))
    got = fn(torch_like, torch_like.tensor(VALUES), torch_like.tensor(INTEGERS))
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(np.asarray(got.numpy()), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "fn",
    [
        lambda m, x: x.mean(),
        lambda m, x: x.mean(0),
        lambda m, x: m.mean(x.float(), dtype=m.int64),
        lambda m, x: m.nanmean(x, dtype=m.float64),
    ],
)
def test_a_mean_of_integers_is_refused_as_torch(torch_like, fn):
    with pytest.raises(RuntimeError) as want:
        fn(torch, torch.tensor(INTEGERS))
    with pytest.raises(RuntimeError) as got:
        fn(torch_like, torch_like.tensor(INTEGERS))
    assert str(got.value) == str(want.value)


def _reduced_gradient(m, name, values):
    x = m.tensor(values, dtype=m.float32, requires_grad=True)
    out = getattr(m, name)(x, 1, dtype=m.float64)
    assert str(out.dtype) == str(m.float64)
    (grad,) = m.autograd.grad((out * m.tensor([1.0, -2.0], dtype=m.float64)).sum(), [x])
    return grad


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "nanmean"])
def test_the_gradient_through_dtype_is_torchs_in_the_inputs_dtype(torch_like, name):
    want = _reduced_gradient(torch, name, VALUES)
    got = _reduced_gradient(torch_like, name, VALUES)
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(np.asarray(got.numpy()), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "nanmean"])
def test_the_gradient_through_dtype_is_the_finite_differences(name):
    import engine

    x = engine.tensor(np.linspace(-1, 1, 8).reshape(2, 4), dtype=engine.float64, requires_grad=True)
    assert engine.autograd.gradcheck(lambda v: getattr(engine, name)(v * v, 1, dtype=engine.float64), (x,))


SORTS = {
    "sort desc": lambda m, x: m.sort(x, descending=True),
    "sort stable desc dim 0": lambda m, x: m.sort(x, dim=0, descending=True, stable=True),
    "sort asc": lambda m, x: m.sort(x),
    "argsort desc": lambda m, x: (m.argsort(x, descending=True),),
    "topk": lambda m, x: m.topk(x, 3),
    "topk smallest": lambda m, x: m.topk(x, 2, largest=False),
    "msort": lambda m, x: (m.msort(x),),
    "max dim": lambda m, x: m.max(x, 1),
    "argmax": lambda m, x: (m.argmax(x), m.argmax(x, 0)),
}
NANS = [[3.0, NAN, 1.0, NAN, 2.0], [NAN, -1.0, 5.0, 0.0, float("inf")], [2.0, 0.5, NAN, -np.inf, 1.0]]


@pytest.mark.parametrize("case", list(SORTS))
def test_nan_is_the_largest_as_in_torch(torch_like, case):
    want = SORTS[case](torch, torch.tensor(NANS))
    got = SORTS[case](torch_like, torch_like.tensor(NANS))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g.numpy()), w.numpy())


def _sorted_gradient(m, dtype):
    x = m.tensor(NANS, dtype=dtype, requires_grad=True)
    values, _ = m.sort(x, descending=True)
    (grad,) = m.autograd.grad((m.nan_to_num(values) * m.arange(5.0, dtype=dtype)).sum(), [x])
    return grad


def test_a_descending_sorts_gradient_goes_where_the_values_came_from(torch_like):
    np.testing.assert_array_equal(
        np.asarray(_sorted_gradient(torch_like, torch_like.float32).numpy()),
        _sorted_gradient(torch, torch.float32).numpy(),
    )


LOGITS = [[0.1, 0.2, 0.3], [0.5, -0.5, 1.0]]
LOSSES = {
    "cross_entropy": lambda m, t: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor(t)),
    "cross_entropy none": lambda m, t: m.nn.functional.cross_entropy(m.tensor(LOGITS), m.tensor(t), reduction="none"),
    "cross_entropy smoothing": lambda m, t: m.nn.functional.cross_entropy(
        m.tensor(LOGITS), m.tensor(t), label_smoothing=0.1, weight=m.ones(3)
    ),
    "CrossEntropyLoss": lambda m, t: m.nn.CrossEntropyLoss()(m.tensor(LOGITS), m.tensor(t)),
    "nll_loss": lambda m, t: m.nn.functional.nll_loss(m.tensor(LOGITS), m.tensor(t), reduction="sum"),
    "nll_loss 3-d": lambda m, t: m.nn.functional.nll_loss(m.zeros(2, 3, 2), m.tensor([t, [0, 1]])),
}


@pytest.mark.parametrize("case", list(LOSSES))
@pytest.mark.parametrize("target", [[0, 3], [-2, 1], [1, 5]])
def test_a_class_out_of_range_is_torchs_index_error(torch_like, case, target):
    with pytest.raises(IndexError) as want:
        LOSSES[case](torch, target)
    with pytest.raises(Exception) as got:  # (a lazy client's: when the loss is fetched, a 4xx naming the node)
        LOSSES[case](torch_like, target).tolist()
    assert str(want.value) in str(got.value)
    assert isinstance(got.value, IndexError if torch_like.__name__ == "engine" else RuntimeError)


def test_ignored_targets_may_be_out_of_range(torch_like):
    want = torch.nn.functional.cross_entropy(torch.tensor(LOGITS), torch.tensor([7, 1]), ignore_index=7)
    got = torch_like.nn.functional.cross_entropy(torch_like.tensor(LOGITS), torch_like.tensor([7, 1]), ignore_index=7)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)


@pytest.mark.parametrize("values", [[0.5, 1.5], [-0.1, 0.5], [NAN, 0.5]])
def test_binary_cross_entropy_checks_its_input_lies_in_0_1(torch_like, values):
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor(values), torch.tensor([1.0, 0.0]))
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        loss = torch_like.nn.BCELoss()(torch_like.tensor(values), torch_like.tensor([1.0, 0.0]))
        loss.item()


def test_binary_cross_entropy_in_range_is_torchs_with_its_gradient(torch_like):
    results = []
    for m in (torch, torch_like):
        x = m.tensor([0.1, 0.25, 0.5, 0.9], dtype=m.float64, requires_grad=True)
        loss = m.nn.functional.binary_cross_entropy(x, m.tensor([0.0, 1.0, 0.3, 1.0], dtype=m.float64))
        (grad,) = m.autograd.grad(loss, [x])
        results.append((loss.item(), np.asarray(grad.numpy())))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-12)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-12)


def test_a_bad_target_after_good_steps_is_still_refused(torch_like):
    """A server replays a repeated program from its cached plan: the replay checks the targets too."""
    logits = torch_like.tensor(LOGITS, requires_grad=True)
    for _ in range(4):
        loss = torch_like.nn.functional.cross_entropy(logits, torch_like.tensor([0, 2]))
        loss.backward()
        assert np.isfinite(loss.item())
    with pytest.raises(Exception, match=r"Target 3 is out of bounds\."):
        torch_like.nn.functional.cross_entropy(logits, torch_like.tensor([0, 3])).backward()
    with pytest.raises(Exception, match="ZeroDivisionError"):
        for divisor in ([2, 3], [2, 3], [2, 3], [2, 0]):
            (torch_like.tensor([7, 8]) // torch_like.tensor(divisor)).tolist()

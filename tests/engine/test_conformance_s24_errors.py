"""The errors a user reads (session 24): the everyday mistakes of a PyTorch program (a layer given the wrong
number of channels, shapes that do not broadcast, an index out of range, a wrong permutation or expand, a ragged
nested list, ...) run with `torch` bound to the engine and to PyTorch 2.13: the engine raises an exception of
PyTorch's type (so `except RuntimeError` / `IndexError` / `ValueError` catches it) with PyTorch's message, word for
word. The client (embedded) checks the same shape rules at the call and raises the same type with the same words
(to which it adds the op's input shapes)."""

from __future__ import annotations

import pytest

import engine
from tests.engine.test_conformance_s23b import _refusal as _raised
from tests.engine.test_conformance_s23b import oracle  # noqa: F401  (the fixture)

MISTAKES = {
    # convolutions, pools and fold: the channels, a kernel wider than the input, the padding, the blocks
    "conv2d channels": lambda t: t.nn.Conv2d(3, 4, 3)(t.randn(2, 5, 8, 8)),
    "conv1d grouped channels": lambda t: t.nn.functional.conv1d(t.randn(2, 6, 8), t.randn(4, 2, 3), groups=2),
    "conv_transpose2d channels": lambda t: t.nn.ConvTranspose2d(3, 4, 3)(t.randn(2, 5, 8, 8)),
    "conv2d kernel too large": lambda t: t.nn.Conv2d(1, 1, 3)(t.randn(1, 1, 2, 2)),
    "conv2d dilated kernel": lambda t: t.nn.functional.conv2d(t.randn(1, 1, 4, 4), t.randn(1, 1, 2, 2), dilation=4),
    "conv1d kernel too large": lambda t: t.nn.functional.conv1d(t.randn(1, 1, 2), t.randn(1, 1, 3)),
    "max_pool2d too small": lambda t: t.nn.MaxPool2d(3)(t.randn(1, 1, 2, 2)),
    "max_pool2d unbatched": lambda t: t.nn.functional.max_pool2d(t.randn(2, 2, 2), 3),
    "max_pool2d dilated": lambda t: t.nn.functional.max_pool2d(t.randn(1, 1, 3, 3), 2, dilation=3),
    "max_pool3d too small": lambda t: t.nn.MaxPool3d(3)(t.randn(1, 1, 2, 2, 2)),
    "max_pool1d too small": lambda t: t.nn.MaxPool1d(3)(t.randn(1, 1, 2)),
    "avg_pool1d too small": lambda t: t.nn.AvgPool1d(3)(t.randn(1, 1, 2)),
    "avg_pool2d too small": lambda t: t.nn.AvgPool2d(3)(t.randn(1, 1, 2, 2)),
    "avg_pool3d too small": lambda t: t.nn.AvgPool3d(3)(t.randn(1, 1, 2, 2, 2)),
    "avg_pool2d padding": lambda t: t.nn.AvgPool2d(2, padding=2)(t.randn(1, 1, 4, 4)),
    "avg_pool2d padding (h, w)": lambda t: t.nn.AvgPool2d((2, 3), padding=(1, 2))(t.randn(1, 1, 4, 4)),
    "max_pool2d padding": lambda t: t.nn.MaxPool2d(2, padding=2, dilation=2)(t.randn(1, 1, 4, 4)),
    "max_pool2d padding, dilated": lambda t: t.nn.MaxPool2d(2, padding=2, dilation=4)(t.randn(1, 1, 8, 8)),
    "max_pool1d padding": lambda t: t.nn.MaxPool1d(2, padding=2)(t.randn(1, 1, 4)),
    "max_pool3d padding": lambda t: t.nn.MaxPool3d(2, padding=2)(t.randn(1, 1, 4, 4, 4)),
    "fold blocks": lambda t: t.nn.Fold((4, 4), 2)(t.randn(1, 4, 10)),
    "fold strided blocks": lambda t: t.nn.Fold((4, 4), 2, stride=2, padding=(1, 0))(t.randn(1, 4, 4)),
    "fold channels": lambda t: t.nn.Fold((4, 4), 2)(t.randn(1, 5, 9)),
    # losses' targets
    "nll_loss of a vector, 3 targets": lambda t: t.nn.NLLLoss()(t.randn(3), t.tensor([0, 1, 2])),
    "cross_entropy, float targets of another batch": lambda t: t.nn.CrossEntropyLoss()(t.randn(2, 3), t.rand(3)),
    "cross_entropy, probabilities of another shape": lambda t: t.nn.CrossEntropyLoss()(t.randn(2, 3), t.rand(2, 4)),
    "cross_entropy, float targets": lambda t: t.nn.CrossEntropyLoss()(t.randn(2, 3), t.tensor([0.0, 1.0])),
    "cross_entropy, a class out of range": lambda t: t.nn.CrossEntropyLoss()(t.randn(2, 3), t.tensor([0, 3])),
    # broadcasting
    "add": lambda t: t.randn(3, 4) + t.randn(3, 5),
    "mul, 3-d": lambda t: t.randn(3, 4) * t.randn(2, 3, 5),
    "mse_loss": lambda t: t.nn.MSELoss()(t.randn(3, 4), t.randn(3, 5)),
    "where": lambda t: t.where(t.randn(3) > 0, t.randn(3), t.randn(4)),
    "masked_fill": lambda t: t.randn(3, 4).masked_fill(t.ones(3, 5, dtype=t.bool), 0),
    "matmul batch": lambda t: t.randn(2, 2, 3) @ t.randn(3, 3, 5),
    # indices out of range, masks of the wrong shape
    "embedding": lambda t: t.nn.Embedding(5, 3)(t.tensor([5])),
    "embedding of a negative index": lambda t: t.nn.functional.embedding(t.tensor([[0, -1]]), t.randn(3, 2)),
    "index array": lambda t: t.randn(3)[t.tensor([5])],
    "negative index array": lambda t: t.randn(3)[t.tensor([-4])],
    "int index": lambda t: t.randn(3)[5],
    "int index, dimension 1": lambda t: t.randn(3, 4)[1, 9],
    "mask": lambda t: t.randn(3, 4)[t.ones(3, 5, dtype=t.bool)],
    "mask after a slice": lambda t: t.randn(2, 3, 4)[:, t.ones(3, 5, dtype=t.bool)],
    "index_select": lambda t: t.index_select(t.randn(3, 3), 0, t.tensor([5])),
    "index_select, dimension 1": lambda t: t.randn(2, 3).index_select(1, t.tensor([1, 4, -9])),
    "index_select, dimension 2": lambda t: t.randn(2, 3, 4).index_select(2, t.tensor([0, -1, 7])),
    "gather": lambda t: t.gather(t.randn(3, 3), 1, t.tensor([[5]])),
    "scatter_": lambda t: t.zeros(3, 3).scatter_(1, t.tensor([[5]]), t.ones(1, 1)),
    "assign at an index": lambda t: t.zeros(3).__setitem__(t.tensor([5]), 1.0),
    "assign a wrong shape": lambda t: t.zeros(3).__setitem__(slice(None), t.ones(4)),
    "assign a wrong shape, recorded": lambda t: (
        t.zeros(3, 4, requires_grad=True).clone().__setitem__(slice(None), t.ones(5))
    ),
    "assign at a mask": lambda t: t.zeros(3, 4).__setitem__(t.ones(3, 4, dtype=t.bool), t.ones(3)),
    "assign at indices": lambda t: t.zeros(3, 4).__setitem__(t.tensor([0, 1]), t.ones(5)),
    # shapes: mm, permute, expand
    "mm of a vector": lambda t: t.mm(t.randn(3), t.randn(3, 5)),
    "mm by a vector": lambda t: t.randn(2, 3).mm(t.randn(3)),
    "permute out of range": lambda t: t.randn(2, 3).permute(0, 2),
    "permute repeated": lambda t: t.randn(2, 3, 4).permute(0, 1, -2),
    "permute too few": lambda t: t.randn(2, 3).permute(0),
    "expand to fewer dims": lambda t: t.randn(2, 3).expand(3),
    "expand a long tensor": lambda t: t.zeros(2, 3, dtype=t.long).expand(3),
    "t of a 3-d tensor": lambda t: t.randn(2, 3, 4).t(),
    "stack of nothing": lambda t: t.stack([]),
    "sum over a repeated dim": lambda t: t.randn(2, 3).sum(dim=(1, -1)),
    "masked_fill with a float mask": lambda t: t.randn(3).masked_fill(t.ones(3), 0.0),
    "masked_fill with a long mask": lambda t: t.randn(3).masked_fill(t.ones(3, dtype=t.long), 0.0),
    "where of a float condition": lambda t: t.where(t.ones(3), t.randn(3), t.randn(3)),
    "where of a long condition": lambda t: t.where(t.ones(3, dtype=t.long), t.randn(3), t.randn(3)),
    "argmax of nothing": lambda t: t.zeros(0).argmax(),
    "argmin over an empty dim": lambda t: t.zeros(2, 0).argmin(dim=-1),
    # bools, Python conversions, indexing a 0-d tensor
    "bool minus bool": lambda t: t.tensor([True]) - t.tensor([False]),
    "bool minus a number": lambda t: t.sub(t.tensor([True]), 1),
    "a number minus a bool tensor": lambda t: 1 - t.tensor([True]),
    "negated bool": lambda t: -t.tensor([True, False]),
    "float of 2 elements": lambda t: float(t.zeros(2)),
    "int of 2 elements": lambda t: int(t.zeros(2)),
    "bool of 2 elements": lambda t: bool(t.zeros(2)),
    "index of a float": lambda t: [1, 2][t.tensor(1.0)],
    "len of a 0-d tensor": lambda t: len(t.tensor(1.0)),
    "iteration over a 0-d tensor": lambda t: iter(t.tensor(1.0)),
    "index of a 0-d tensor": lambda t: t.tensor(1.0)[0],
    "too many indices": lambda t: t.ones(2, 3)[1, 2, 0],
    # constructors
    "ragged list": lambda t: t.tensor([[1], [2, 3]]),
    "ragged deeper": lambda t: t.tensor([[[1, 2], [3, 4]], [[5], [6]]]),
    "arange step 0": lambda t: t.arange(0, 3, 0),
    "arange backwards": lambda t: t.arange(0, 3, -1),
    "arange of a negative end": lambda t: t.arange(-3),
}


@pytest.mark.filterwarnings("ignore:Using a target size")
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_the_error_is_pytorchs_type_and_words(name, oracle):  # noqa: F811
    want, got = _raised(lambda: MISTAKES[name](oracle)), _raised(lambda: MISTAKES[name](engine))
    assert isinstance(got, type(want)), (type(got).__mro__, type(want))
    assert str(got) == str(want)


# the client's shape rules are the engine's: those mistakes a rule sees before any value is computed
AT_THE_CALL = [
    "conv2d channels",
    "conv2d kernel too large",
    "max_pool2d too small",
    "avg_pool2d padding",
    "fold blocks",
    "add",
    "where",
    "where of a float condition",
    "mm of a vector",
    "permute repeated",
    "permute too few",
    "expand to fewer dims",
    "assign a wrong shape, recorded",
]


@pytest.mark.filterwarnings("ignore:Using a target size")
@pytest.mark.parametrize("name", AT_THE_CALL)
def test_the_client_raises_them_alike(name, oracle):  # noqa: F811
    client = pytest.importorskip("client")
    with client.connect(None):
        got = _raised(lambda: MISTAKES[name](client))
    want = _raised(lambda: MISTAKES[name](oracle))
    assert isinstance(got, type(want)), (type(got).__mro__, type(want))
    assert str(want) in str(got)


def test_valid_programs_still_run(oracle):  # noqa: F811
    """The refusals' new checks let through what PyTorch runs: pools whose windows fit with ceil_mode and padding,
    arange without a start, assignments that broadcast."""
    for torch in (engine, oracle):
        assert torch.nn.functional.max_pool2d(torch.randn(1, 1, 3, 3), 2, ceil_mode=True).shape == (1, 1, 2, 2)
        assert torch.nn.functional.avg_pool2d(torch.randn(1, 1, 3, 3), 3, padding=1).shape == (1, 1, 1, 1)
        assert torch.arange(4).tolist() == [0, 1, 2, 3] and torch.arange(3, 0, -1).tolist() == [3, 2, 1]
        x = torch.zeros(2, 3)
        x[:] = torch.ones(3)
        x[torch.tensor([0])] = torch.tensor([[2.0, 2.0, 2.0]])
        assert x.tolist() == [[2.0] * 3, [1.0] * 3]
        assert torch.randn(2, 3).permute(-1, 0).shape == (3, 2)

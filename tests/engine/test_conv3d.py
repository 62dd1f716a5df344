"""3-d convolution and pooling on the engine: the registry's conv3d, max_pool3d and avg_pool3d (the 2-d ops'
code over three spatial dimensions) checked by central differences (gradcheck and gradgradcheck, float64),
conv_transpose3d composed of col2im likewise; a 3-d problem with one plane of depth and a kernel of one tap
in depth is priced (work and scratch) and shaped exactly as the 2-d problem it is; errors name the op."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.registry import OPS
from engine.shapes import ShapeError
from tests.engine.test_conv import _checked_call

F = engine.nn.functional

CHECKED = [
    ("conv3d", ((2, 2, 3, 4, 3), (3, 2, 2, 3, 2), (3,)), {"stride": (1, 2, 1), "padding": 1}),
    ("conv3d", ((1, 4, 3, 3, 4), (4, 2, 2, 1, 2)), {"groups": 2, "padding": "same", "dilation": (1, 1, 2)}),
    ("conv3d", ((2, 3, 3, 4), (2, 2, 2, 2, 2)), {"padding": "valid"}),
    ("max_pool3d", ((1, 2, 3, 4, 5),), {"kernel_size": 2, "stride": 1, "padding": 1, "dilation": (1, 2, 1)}),
    ("max_pool3d", ((1, 2, 4, 5, 3),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool3d", ((1, 2, 4, 5, 3),), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ("avg_pool3d", ((2, 3, 4, 5),), {"kernel_size": (2, 2, 3), "ceil_mode": True, "divisor_override": 5}),
]


@pytest.mark.parametrize(("name", "shapes", "attrs"), CHECKED, ids=[f"{c[0]}-{i}" for i, c in enumerate(CHECKED)])
def test_gradcheck_and_gradgradcheck(name, shapes, attrs):
    rng = np.random.default_rng(11)
    inputs = [engine.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    assert engine.gradcheck(_checked_call(name, len(inputs), attrs), inputs)
    assert engine.gradgradcheck(_checked_call(name, len(inputs), attrs), inputs)


def test_conv_transpose3d_gradcheck_and_gradgradcheck():
    rng = np.random.default_rng(12)
    shapes = ((1, 4, 2, 3, 2), (4, 1, 2, 2, 3), (2,))
    inputs = [engine.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]

    def transposed(x, w, b):
        return F.conv_transpose3d(x, w, b, stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 0), groups=2)

    assert engine.gradcheck(transposed, inputs)
    assert engine.gradgradcheck(transposed, inputs)


@pytest.mark.parametrize(
    ("op3", "op2", "shapes3", "shapes2", "attrs3", "attrs2"),
    [
        (
            "conv3d",
            "conv2d",
            [(4, 6, 1, 20, 18), (8, 3, 1, 3, 5), (8,)],
            [(4, 6, 20, 18), (8, 3, 3, 5), (8,)],
            {"stride": (1, 2, 1), "padding": (0, 1, 2), "groups": 2},
            {"stride": (2, 1), "padding": (1, 2), "groups": 2},
        ),
        (
            "max_pool3d",
            "max_pool2d",
            [(4, 6, 1, 20, 18)],
            [(4, 6, 20, 18)],
            {"kernel_size": (1, 3, 2), "stride": (1, 2, 2), "padding": (0, 1, 1), "ceil_mode": True},
            {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True},
        ),
        (
            "avg_pool3d",
            "avg_pool2d",
            [(4, 6, 1, 20, 18)],
            [(4, 6, 20, 18)],
            {"kernel_size": (1, 3, 3), "stride": (1, 2, 2), "padding": (0, 1, 1), "count_include_pad": False},
            {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
        ),
    ],
    ids=["conv", "max_pool", "avg_pool"],
)
def test_a_flat_3d_problem_is_shaped_and_priced_as_its_2d_problem(op3, op2, shapes3, shapes2, attrs3, attrs2):
    three, two = OPS[op3], OPS[op2]
    attrs3, attrs2 = three.check_attrs(attrs3), two.check_attrs(attrs2)
    out3, dtype3 = three.infer(shapes3, [np.float32] * len(shapes3), attrs3)
    out2, dtype2 = two.infer(shapes2, [np.float32] * len(shapes2), attrs2)
    assert out3[:2] + out3[3:] == out2 and out3[2] == 1 and dtype3 == dtype2
    assert three.cost(shapes3, out3, attrs3, ["float32"]) == two.cost(shapes2, out2, attrs2, ["float32"])
    metas3 = [(s, np.float32) for s in shapes3]
    metas2 = [(s, np.float32) for s in shapes2]
    assert three.scratch(metas3, (out3, np.float32), attrs3) == two.scratch(metas2, (out2, np.float32), attrs2)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda x: F.conv3d(x, engine.zeros(2, 2, 5, 1, 1, dtype=engine.float64)), "^Calculated padded input"),
        (lambda x: F.conv3d(x, engine.zeros(2, 3, 1, 1, 1, dtype=engine.float64)), "^Given groups=1"),
        (lambda x: F.conv3d(x[0, 0], engine.zeros(2, 2, 1, 1, 1, dtype=engine.float64)), "Expected 4D.*to conv3d"),
        (lambda x: F.max_pool3d(x, (2, 2)), "max_pool3d: expected kernel_size"),
        (lambda x: F.avg_pool3d(x, 2, padding=2), "^pad should be at most half"),
    ],
)
def test_3d_refusals_in_pytorch_words(call, fragment):
    with pytest.raises(ShapeError, match=fragment):
        call(engine.zeros(1, 2, 4, 3, 3, dtype=engine.float64))

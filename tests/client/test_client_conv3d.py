"""3-d convolution and pooling on the engine, the embedded client and a live server (`torch_like`), against
PyTorch in float64 and float32: `F.conv3d`, `conv_transpose3d`, `max_pool3d` (ties, nan, indices) and
`avg_pool3d` over strides, paddings, dilations, groups and 'same' (values and every input's gradient); the
modules `Conv3d`, `ConvTranspose3d`, `MaxPool3d`, `AvgPool3d` with their reprs, state_dict keys and torch's
weights; and a small volumetric CNN trained by SGD printing torch's losses."""

from __future__ import annotations

import numpy as np
import pytest

from tests import conv_programs as programs
from tests.client import test_client_nn_optim as base
from tests.client.test_client_nn_optim import values

oracle = base.oracle
Case = programs.Case
TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=1.3e-6, atol=1e-5)}
CASES = [
    Case("plain", "conv3d", ((2, 3, 4, 5, 4), (4, 3, 2, 3, 2), (4,))),
    Case(
        "groups-stride-dilation",
        "conv3d",
        ((2, 4, 5, 6, 5), (6, 2, 2, 2, 3), (6,)),
        {"groups": 2, "stride": (2, 1, 2), "padding": (1, 0, 2), "dilation": (1, 2, 1)},
    ),
    Case("same-even", "conv3d", ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2)), {"padding": "same"}),
    Case("unbatched", "conv3d", ((3, 4, 4, 4), (2, 3, 3, 1, 2), (2,)), {"stride": 2, "padding": 1}),
    Case(
        "transpose3d",
        "conv_transpose3d",
        ((2, 4, 3, 2, 3), (4, 1, 2, 3, 2), (2,)),
        {"stride": (2, 1, 2), "padding": (0, 1, 1), "output_padding": (1, 0, 0), "groups": 2},
    ),
    Case(
        "max-ceil", "max_pool3d", ((2, 2, 5, 6, 5),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}
    ),
    Case("max-dilated", "max_pool3d", ((1, 2, 5, 6, 7),), {"kernel_size": 2, "dilation": (1, 2, 3)}),
    Case("max-ties", "max_pool3d", ((2, 2, 4, 4, 4),), {"kernel_size": 2, "stride": 1}, integer_values=True),
    Case(
        "avg-exclude-pad",
        "avg_pool3d",
        ((2, 2, 5, 6, 5),),
        {"kernel_size": 3, "padding": 1, "count_include_pad": False},
    ),
    Case(
        "avg-divisor-ceil",
        "avg_pool3d",
        ((2, 4, 5, 6),),
        {"kernel_size": (2, 3, 2), "ceil_mode": True, "divisor_override": 7},
    ),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c.function}-{c.id}" for c in CASES])
def test_values_and_gradients_match_torch(torch_like, oracle, case, dtype):
    got, got_grads = programs.run_case(torch_like, case, dtype)
    want, want_grads = programs.run_case(oracle, case, dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **TOLERANCE[dtype], err_msg="output")
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        np.testing.assert_allclose(g, w, **TOLERANCE[dtype], err_msg=f"gradient of input {i}")


def test_max_pool3d_indices_match_torch_with_ties_and_nans(torch_like, oracle):
    x = np.random.default_rng(3).integers(-2, 3, (2, 2, 5, 4, 6)).astype(np.float64)
    x[0, 1, 1, 1:3, 2] = x[1, 0, 3, 2, 4] = np.nan
    got = torch_like.nn.functional.max_pool3d(torch_like.tensor(x), 2, (1, 2, 2), 1, return_indices=True)
    want = oracle.nn.functional.max_pool3d(oracle.tensor(x), 2, (1, 2, 2), 1, return_indices=True)
    np.testing.assert_array_equal(values(got[0]), values(want[0]))
    np.testing.assert_array_equal(values(got[1]), values(want[1]))


def volumetric(m):
    nn = m.nn
    return nn.Sequential(
        nn.Conv3d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool3d(2),
        nn.Conv3d(4, 4, (2, 3, 1), groups=2, padding=(1, 0, 0)),
        nn.ConvTranspose3d(4, 2, 2, stride=(1, 2, 1)),
        nn.AvgPool3d((2, 1, 2), ceil_mode=True),
        nn.Flatten(),
        nn.Linear(2 * 2 * 2 * 2, 3),
    )


def test_a_volumetric_cnn_loads_torchs_weights_and_trains_as_torch(torch_like, oracle):
    oracle.manual_seed(0)
    theirs = volumetric(oracle).double()
    ours = volumetric(torch_like)
    assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
    for name, value in ours.state_dict().items():
        assert tuple(value.shape) == tuple(theirs.state_dict()[name].shape), name
    state = {name: value.numpy().copy() for name, value in theirs.state_dict().items()}
    rng = np.random.default_rng(0)
    volumes, labels = rng.standard_normal((3, 1, 4, 6, 4)), rng.integers(0, 3, 3)
    losses, weights = programs.train_lenet(torch_like, state, volumes, labels, steps=4, network=volumetric)
    want_losses, want_weights = programs.train_lenet(oracle, state, volumes, labels, steps=4, network=volumetric)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-10)
    assert losses[-1] < losses[0]
    for name, value in want_weights.items():
        np.testing.assert_allclose(weights[name], value, rtol=1e-9, atol=1e-12, err_msg=name)

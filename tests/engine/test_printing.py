"""A tensor prints as PyTorch prints it (`engine.printing`), checked against torch's own repr: random values of
every dtype, shape and magnitude (integers, decimals, scientific, nan and inf, empty, past the summarizing
threshold), with their autograd suffixes, under `set_printoptions`, and of a `.data` and a `Parameter`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import engine

torch = pytest.importorskip("torch")

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int32, np.bool_]


@st.composite
def arrays(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=7))
    if draw(st.booleans()):  # one long dimension: wrapped lines, or summarized past 1000 elements
        shape = (*shape[:-1], draw(st.integers(20, 1300))) if shape else (draw(st.integers(20, 1300)),)
    if np.prod(shape) > 5000:
        shape = shape[-1:]
    if dtype is np.bool_:
        return draw(hnp.arrays(dtype, shape))
    if np.dtype(dtype).kind == "i":
        return draw(hnp.arrays(dtype, shape, elements=st.integers(-(10 ** draw(st.integers(0, 9))), 10**9)))
    scale = 10.0 ** draw(st.integers(-6, 10))
    kind = draw(st.sampled_from(["normal", "integers", "special"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = np.asarray(rng.standard_normal(shape) * scale)
    if kind == "integers":
        values = np.round(values)
    elif kind == "special" and values.size:
        flat = values.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 4))] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0])
    with np.errstate(over="ignore"):
        return np.asarray(values).astype(dtype)


def _torch_repr(array, requires_grad=False, through=None):
    t = torch.from_numpy(array.copy())
    if requires_grad:
        t.requires_grad_()
    return repr(t if through is None else through(t))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays())
def test_a_tensor_prints_as_pytorch_prints_it(array):
    assert repr(engine.tensor(array)) == _torch_repr(array)
    assert str(engine.tensor(array)) == str(torch.from_numpy(array.copy()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays().filter(lambda a: a.dtype.kind == "f" and a.dtype != np.float16))
def test_autograd_suffixes_follow_the_values_as_pytorchs(array):
    leaf = engine.tensor(array, requires_grad=True)
    assert repr(leaf) == _torch_repr(array, True)
    assert repr(leaf * 2) == _torch_repr(array, True, lambda t: t * 2)
    assert repr(leaf.data) == repr(torch.from_numpy(array.copy()).data)


@pytest.mark.parametrize(
    "options",
    [
        {"precision": 2},
        {"precision": 8},
        {"sci_mode": True},
        {"sci_mode": False},
        {"linewidth": 40},
        {"threshold": 10, "edgeitems": 2},
        {"profile": "short"},
        {"profile": "full"},
    ],
)
def test_set_printoptions_changes_the_print_as_pytorchs(options):
    rng = np.random.default_rng(1)
    cases = [
        rng.standard_normal((3, 17)).astype(np.float32),
        rng.standard_normal(2000).astype(np.float32) * 1e-5,
        np.arange(30.0).reshape(5, 6),
        np.zeros((2, 3), np.float32),
        rng.integers(-5, 5, (4, 40)),
    ]
    try:
        engine.set_printoptions(**options)
        torch.set_printoptions(**options)
        for array in cases:
            assert repr(engine.tensor(array)) == repr(torch.from_numpy(array)), options
    finally:
        engine.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_a_parameter_and_a_float64_default_print_as_pytorchs():
    weight = np.arange(6.0, dtype=np.float32).reshape(2, 3) / 3
    assert repr(engine.nn.Parameter(engine.tensor(weight))) == repr(torch.nn.Parameter(torch.from_numpy(weight)))
    try:
        engine.set_default_dtype(engine.float64)
        torch.set_default_dtype(torch.float64)
        for array in (np.ones(3), np.ones(3, np.float32), np.zeros(0, np.float32), np.zeros((0, 2))):
            assert repr(engine.tensor(array)) == repr(torch.from_numpy(array))
    finally:
        engine.set_default_dtype(engine.float32)
        torch.set_default_dtype(torch.float32)


def test_a_dual_prints_its_tangent_as_pytorchs():
    import engine.autograd.forward_ad as engine_ad
    import torch.autograd.forward_ad as torch_ad

    primal, tangent = np.array([1.0, 2.5], np.float32), np.array([3.0, -4.0], np.float32)
    shown = []
    for m, ad in ((engine, engine_ad), (torch, torch_ad)):
        with ad.dual_level():
            dual = ad.make_dual(m.tensor(primal), m.tensor(tangent))
            shown.append((repr(dual), repr(dual * 2), repr(dual.sin())))
    assert shown[0] == shown[1]

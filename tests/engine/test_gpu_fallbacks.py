"""The engine's own versions of what CuPy lacks (`maximum.accumulate`, `multiply.at`, float64 `maximum.at`), run here with NumPy
standing in for CuPy (a module that is not `numpy` itself takes the CuPy branch) and compared with NumPy's own.
On a GPU, `tests/engine/test_gpu.py` runs the ops that use them (cummax/cummin indices, scatter_reduce prod)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from engine.ops.scatter_reduce import _ufunc_at
from engine.ops.selection import _accumulate


class NotNumpy:
    """NumPy's functions under another module object, as CuPy's would be."""

    def __getattr__(self, name):
        return getattr(np, name)


XP = NotNumpy()
VALUES = st.sampled_from([0.0, 1.0, -1.0, 2.5, np.nan, np.inf, -np.inf])


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9), elements=VALUES))
def test_running_extremes_equal_numpys_accumulate(a):
    for ufunc in (np.maximum, np.minimum):
        np.testing.assert_array_equal(_accumulate(XP, ufunc, a), ufunc.accumulate(a, axis=-1))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n - 1), max_size=30))))
def test_multiply_maximum_minimum_at_take_each_positions_values_in_order(case):
    size, positions = case
    rng = np.random.default_rng(len(positions))
    for name in ("multiply", "maximum", "minimum"):
        out, values = rng.standard_normal(size), rng.standard_normal(len(positions))
        values[::3] = np.nan  # (maximum and minimum propagate NaN, in NumPy's order too)
        expected = out.copy()
        getattr(np, name).at(expected, np.array(positions, np.int64), values)
        _ufunc_at(XP, name, out, np.array(positions, np.int64), values)
        np.testing.assert_array_equal(out, expected)  # the same values in the same order: equal, not close


@pytest.mark.parametrize("name", ["add", "subtract"])
def test_other_ufuncs_keep_their_at(name):
    out, expected = np.zeros(4), np.zeros(4)
    _ufunc_at(XP, name, out, np.array([1, 1, 3]), np.array([2.0, -1.0, 5.0]))
    getattr(np, name).at(expected, np.array([1, 1, 3]), np.array([2.0, -1.0, 5.0]))
    np.testing.assert_array_equal(out, expected)

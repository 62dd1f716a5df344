"""`scatter_reduce`'s primitives for the reductions `scatter_add` can't compose: `scatter_amax`, `scatter_amin`
and `scatter_prod` (x, index, src; src already cut to index's shape by the surface function), with PyTorch's
gradients (its `scatter_reduce_backward`): amax/amin share the gradient evenly among the ties of self and src
that equal the result (self counted even where `include_self` is False, as PyTorch counts it); prod divides the
result by each factor, a single zero's gradient being the product of the others. Without `include_self`, self
gets no gradient where something was scattered. The sum and mean compose of `scatter_add` (`engine.tensor_selection`).
"""

from __future__ import annotations

import numpy

from engine import costs
from engine.attrs import Attr
from engine.backend import array_module
from engine.ops.selection import DIM, _positions, _scatter_check
from engine.recording import derived
from engine.registry import F, Sample, defop

IDENTITY = {"amax": -numpy.inf, "amin": numpy.inf, "prod": 1}
UFUNCS = {"amax": "maximum", "amin": "minimum", "prod": "multiply"}


def _dim(ndim, dim):
    return dim % max(ndim, 1)


def _flat(x_shape, index, dim):
    return _positions(tuple(x_shape), _dim(len(x_shape), dim))(index).reshape(-1)


def _picked(a, index, dim):
    """gather's pick on arrays: a's entries at index along dim (each element's own coordinates elsewhere)."""
    return a.reshape(-1)[_flat(a.shape, index, dim)].reshape(index.shape)


def _identity(reduce, dtype):
    if reduce == "prod" or dtype.kind == "f":
        return IDENTITY[reduce]
    limits = numpy.iinfo(dtype) if dtype.kind in "iu" else None
    return (limits.min if reduce == "amax" else limits.max) if limits else reduce == "amin"


def _reduced(reduce):
    def forward(xp, x, index, src, dim, include_self):
        _scatter_check("scatter_reduce", x.shape, index.shape, src.shape, index.dtype, dim, x.dtype, src.dtype)
        positions, out = _flat(x.shape, index, dim), x.reshape(-1).copy()
        if not include_self:
            out[positions] = _identity(reduce, x.dtype)
        _ufunc_at(xp, UFUNCS[reduce], out, positions, src.reshape(-1))
        return out.reshape(x.shape)

    return forward


def _ufunc_at(xp, name, out, positions, values):
    """`xp.<name>.at(out, positions, values)`. CuPy has no `multiply.at`, and its `maximum.at`/`minimum.at` of
    float64 keep float32's precision (an H200, CuPy 14.2): there each round applies every position's first
    remaining value at once (`unique`'s first occurrences), so each position still takes its values in their order,
    as NumPy's `at` does; the rounds are as many as a position repeats."""
    if xp is numpy or name not in ("multiply", "maximum", "minimum"):
        return getattr(xp, name).at(out, positions, values)
    ufunc = getattr(xp, name)
    while positions.size:
        unique, first = xp.unique(positions, return_index=True)
        out[unique] = ufunc(out[unique], values[first])
        rest = xp.ones(positions.size, bool)
        rest[first] = False
        positions, values = positions[rest], values[rest]


def _scattered(x, index, dim):
    """Where something is scattered to (a bool array of x's shape)."""
    touched = array_module(x).zeros(x.size, bool)
    touched[_flat(x.shape, index, dim)] = True
    return touched.reshape(x.shape)


def _tie_weights(x, ans, index, src, dim, include_self):
    """(self's, src's) share of the gradient: 1/N where they equal the result, N the number that do."""
    xp = array_module(x)
    self_is, src_is = (x == ans).astype(x.dtype), (src == _picked(ans, index, dim)).astype(x.dtype)
    count = self_is.reshape(-1).copy()
    xp.add.at(count, _flat(x.shape, index, dim), src_is.reshape(-1))
    count = count.reshape(x.shape)
    share = self_is / xp.where(self_is != 0, count, 1)  # (count >= 1 where self is one of the ties)
    if not include_self:
        share[_scattered(x, index, dim)] = 0
    return share, src_is / _picked(count, index, dim)


def _extreme_vjps():
    def vjp_self(g, ans, x, index, src, dim, include_self):
        return g * derived(lambda *a: _tie_weights(*a, dim, include_self)[0], x, ans, index, src)

    def vjp_src(g, ans, x, index, src, dim, include_self):
        picked = F.gather(g, index, dim=dim)
        return picked * derived(lambda *a: _tie_weights(*a, dim, include_self)[1], x, ans, index, src)

    return vjp_self, None, vjp_src


def _prod_vjps():
    def vjp_self(g, ans, x, index, src, dim, include_self):
        zero = derived(lambda x: x == 0, x)
        masked = F.where(zero, 1.0, x)
        grad = g * F.scatter_prod(masked, index, src, dim=dim, include_self=include_self) / masked
        return grad if include_self else F.where(derived(lambda x, i: _scattered(x, i, dim), x, index), 0.0, grad)

    def vjp_src(g, ans, x, index, src, dim, include_self):
        def single_zero(x, index, src):
            xp = array_module(x)
            zeros = xp.zeros(x.size)
            xp.add.at(zeros, _flat(x.shape, index, dim), (src == 0).reshape(-1))
            return (src == 0) & (_picked(zeros.reshape(x.shape), index, dim) == 1)

        single, zero = derived(single_zero, x, index, src), derived(lambda s: s == 0, src)
        others = F.scatter_prod(x, index, F.where(single, 1.0, src), dim=dim, include_self=include_self)
        through_zero = F.gather(g * others, index, dim=dim)
        divided = F.gather(g * ans, index, dim=dim) / F.where(zero, 1.0, src)
        return F.where(single, through_zero, divided)

    return vjp_self, None, vjp_src


def _infer(s, d, a):
    _scatter_check("scatter_reduce", s[0], s[1], s[2], d[1], a["dim"], d[0], d[2])
    return tuple(s[0]), numpy.result_type(d[0])


def _sample(rng):
    return [rng.uniform(0.5, 2, (3, 4)), numpy.array([[2, 0, 2], [1, 3, 1]]), rng.uniform(0.5, 2, (2, 3))]


for _reduce in ("amax", "amin", "prod"):
    defop(
        f"scatter_{_reduce}",
        _reduced(_reduce),
        *(_extreme_vjps() if _reduce != "prod" else _prod_vjps()),
        attrs={"dim": DIM, "include_self": Attr("bool", True, "reduce self's entry with those scattered to it")},
        uses_output=True,
        methods=(),
        named_inputs=("input", "index", "src"),
        samples=(Sample(make=_sample, attrs={"dim": 1}), Sample(make=_sample, attrs={"dim": 1, "include_self": False})),
        infer=_infer,
        scratch=costs.temporaries(forward=1, backward=3),
        doc=f"x with src reduced into it by {_reduce} at index along dim (torch.scatter_reduce's {_reduce!r})",
    )

"""`einsum`: Einstein summation over any number of inputs. An input's vjp is an einsum of the
output gradient with the other inputs, summing what the input alone summed by expanding it back."""

from __future__ import annotations

import math
import string

import numpy

from engine import costs, shapes
from engine.attrs import Attr
from engine.backend import array_module
from engine.promotion import check_product
from engine.recording import derived
from engine.registry import Sample, defop, trusted


def explicit(equation: str, ndims) -> tuple[list[str], str]:
    """(each input's subscripts, the output's) with `...` spelled out in unused letters and the
    output of an equation without `->` filled in (its letters seen once, in alphabetical order)."""
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    if len(terms) != len(ndims):
        raise shapes.ShapeError(f"einsum(): {len(terms)} operand(s) in the equation but {len(ndims)} given")
    spare = [c for c in string.ascii_letters if c not in text]
    widths = []
    for term, ndim in zip(terms, ndims):
        if any(c not in string.ascii_letters for c in term.replace("...", "", 1)):
            raise shapes.ShapeError(f"einsum(): invalid subscripts {term!r}: only letters and one '...' per operand")
        width = ndim - len(term.replace("...", "")) if "..." in term else 0
        if width < 0 or (width == 0 and len(term.replace("...", "")) != ndim):
            raise shapes.ShapeError(
                f"einsum(): the number of subscripts in {term!r} does not match the number of dimensions ({ndim})"
            )
        widths.append(width)
    widest = max(widths, default=0)
    ins = [t.replace("...", "".join(spare[widest - w : widest])) for t, w in zip(terms, widths)]
    ellipsis = "".join(spare[:widest])
    if arrow:
        out = right.replace("...", ellipsis)
        if any(c not in "".join(ins) for c in out) or len(set(out)) != len(out):
            raise shapes.ShapeError(f"einsum(): invalid output subscripts {right!r}")
    else:
        joined = "".join(ins)
        out = ellipsis + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ellipsis))
    return ins, out


def _sizes(ins, in_shapes) -> dict:
    sizes: dict = {}
    for term, shape in zip(ins, in_shapes):
        for c, n in zip(term, shape):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                raise shapes.ShapeError(
                    f"einsum(): subscript {c} has size {n} which does not broadcast with previously seen size {sizes[c]}"
                )
            sizes[c] = max(sizes.get(c, 1), n)
    return sizes


def _check_dtypes(ins, out, dtypes):
    """PyTorch's refusal of a contraction (a letter two operands share and the output drops) of two dtypes."""
    if len(set(dtypes)) > 1 and any(c not in out and sum(c in t for t in ins) > 1 for c in set("".join(ins))):
        check_product((3, 3), (dtypes[0], next((d for d in dtypes if d != dtypes[0]), dtypes[0])))  # (its message)


def _forward(xp, *xs, equation):
    ins, out = explicit(equation, [x.ndim for x in xs])
    _sizes(ins, [x.shape for x in xs])
    _check_dtypes(ins, out, [x.dtype for x in xs])
    return xp.asarray(xp.einsum(",".join(ins) + "->" + out, *xs, optimize=len(xs) > 1))


def _vjp(g, ans, xs, needs, equation):
    ins, out = explicit(equation, [x.ndim for x in xs])
    grads = []
    for i, (term, x, need) in enumerate(zip(ins, xs, needs)):
        if not need:
            grads.append(None)
            continue
        others = [t for j, t in enumerate(ins) if j != i]
        unique = "".join(dict.fromkeys(term))  # a repeated letter (a diagonal) once, where it first stands
        kept = "".join(c for c in unique if c in out or any(c in t for t in others))
        spec = ",".join([out, *others]) + "->" + kept
        grad = trusted.einsum(g, *[v for j, v in enumerate(xs) if j != i], equation=spec)
        if kept != term:  # letters only this input had were summed, a diagonal read: spread the gradient back
            first = [term.index(c) == k for k, c in enumerate(term)]
            shape = tuple(n if c in kept and is_first else 1 for c, n, is_first in zip(term, x.shape, first))
            grad = trusted.expand(trusted.reshape(grad, shape=shape), shape=tuple(x.shape))
        if unique != term:
            grad = grad * derived(_diagonal(term), x)
        grads.append(grad)
    return grads


def _diagonal(term):
    """`derived`'s function: ones where the coordinates of each repeated letter agree, in x's dtype."""

    def diagonal(x):
        xp = array_module(x)
        mask = xp.ones(x.shape, dtype=bool)
        for k, c in enumerate(term):
            j = term.index(c)
            if j != k:
                a, b = (xp.arange(x.shape[d]).reshape([-1 if e == d else 1 for e in range(x.ndim)]) for d in (j, k))
                mask &= a == b
        return mask.astype(x.dtype)

    return diagonal


def _infer(in_shapes, dtypes, attrs):
    ins, out = explicit(attrs["equation"], [len(s) for s in in_shapes])
    sizes = _sizes(ins, in_shapes)
    _check_dtypes(ins, out, [numpy.result_type(d) for d in dtypes])
    return tuple(sizes[c] for c in out), numpy.result_type(*dtypes)


def _work(in_shapes, out_shape, attrs):
    """2 flops per term of the summation (every letter's size multiplied), plus a pass over the operands."""
    ins, _ = explicit(attrs["equation"], [len(s) for s in in_shapes])
    return 2 * math.prod(_sizes(ins, in_shapes).values()) + costs.one_pass(in_shapes, out_shape, attrs)


defop(
    "einsum",
    _forward,
    vjp=_vjp,
    variadic=True,
    attrs={"equation": Attr("equation", doc='subscripts, as "ij,jk->ik" (letters, commas, "...", "->")')},
    methods=(),
    samples=(
        Sample(((3, 4), (4, 2)), {"equation": "ij,jk->ik"}),
        Sample(((2, 3, 4), (2, 4, 5)), {"equation": "bij,bjk->bik"}),
        Sample(((3, 4),), {"equation": "ij->j"}),
        Sample(((2, 3, 4), (4,)), {"equation": "...j,j"}),
        Sample(((3,), (4,), (3, 4)), {"equation": "i,j,ij->"}),
        Sample(((3, 3), (3, 2, 3)), {"equation": "ii,iji->ij"}),
    ),
    infer=_infer,
    work=_work,
    kernel="blas",
    scratch=costs.temporaries(forward=1, backward=2),  # the contraction path's intermediates (each vjp an einsum)
    doc="Einstein summation over the inputs by an equation (torch.einsum(equation, *operands))",
)

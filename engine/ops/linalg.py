"""Matrix products."""

from __future__ import annotations

import operator

from engine import costs, shapes
from engine.grad_mode import state as grad_state
from engine.node import FORWARD
from engine.registry import F, Sample, defop, local


def _matmul_vjp_x(g, ans, x, y):
    if y.ndim == 1:
        return g.unsqueeze(-1) * y if x.ndim > 1 else g * y
    if x.ndim == 1:
        return F.matmul(g.unsqueeze(-2), y.mT).squeeze(-2)
    return F.matmul(g, y.mT)


def _matmul_vjp_y(g, ans, x, y):
    if x.ndim == 1:
        return x.unsqueeze(-1) * g.unsqueeze(-2) if y.ndim > 1 else g * x
    if y.ndim == 1:
        return F.matmul(x.mT, g.unsqueeze(-1)).squeeze(-1)
    return F.matmul(x.mT, g)


def _product_scratch(in_metas, out_meta, attrs):
    """A batched or 1-d product's vjps build gradients of the broadcast shape (or outer products)
    before summing them down; a 2-d product's are its inputs' own shapes."""
    (x, _), (y, _) = in_metas
    plain = len(x) == len(y) == 2 or (len(x) == len(y) and x[:-2] == y[:-2])
    return costs.temporaries(of="output" if plain else "largest", backward=1 if plain else 2.5)(
        in_metas, out_meta, attrs
    )


# without create_graph the products run on the arrays (`local`: no op's dispatch, no Variable for the transpose)
mm = defop(
    "mm",
    operator.matmul,
    lambda g, ans, x, y: g.mm(y.T) if grad_state.enabled or FORWARD else local(lambda g, y: g @ y.T, g, y),
    lambda g, ans, x, y: x.T.mm(g) if grad_state.enabled or FORWARD else local(lambda x, g: x.T @ g, x, g),
    takes_xp=False,
    samples=(Sample(((3, 4), (4, 2))),),
    infer=shapes.mm,
    work=costs.matrix_product,
    kernel="blas",
    doc="matrix product of two 2-d inputs",
)
matmul = defop(
    "matmul",
    lambda xp, x, y: xp.matmul(x, y),
    _matmul_vjp_x,
    _matmul_vjp_y,
    samples=(
        Sample(((3, 4), (4, 2))),
        Sample(((2, 3, 4), (4, 5))),
        Sample(((2, 1, 3, 4), (3, 4, 2))),
        Sample(((4,), (4, 2))),
        Sample(((3, 4), (4,))),
        Sample(((4,), (4,))),
        Sample(((4,), (2, 4, 3))),
    ),
    infer=shapes.matmul,
    work=costs.matrix_product,
    kernel="blas",
    scratch=_product_scratch,
    doc="matrix product with NumPy's broadcasting and 1-d rules",
)

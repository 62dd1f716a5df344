"""`affine_grid_generator` (PyTorch's, behind `F.affine_grid`): the (N, H, W, 2) grid of 2-d affine maps theta
(N, 2, 3). A primitive saving nothing, as PyTorch's node: a grid in two backwards needs no retain_graph."""

import numpy

from engine.attrs import Attr
from engine.ops.conv import const
from engine.registry import F, Sample, defop, trusted


def _base(size, align_corners, dtype):  # each output pixel's normalised (x, y, 1) as PyTorch's: [H * W, 3]
    x, y = (numpy.linspace(-1, 1, n) * (n > 1 if align_corners else (n - 1) / n) for n in (size[3], size[2]))
    xs, ys = numpy.meshgrid(x, y)
    return numpy.stack([xs, ys, numpy.ones_like(xs)], -1).reshape(-1, 3).astype(dtype)


def _forward(xp, theta, size, align_corners):
    base = xp.asarray(_base(size, align_corners, theta.dtype))
    return (base @ theta.transpose(0, 2, 1)).reshape(size[0], size[2], size[3], 2)


def _vjp(g, ans, theta, size, align_corners):  # g's rows times the base grid, rebuilt
    rows = trusted.transpose(trusted.reshape(g, shape=(size[0], size[2] * size[3], 2)), dim0=1, dim1=2)
    return F.matmul(rows, const(_base(size, align_corners, theta.dtype)))


defop(
    "affine_grid_generator",
    _forward,
    _vjp,
    attrs={"size": Attr("shape", doc="the output's (N, C, H, W)"), "align_corners": Attr("bool", False)},
    saves=False,
    methods=(),
    samples=(Sample(((2, 2, 3),), {"size": (2, 1, 3, 4), "align_corners": True}),),
    infer=lambda shapes, dtypes, attrs: ((attrs["size"][0], *attrs["size"][2:], 2), numpy.result_type(dtypes[0])),
    doc="the (N, H, W, 2) sampling grid of 2-d affine maps theta (N, 2, 3) for an output of size (N, C, H, W)",
)

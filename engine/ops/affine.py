"""`affine_grid_generator` (PyTorch's, behind `F.affine_grid`): the (N, H, W, 2) grid of 2-d affine maps theta
(N, 2, 3). A primitive saving nothing, as PyTorch's node: a grid in two backwards needs no retain_graph."""

import numpy

from engine import costs
from engine.attrs import Attr
from engine.backend import array_module
from engine.ops.conv import const
from engine.registry import F, Sample, defop, trusted
from engine.shapes import ShapeError


def _base(size, align_corners, dtype):  # each output pixel's normalised (x, y, 1) as PyTorch's: [H * W, 3]
    x, y = (numpy.linspace(-1, 1, n) * (n > 1 if align_corners else (n - 1) / n) for n in (size[3], size[2]))
    base = numpy.empty((size[2], size[3], 3), dtype)  # written in place: no float64 grids beside it
    base[..., 0], base[..., 1], base[..., 2] = x, y[:, None], 1
    return base.reshape(-1, 3)


def _scratch(in_metas, out_meta, attrs):  # the base grid; the backward's rows made contiguous for matmul too
    (n, h, w, _), itemsize = out_meta[0], numpy.dtype(out_meta[1]).itemsize
    return costs.Scratch(forward=3 * h * w * itemsize, backward=(3 + 2 * n) * h * w * itemsize)


def _forward(xp, theta, size, align_corners):
    base = xp.asarray(_base(size, align_corners, theta.dtype))
    return (base @ theta.transpose(0, 2, 1)).reshape(size[0], size[2], size[3], 2)


def _infer(shapes, dtypes, attrs):  # theta (N, 2, 3) for a size (N, C, H, W): PyTorch's check in F.affine_grid
    size = attrs["size"]
    if len(size) != 4 or tuple(shapes[0]) != (size[0], 2, 3):
        raise ShapeError(
            f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {list(size)}. Got {list(shapes[0])}."
        )
    return (size[0], *size[2:], 2), numpy.result_type(dtypes[0])


def _vjp(g, ans, theta, size, align_corners):  # g's rows times the base grid, rebuilt
    rows = trusted.transpose(trusted.reshape(g, shape=(size[0], size[2] * size[3], 2)), dim0=1, dim1=2)
    return F.matmul(rows, const(array_module(g._data).asarray(_base(size, align_corners, theta.dtype))))


defop(
    "affine_grid_generator",
    _forward,
    _vjp,
    attrs={"size": Attr("shape", doc="the output's (N, C, H, W)"), "align_corners": Attr("bool", False)},
    saves=False,
    methods=(),
    samples=(Sample(((1, 2, 3),), {"size": (1, 1, 3, 4), "align_corners": True}),),
    infer=_infer,
    scratch=_scratch,
    doc="the (N, H, W, 2) sampling grid of 2-d affine maps theta (N, 2, 3) for an output of size (N, C, H, W)",
)

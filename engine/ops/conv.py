"""Convolution, from two primitives that are each other's vjp.

`im2col` (PyTorch's `unfold`): the sliding windows of an input [N, C, *spatial] as the columns of
[N, C * prod(kernel_size), L], one column per window position; `col2im` (PyTorch's `fold`): the
adjoint, adding each column's taps back into an image [N, C, *output_size]. Both are linear, so each
one's vjp is the other and every composition of them is differentiable any number of times.

The composites `conv1d`, `conv2d` and `conv3d` take PyTorch's functional names and argument names, on the wire
too (inputs: input, weight and an optional bias): im2col, then a (grouped) matrix product with the
weight, a reshape, and the bias; padding may be 'same' or 'valid'. Pooling is composed of the same
primitives in `engine.ops.pooling`.
"""

from __future__ import annotations

import itertools
import math

import numpy

from engine import costs
from engine.attrs import Attr
from engine.backend import array_module
from engine.ops.windows import Windows, per_dim, spatial_rank, windows
from engine.recording import note_constant
from engine.registry import Sample, defop, trusted
from engine.shapes import ShapeError
from engine.variable import Variable

ALL = slice(None)
KERNEL = Attr("window", doc="the window's extent: an int, or one per spatial dimension")
DILATION = Attr("window", 1, "the spacing of a window's taps")
PADDING = Attr("padding", 0, "zeros added before and after each spatial dimension")
STRIDE = Attr("window", 1, "the step between windows")


def const(array):
    """A gradient-free Variable of an array that depends on shapes and attributes only, never on values
    (a recording keeps it as a constant; a mask computed from values is `engine.recording.derived`'s)."""
    note_constant(array)
    return Variable._result(array, None)


def _padded_region(w: Windows) -> tuple:
    return (ALL, ALL, *(slice(b, b + i) for b, i in zip(w.before, w.sizes)))


# --- the primitives ---------------------------------------------------------------------------


def _columns(xp, x, w: Windows):
    n, c = x.shape[:2]
    source = x
    if any(w.before) or any(w.after):
        source = xp.zeros((n, c, *w.padded), x.dtype)
        source[_padded_region(w)] = x
    cols = xp.empty((n, c, *w.kernel, *w.out), x.dtype)
    for offsets in itertools.product(*map(range, w.kernel)):
        cols[(ALL, ALL, *offsets)] = source[(ALL, ALL, *w.tap_slices(offsets))]
    return cols.reshape((n, c * w.taps, w.count))


def _image(xp, cols, w: Windows):
    n, rows = cols.shape[:2]
    c = rows // w.taps
    out = xp.zeros((n, c, *w.padded), cols.dtype)
    cols = cols.reshape((n, c, *w.kernel, *w.out))
    for offsets in itertools.product(*map(range, w.kernel)):
        out[(ALL, ALL, *w.tap_slices(offsets))] += cols[(ALL, ALL, *offsets)]
    if any(w.before) or any(w.after):
        return xp.ascontiguousarray(out[_padded_region(w)])
    return out


def _im2col_windows(shape, kernel_size, dilation, padding, stride) -> Windows:
    spatial_rank("im2col", len(shape), kernel_size)
    return windows("im2col", tuple(shape[2:]), kernel_size, dilation, padding, stride)


def _col2im_windows(shape, output_size, kernel_size, dilation, padding, stride) -> Windows:
    if len(shape) != 3:
        raise ShapeError(f"col2im: expected a 3-d input (batch, channels * taps, windows), got shape {list(shape)}")
    n = (
        len(output_size)
        if isinstance(output_size, tuple)
        else len(kernel_size)
        if isinstance(kernel_size, tuple)
        else 2
    )
    sizes = per_dim(output_size, n, "output_size", "col2im")
    w = windows("col2im", sizes, kernel_size, dilation, padding, stride)
    if shape[1] % w.taps:
        raise ShapeError(
            "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got "
            f"input.size(1)={shape[1]} and kernel_size={tuple(w.kernel)}."
        )
    if shape[2] != w.count:
        raise ShapeError(
            f"Given output_size={tuple(sizes)}, kernel_size={tuple(w.kernel)}, dilation={tuple(w.dilation)}, "
            f"padding={tuple(w.before)}, stride={tuple(w.stride)}, expected size of input's dimension 2 to match the "
            f"calculated number of sliding blocks {' * '.join(map(str, w.out))} = {w.count}, but got "
            f"input.size(2)={shape[2]}."
        )
    return w


def _im2col_infer(shapes, dtypes, attrs):
    shape = shapes[0]
    w = _im2col_windows(shape, attrs["kernel_size"], attrs["dilation"], attrs["padding"], attrs["stride"])
    return (shape[0], shape[1] * w.taps, w.count), numpy.result_type(dtypes[0])


def _col2im_infer(shapes, dtypes, attrs):
    shape = shapes[0]
    w = _col2im_windows(shape, *(attrs[k] for k in ("output_size", "kernel_size", "dilation", "padding", "stride")))
    return (shape[0], shape[1] // w.taps, *w.sizes), numpy.result_type(dtypes[0])


def _padding_bytes(shape, dtype, w: Windows) -> int:
    if not (any(w.before) or any(w.after)):
        return 0
    return math.prod((*shape[:2], *w.padded)) * numpy.dtype(dtype).itemsize


def _im2col_scratch(in_metas, out_meta, attrs) -> costs.Scratch:
    """The padded copy of the input (forward), and col2im's padded image (backward)."""
    (shape, dtype) = in_metas[0]
    w = _im2col_windows(shape, attrs["kernel_size"], attrs["dilation"], attrs["padding"], attrs["stride"])
    padded = _padding_bytes(shape, dtype, w)
    return costs.Scratch(forward=padded, backward=padded)


def _col2im_scratch(in_metas, out_meta, attrs) -> costs.Scratch:
    """The padded image (forward), and im2col's padded copy of the gradient (backward)."""
    shape, dtype = out_meta
    w = _col2im_windows(
        in_metas[0][0], *(attrs[k] for k in ("output_size", "kernel_size", "dilation", "padding", "stride"))
    )
    padded = _padding_bytes(shape, dtype, w)
    return costs.Scratch(forward=padded, backward=padded)


def _im2col_forward(xp, x, kernel_size, dilation, padding, stride):
    return _columns(xp, x, _im2col_windows(x.shape, kernel_size, dilation, padding, stride))


def _col2im_forward(xp, cols, output_size, kernel_size, dilation, padding, stride):
    return _image(xp, cols, _col2im_windows(cols.shape, output_size, kernel_size, dilation, padding, stride))


im2col = defop(
    "im2col",
    _im2col_forward,
    lambda g, ans, x, **window: trusted.col2im(g, output_size=tuple(x.shape[2:]), **window),
    attrs={"kernel_size": KERNEL, "dilation": DILATION, "padding": PADDING, "stride": STRIDE},
    saves=False,
    methods=(),
    samples=(
        Sample(((1, 1, 5, 6),), {"kernel_size": (2, 3)}),
        Sample(((1, 1, 5, 6),), {"kernel_size": 2, "dilation": (2, 1), "padding": 1, "stride": (1, 2)}),
        Sample(((1, 3, 7),), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ),
    infer=_im2col_infer,
    scratch=_im2col_scratch,
    doc="the sliding windows of [N, C, *spatial] as columns [N, C * prod(kernel_size), windows] (PyTorch's unfold)",
)
col2im = defop(
    "col2im",
    _col2im_forward,
    lambda g, ans, cols, output_size, **window: trusted.im2col(g, **window),
    attrs={
        "output_size": Attr("window", doc="the image's spatial sizes"),
        "kernel_size": KERNEL,
        "dilation": DILATION,
        "padding": PADDING,
        "stride": STRIDE,
    },
    saves=False,
    methods=(),
    # one window each, so that growing the channels keeps a sample valid (im2col's gradients check the rest)
    samples=(
        Sample(((1, 12, 1),), {"output_size": (2, 3), "kernel_size": (2, 3)}),
        Sample(((1, 6, 1),), {"output_size": (3, 1), "kernel_size": (3, 1), "padding": (1, 0), "stride": 3}),
    ),
    infer=_col2im_infer,
    scratch=_col2im_scratch,
    doc="columns [N, C * prod(kernel_size), windows] added back into [N, C, *output_size] (PyTorch's fold; "
    "the adjoint of im2col)",
)


# --- shared by the composites (here and engine.ops.pooling) -----------------------------------


def pad_windows(x, w: Windows, value):
    """x [N, C, *sizes] within a constant `value` of w's padded sizes (differentiable in x)."""
    xp = array_module(x._data)
    base = trusted.expand(const(xp.full((), value, x.dtype)), shape=(*x.shape[:2], *w.padded))
    index = (
        {"slice": [None, None, None]},
        {"slice": [None, None, None]},
        *({"slice": [b, b + i, None]} for b, i in zip(w.before, w.sizes)),
    )
    return trusted.setitem(base, x, index=index)


def batched(x, nd):
    """(x with a batch dimension, whether it had one)."""
    if x.ndim == nd + 2:
        return x, True
    return trusted.reshape(x, shape=(1, *x.shape)), False


def same_floating(op, dtypes):
    dtypes = [numpy.dtype(d) for d in dtypes]
    if dtypes[0].kind != "f":
        raise ShapeError(f"{op}: expected a floating input, got {dtypes[0]}")
    for d in dtypes[1:]:
        if d != dtypes[0]:
            raise ShapeError(f"{op}: input type ({dtypes[0]}) and weight or bias type ({d}) should be the same")
    return dtypes[0]


def input_rank(op, shape, nd):
    if len(shape) not in (nd + 1, nd + 2):
        raise ShapeError(
            f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op}, but got input of size: {list(shape)}"
        )


# --- convolution ------------------------------------------------------------------------------


def _conv_plan(op, nd, shapes, dtypes, stride, padding, dilation, groups):
    """(windows, output shape, dtype) of a convolution, with PyTorch's checks."""
    if len(shapes) not in (2, 3):
        raise ShapeError(f"{op}: takes 2 or 3 inputs (input, weight[, bias]), got {len(shapes)}")
    x, weight = tuple(shapes[0]), tuple(shapes[1])
    dtype = same_floating(op, dtypes)
    input_rank(op, x, nd)
    if len(weight) != nd + 2:
        raise ShapeError(
            f"{op}: expected a {nd + 2}-d weight (out_channels, in_channels / groups, *kernel), got {list(weight)}"
        )
    if groups < 1:
        raise ShapeError(f"{op}: non-positive groups is not supported (groups={groups})")
    batched = len(x) == nd + 2
    channels = x[1] if batched else x[0]
    out_channels = weight[0]
    if channels != weight[1] * groups:
        raise ShapeError(
            f"Given groups={groups}, weight of size {list(weight)}, expected input{list(x)} to have "
            f"{weight[1] * groups} channels, but got {channels} channels instead"
        )
    if out_channels % groups:
        raise ShapeError(f"{op}: out_channels ({out_channels}) must be divisible by groups ({groups})")
    if len(shapes) == 3 and tuple(shapes[2]) != (out_channels,):
        raise ShapeError(f"{op}: expected bias of shape [{out_channels}], got {list(shapes[2])}")
    sizes, kernel = x[-nd:], weight[2:]
    dilation = per_dim(dilation, nd, "dilation", op)
    if isinstance(padding, str):
        if padding == "valid":
            before = after = (0,) * nd
        else:
            if any(s != 1 for s in per_dim(stride, nd, "stride", op)):
                raise ShapeError(f"{op}: padding='same' is not supported for strided convolutions")
            before = tuple(d * (k - 1) // 2 for d, k in zip(dilation, kernel))
            after = tuple(d * (k - 1) - b for d, k, b in zip(dilation, kernel, before))
        w = windows(op, sizes, kernel, dilation, before, stride, after=after)
    else:
        w = windows(op, sizes, kernel, dilation, padding, stride)
    batch = (x[0],) if batched else ()
    return w, (*batch, out_channels, *w.out), dtype


def _conv_forward(op, nd):
    def forward(*inputs, stride, padding, dilation, groups):
        shapes = [v.shape for v in inputs]
        w, out_shape, _ = _conv_plan(op, nd, shapes, [v.dtype for v in inputs], stride, padding, dilation, groups)
        x, weight = batched(inputs[0], nd)[0], inputs[1]
        if w.symmetric:
            cols = trusted.im2col(x, kernel_size=w.kernel, dilation=w.dilation, padding=w.before, stride=w.stride)
        else:
            cols = trusted.im2col(
                pad_windows(x, w, 0), kernel_size=w.kernel, dilation=w.dilation, padding=0, stride=w.stride
            )
        n, out_channels, rows = x.shape[0], weight.shape[0], weight.shape[1] * w.taps
        if groups == 1:
            out = trusted.matmul(trusted.reshape(weight, shape=(out_channels, rows)), cols)
        else:
            cols = trusted.reshape(cols, shape=(n, groups, rows, w.count))
            out = trusted.matmul(trusted.reshape(weight, shape=(groups, out_channels // groups, rows)), cols)
        out = trusted.reshape(out, shape=out_shape)
        if len(inputs) == 3:
            out = trusted.add(out, trusted.reshape(inputs[2], shape=(out_channels,) + (1,) * nd))
        return out

    return forward


def _conv_infer(op, nd):
    def infer(shapes, dtypes, attrs):
        _, shape, dtype = _conv_plan(op, nd, shapes, dtypes, **attrs)
        return shape, dtype

    return infer


def _conv_arity(count, attrs):
    return None if count in (2, 3) else f"takes 2 or 3 inputs (input, weight[, bias]), got {count}"


def _conv_work(op, nd):
    def work(in_shapes, out_shape, attrs):
        w, _, _ = _conv_plan(op, nd, in_shapes, [numpy.float64] * len(in_shapes), **attrs)
        x, weight = in_shapes[0], in_shapes[1]
        batch = x[0] if len(x) == nd + 2 else 1
        macs = batch * weight[0] * w.count * weight[1] * w.taps
        cols = batch * weight[1] * attrs["groups"] * w.taps * w.count
        return 2 * macs + costs.ELEMENT_OP * (cols + costs.numel(out_shape))

    return work


def _conv_scratch(op, nd):
    """The columns (held from the forward by the product's vjp), the padded input, the product's
    gradients: the columns' and the weight's per batch element before they are summed."""

    def scratch(in_metas, out_meta, attrs) -> costs.Scratch:
        shapes = [s for s, _ in in_metas]
        w, _, _ = _conv_plan(op, nd, shapes, [d for _, d in in_metas], **attrs)
        x, weight = shapes[0], shapes[1]
        size = costs.float_itemsize(in_metas, out_meta)
        batch = x[0] if len(x) == nd + 2 else 1
        cols = batch * weight[1] * attrs["groups"] * w.taps * w.count * size
        padded = batch * weight[1] * attrs["groups"] * math.prod(w.padded) * size
        per_batch_weight = batch * costs.numel(weight) * size
        out = costs.nbytes(out_meta)
        return costs.Scratch(forward=cols + padded, kept=cols, backward=cols + padded + per_batch_weight + out)

    return scratch


CONV_ATTRS = {
    "stride": STRIDE,
    "padding": Attr("conv_padding", 0, "zeros added on each side of each spatial dimension, or 'same' or 'valid'"),
    "dilation": DILATION,
    "groups": Attr("int", 1, "channel groups: input and output channels split alike, each group convolved apart"),
}


def _declare_conv(nd, samples, doc):
    """conv{nd}d, declared once for every number of spatial dimensions."""
    name = f"conv{nd}d"
    return defop(
        name,
        _conv_forward(name, nd),
        variadic=True,
        attrs=CONV_ATTRS,
        composite=True,
        methods=(),
        check_arity=_conv_arity,
        named_inputs=("input", "weight", "bias"),
        optional_inputs=1,
        samples=samples,
        infer=_conv_infer(name, nd),
        work=_conv_work(name, nd),
        kernel="blas",
        scratch=_conv_scratch(name, nd),
        doc=doc,
    )


conv1d = _declare_conv(
    1,
    (
        Sample(((1, 2, 3), (3, 2, 3), (3,)), {"padding": 1}),
        Sample(((1, 4, 3), (2, 2, 1)), {"groups": 2, "stride": 2, "padding": 1}),
        Sample(((1, 2, 1), (2, 2, 2)), {"padding": "same"}),
        Sample(((2, 3), (3, 2, 3), (3,)), {"padding": "valid"}),
    ),
    "1-d convolution (cross-correlation) of [N, C_in, L] with weight [C_out, C_in / groups, k], plus bias",
)
# windows about as wide as the input, or of one tap: the memory sweep grows every dimension above 1,
# and the columns (channels x taps x windows) and the work must not grow much faster than the values
# (tests/engine/test_conv.py checks the rest against PyTorch)
conv2d = _declare_conv(
    2,
    (
        Sample(((1, 2, 1, 3), (3, 2, 1, 3), (3,)), {"padding": (0, 1)}),
        Sample(((1, 1, 3, 3), (2, 1, 3, 3)), {"padding": 1}),
        Sample(((1, 4, 3, 5), (2, 2, 1, 1)), {"groups": 2, "stride": (2, 1), "padding": 1}),
        Sample(((1, 2, 2, 1), (2, 2, 1, 2)), {"padding": "same"}),
        Sample(((2, 1, 3), (3, 2, 1, 3), (3,)), {"padding": (0, 1), "stride": (1, 2)}),
    ),
    "2-d convolution (cross-correlation) of [N, C_in, H, W] with weight [C_out, C_in / groups, kh, kw], plus bias",
)
conv3d = _declare_conv(
    3,
    (
        Sample(((1, 2, 1, 1, 3), (3, 2, 1, 1, 3), (3,)), {"padding": (0, 0, 1)}),
        Sample(((1, 1, 2, 3, 2), (2, 1, 2, 3, 2)), {"padding": (0, 1, 0)}),
        Sample(((1, 4, 3, 1, 2), (2, 2, 1, 1, 1)), {"groups": 2, "stride": (2, 1, 1), "padding": 1}),
        Sample(((2, 1, 2, 1), (3, 2, 1, 2, 1), (3,)), {"padding": "same"}),
    ),
    "3-d convolution (cross-correlation) of [N, C_in, D, H, W] with weight [C_out, C_in / groups, kd, kh, kw], "
    "plus bias",
)

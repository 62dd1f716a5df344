"""Pooling, composed of `engine.ops.conv`'s im2col under PyTorch's functional names and argument names:
- `max_pool1d`, `max_pool2d`, `max_pool3d` = im2col of the input padded with -inf, then each window's first maximum
  (PyTorch's pick: a tie sends the whole gradient to the first maximal tap of the window);
- `avg_pool1d`, `avg_pool2d`, `avg_pool3d` = im2col of the zero-padded input, each window's sum divided by PyTorch's
  divisor (`count_include_pad`, `divisor_override`, ceil_mode's shortened last windows);
- `adaptive_avg_pool2d` = two matrix products with averaging matrices (its windows are separable).
"""

from __future__ import annotations

import math

import numpy

from engine import costs
from engine.attrs import Attr
from engine.backend import array_module
from engine.ops.conv import DILATION, KERNEL, batched, const, input_rank, pad_windows, same_floating
from engine.ops.windows import Windows, per_dim, windows
from engine.recording import derived
from engine.registry import Sample, defop, trusted
from engine.shapes import ShapeError


def _pool_plan(op, nd, shape, dtype, kernel_size, stride, padding, dilation, ceil_mode, divisor_override=None):
    same_floating(op, [dtype])
    if divisor_override == 0:
        raise ShapeError(f"{op}: divisor must be not zero")
    input_rank(op, shape, nd)
    stride = kernel_size if stride is None else stride
    k, p, d = (
        per_dim(v, nd, name, op)
        for v, name in ((kernel_size, "kernel_size"), (padding, "padding"), (dilation, "dilation"))
    )
    _pool_refusal(op, shape[-nd - 1 :], k, p, d, per_dim(stride, nd, "stride", op), ceil_mode)
    w = windows(op, tuple(shape[-nd:]), kernel_size, dilation, padding, stride, ceil_mode)
    return w, (*shape[:-nd], *w.out)


def _pool_refusal(op, sizes, kernel, pad, dilation, stride, ceil_mode):
    """PyTorch's refusals of a pool's padding and of a window wider than its padded input, in its order and words
    (`sizes`: the channels and spatial sizes)."""
    for k, p, d in zip(kernel, pad, dilation):
        if op == "max_pool1d" and p > k // 2:
            raise ShapeError(
                f"max_pool1d() padding should be at most half of kernel size, but got padding={p} and kernel_size={k}"
            )
        if p > ((k - 1) * d + 1) // 2:
            raise ShapeError(
                f"pad should be at most half of effective kernel size, but got pad={p}, kernel_size={k} and dilation={d}"
            )
    if len(kernel) == 2 and any(p > k // 2 for k, p in zip(kernel, pad)):
        why = f"padW = {pad[1]}, padH = {pad[0]}, kW = {kernel[1]}, kH = {kernel[0]}"
        raise ShapeError(f"pad should be smaller than or equal to half of kernel size, but got {why}")
    if op == "avg_pool3d" and any(i < k for i, k in zip(sizes[1:], kernel)):
        raise ShapeError(
            f"input image (T: {sizes[1]} H: {sizes[2]} W: {sizes[3]}) smaller than kernel size (kT: {kernel[0]} kH: {kernel[1]} kW: {kernel[2]})"
        )
    out = []
    for i, k, p, d, s in zip(sizes[1:], kernel, pad, dilation, stride):
        n = (i + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        out.append(n - 1 if ceil_mode and (n - 1) * s >= i + p else n)
    if min(out) < 1:
        if op == "max_pool1d":
            raise ShapeError(f"max_pool1d() Invalid computed output size: {out[0]}")
        given, out = (
            ([sizes[0], 1, *sizes[1:]], [sizes[0], 1, *out]) if op == "avg_pool1d" else ([*sizes], [sizes[0], *out])
        )
        raise ShapeError(
            f"Given input size: ({'x'.join(map(str, given))}). Calculated output size: ({'x'.join(map(str, out))}). Output size is too small"
        )


def _windows_of(x, w: Windows, value):
    """[N, C, taps, windows] of x [N, C, *sizes] padded by `value` (im2col's own zeros where they do)."""
    n, c = x.shape[:2]
    if value == 0 and w.symmetric:
        cols = trusted.im2col(x, kernel_size=w.kernel, dilation=w.dilation, padding=w.before, stride=w.stride)
    else:
        padded = pad_windows(x, w, value) if any(w.before) or any(w.after) else x
        cols = trusted.im2col(padded, kernel_size=w.kernel, dilation=w.dilation, padding=0, stride=w.stride)
    return trusted.reshape(cols, shape=(n, c, w.taps, w.count))


def _max_pool_forward(op, nd):
    def forward(x, kernel_size, stride, padding, dilation, ceil_mode):
        w, out_shape = _pool_plan(op, nd, x.shape, x.dtype, kernel_size, stride, padding, dilation, ceil_mode)
        x = batched(x, nd)[0]
        cols = _windows_of(x, w, -numpy.inf)
        xp = array_module(cols._data)

        def first_maximum(values):
            return xp.arange(w.taps).reshape((1, 1, -1, 1)) == _first_maximum(xp, values)[:, :, None, :]

        chosen = trusted.where(derived(first_maximum, cols), cols, const(xp.zeros((), cols.dtype)))
        return trusted.reshape(trusted.sum(chosen, dim=2), shape=out_shape)

    return forward


def _first_maximum(xp, cols):
    """The tap of each window [N, C, taps, L] that PyTorch's max pooling picks: the first maximum, or the
    last nan. Tap by tap over contiguous planes (an argmax along the taps' strided axis is several times slower)."""
    best = cols[:, :, 0].copy()
    index = xp.zeros(best.shape, numpy.int64)
    for tap in range(1, cols.shape[2]):
        values = cols[:, :, tap]
        better = (values > best) | xp.isnan(values)
        index[better] = tap
        xp.copyto(best, values, where=better)
    return index


def _avg_pool_forward(op, nd):
    def forward(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
        w, out_shape = _pool_plan(
            op, nd, x.shape, x.dtype, kernel_size, stride, padding, 1, ceil_mode, divisor_override
        )
        x = batched(x, nd)[0]
        sums = trusted.sum(_windows_of(x, w, 0), dim=2)
        xp = array_module(sums._data)
        divisor = xp.asarray(_divisors(w, count_include_pad, divisor_override), dtype=sums.dtype)
        return trusted.reshape(trusted.div(sums, const(divisor)), shape=out_shape)

    return forward


def _divisors(w: Windows, count_include_pad, divisor_override):
    """PyTorch's divisor of each window (flattened): its taps within the input padded by `padding`
    (count_include_pad) or within the input alone, or `divisor_override`."""
    if divisor_override is not None:
        return numpy.full(w.count, float(divisor_override))
    per_dim_counts = []
    for i, k, p, s, n in zip(w.sizes, w.kernel, w.before, w.stride, w.out):
        start = numpy.arange(n) * s - p
        end = numpy.minimum(start + k, i + p)
        if not count_include_pad:
            start, end = numpy.maximum(start, 0), numpy.minimum(end, i)
        per_dim_counts.append(end - start)
    counts = per_dim_counts[0]
    for more in per_dim_counts[1:]:
        counts = numpy.multiply.outer(counts, more)
    return counts.reshape(-1).astype(numpy.float64)


def _pool_infer(op, nd, max_pool):
    def infer(shapes, dtypes, attrs):
        if max_pool:
            window = (attrs["kernel_size"], attrs["stride"], attrs["padding"], attrs["dilation"])
        else:
            window = (attrs["kernel_size"], attrs["stride"], attrs["padding"], 1)
        _, shape = _pool_plan(op, nd, shapes[0], dtypes[0], *window, attrs["ceil_mode"], attrs.get("divisor_override"))
        return shape, numpy.dtype(dtypes[0])

    return infer


def _pool_columns(op, nd, max_pool, in_metas, attrs):
    (shape, dtype) = in_metas[0]
    dilation = attrs["dilation"] if max_pool else 1
    w, _ = _pool_plan(
        op, nd, shape, dtype, attrs["kernel_size"], attrs["stride"], attrs["padding"], dilation, attrs["ceil_mode"]
    )
    batch = tuple(shape[:-nd]) if len(shape) == nd + 2 else (1, *shape[:-nd])
    return w, math.prod(batch) * w.taps * w.count, math.prod(batch) * math.prod(w.padded)


def _pool_work(op, nd, max_pool):
    def work(in_shapes, out_shape, attrs):
        _, cols, padded = _pool_columns(op, nd, max_pool, [(in_shapes[0], numpy.float64)], attrs)
        return costs.ELEMENT_OP * ((4 if max_pool else 2) * cols + padded)

    return work


def _pool_scratch(op, nd, max_pool):
    """The padded input and its columns; a max pool's choice of tap (a mask the columns' size, kept
    by its where) and the where's result; in the backward, the columns' gradient and col2im's padded image."""

    def scratch(in_metas, out_meta, attrs) -> costs.Scratch:
        _, cols, padded = _pool_columns(op, nd, max_pool, in_metas, attrs)
        size = costs.float_itemsize(in_metas, out_meta)
        if max_pool:
            return costs.Scratch(
                forward=(2 * cols + padded) * size + 2 * cols + 8 * costs.numel(out_meta[0]),
                kept=cols,
                backward=(2 * cols + padded) * size,
            )
        return costs.Scratch(forward=(cols + padded) * size, backward=(cols + padded) * size)

    return scratch


def _pool_samples(nd, max_pool):
    shape = (1, 2, 5, 6, 4)[: nd + 2]
    samples = [
        Sample((shape,), {"kernel_size": 2}),
        Sample((shape,), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
        Sample(((2,) + shape[2:],), {"kernel_size": (2,) * nd, "stride": 1}),
    ]
    if max_pool:
        samples.append(Sample((shape,), {"kernel_size": 2, "stride": 1, "dilation": 2, "padding": 1}))
    else:
        samples.append(Sample((shape,), {"kernel_size": 3, "padding": 1, "count_include_pad": False}))
        if nd > 1:  # PyTorch's avg_pool1d has no divisor_override
            samples.append(Sample((shape,), {"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}))
    return tuple(samples)


POOL_ATTRS = {
    "kernel_size": KERNEL,
    "stride": Attr("window?", None, "the step between windows (null: kernel_size)"),
    "padding": Attr("padding", 0, "implicit padding on each side (at most half the kernel)"),
}
CEIL_MODE = Attr("bool", False, "round the number of windows up (a last window may overhang the input)")


def _declare_pools(nd):
    max_name, avg_name = f"max_pool{nd}d", f"avg_pool{nd}d"
    defop(
        max_name,
        _max_pool_forward(max_name, nd),
        attrs={**POOL_ATTRS, "dilation": DILATION, "ceil_mode": CEIL_MODE},
        composite=True,
        methods=(),
        samples=_pool_samples(nd, True),
        infer=_pool_infer(max_name, nd, True),
        work=_pool_work(max_name, nd, True),
        scratch=_pool_scratch(max_name, nd, True),
        doc=f"{nd}-d max pooling: each window's maximum (the gradient goes to the window's first maximum)",
    )
    defop(
        avg_name,
        _avg_pool_forward(avg_name, nd),
        attrs={
            **POOL_ATTRS,
            "ceil_mode": CEIL_MODE,
            "count_include_pad": Attr("bool", True, "count the padding's zeros in the divisor"),
            **({"divisor_override": Attr("int?", None, "divide every window's sum by this instead")} if nd > 1 else {}),
        },
        composite=True,
        methods=(),
        samples=_pool_samples(nd, False),
        infer=_pool_infer(avg_name, nd, False),
        work=_pool_work(avg_name, nd, False),
        scratch=_pool_scratch(avg_name, nd, False),
        doc=f"{nd}-d average pooling: each window's mean",
    )


for _nd in (1, 2, 3):
    _declare_pools(_nd)


# --- adaptive average pooling -------------------------------------------------------------------


def _averaging(size, out, dtype):
    """[out, size]: row i averages PyTorch's adaptive window i, [floor(i * size / out), ceil((i + 1) * size / out))."""
    matrix = numpy.zeros((out, size))
    for i in range(out):
        start, end = (i * size) // out, -((-(i + 1) * size) // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix.astype(dtype)


def _adaptive_plan(shape, dtype, output_size):
    same_floating("adaptive_avg_pool2d", [dtype])
    input_rank("adaptive_avg_pool2d", shape, 2)
    out = per_dim(output_size, 2, "output_size", "adaptive_avg_pool2d")
    if any(s == 0 for s in shape[-2:]):
        raise ShapeError(
            f"adaptive_avg_pool2d: expected non-empty spatial dimensions, got input of shape {list(shape)}"
        )
    return out, (*shape[:-2], *out)


def _adaptive_forward(x, output_size):
    (rows, cols), _ = _adaptive_plan(x.shape, x.dtype, output_size)
    xp = array_module(x._data)
    height, width = x.shape[-2:]
    left = const(xp.asarray(_averaging(height, rows, x.dtype)))
    right = const(xp.asarray(_averaging(width, cols, x.dtype).T))
    return trusted.matmul(trusted.matmul(left, x), right)


def _adaptive_infer(shapes, dtypes, attrs):
    return _adaptive_plan(shapes[0], dtypes[0], attrs["output_size"])[1], numpy.dtype(dtypes[0])


def _adaptive_work(in_shapes, out_shape, attrs):
    shape = in_shapes[0]
    rows, cols = out_shape[-2:]
    lead = math.prod(shape[:-2])
    middle = lead * rows * shape[-1]
    return 2 * (middle * shape[-2] + lead * rows * cols * shape[-1]) + costs.ELEMENT_OP * (middle + costs.numel(shape))


def _adaptive_scratch(in_metas, out_meta, attrs) -> costs.Scratch:
    """The rows' averages [.., out_h, W] (kept by the second product), and their gradient."""
    shape, _ = in_metas[0]
    size = costs.float_itemsize(in_metas, out_meta)
    middle = math.prod(shape[:-2]) * out_meta[0][-2] * shape[-1] * size
    return costs.Scratch(forward=middle, kept=middle, backward=middle + costs.nbytes(in_metas[0]))


adaptive_avg_pool2d = defop(
    "adaptive_avg_pool2d",
    _adaptive_forward,
    attrs={"output_size": Attr("window", doc="the output's spatial sizes (1: a global average)")},
    composite=True,
    methods=(),
    samples=(
        Sample(((1, 2, 5, 6),), {"output_size": 1}),
        Sample(((1, 2, 5, 7),), {"output_size": (2, 3)}),
        Sample(((3, 4, 4),), {"output_size": (2, 2)}),
    ),
    infer=_adaptive_infer,
    work=_adaptive_work,
    scratch=_adaptive_scratch,
    doc="2-d average pooling to a given output size (PyTorch's adaptive windows)",
)

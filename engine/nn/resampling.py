"""`torch.nn.functional`'s resampling and rearranging (re-exported by `engine.nn.functional`), composed of registry
ops: `interpolate` ('nearest', 'nearest-exact', 'linear', 'bilinear' with either align_corners, 'area') as
index_select of the source positions PyTorch's kernels compute, weighted for the linear modes, one spatial
dimension at a time ('bicubic', and `antialias`, as a matmul with each dimension's matrix of PyTorch's weights); `pad`'s 'reflect', 'replicate' and 'circular' modes as an index_select per padded dimension;
`pixel_shuffle`/`pixel_unshuffle` as reshape and permute; `bilinear` as one matmul; `adaptive_max_pool1d/2d/3d` as
the maximum of each of PyTorch's windows; `grid_sample` as gathers of the 2 x 2 (4 x 4 'bicubic') pixels around each
point, weighted by its fractions. Gradients follow from the ops (index_select's adds up repeats)."""

from __future__ import annotations

import itertools
import math

import numpy

from engine.nn.sides import _ns
from engine.user_warnings import warn

__all__ = [
    "interpolate",
    "pixel_shuffle",
    "pixel_unshuffle",
    "bilinear",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "affine_grid",
    "grid_sample",
]

_PAD_SIZES = {2: (2, 3), 4: (3, 4), 6: (4, 5)}  # non-constant padding length -> the input dimensions it takes


def padded_by_index(input, pad, mode, value):
    """F.pad's 'reflect', 'replicate' and 'circular' modes (`engine.nn.functional.pad` checked `pad`)."""
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if input.ndim not in _PAD_SIZES.get(len(pad), ()):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {input.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
        )
    ns = _ns(input)
    out = input
    for i in range(len(pad) // 2):
        dim, before, after = input.ndim - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1])
        size = input.shape[dim]
        if mode == "reflect" and (before >= size or after >= size):
            raise RuntimeError(
                "Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                f"padding ({before}, {after}) at dimension {dim} of input {list(input.shape)}"
            )
        positions = numpy.arange(-before, size + after)
        if mode == "reflect":
            period = 2 * (size - 1) if size > 1 else 1
            positions = numpy.abs(positions) % period
            positions = numpy.where(positions >= size, period - positions, positions)
        elif mode == "replicate":
            positions = numpy.clip(positions, 0, size - 1)
        else:  # the cropped span wraps around
            start, stop = max(-before, 0), size - max(-after, 0)
            kept = stop - start
            if max(before, 0) > kept or max(after, 0) > kept:
                raise RuntimeError("Padding value causes wrapping around more than once.")
            positions = start + (numpy.arange(-max(before, 0), kept + max(after, 0)) % kept)
        out = out.index_select(dim, ns.tensor(positions.astype(numpy.int64)))
    return out


def pixel_shuffle(input, upscale_factor):
    """[*, C * r * r, H, W] -> [*, C, H * r, W * r]."""
    r = upscale_factor
    if input.ndim < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    *batch, channels, height, width = input.shape
    if channels % (r * r):
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, "
            f"but input.size(-3)={channels} is not divisible by {r * r}"
        )
    lead = len(batch)
    split = input.reshape((*batch, channels // (r * r), r, r, height, width))
    order = (*range(lead), lead, lead + 3, lead + 1, lead + 4, lead + 2)
    return split.permute(order).reshape((*batch, channels // (r * r), height * r, width * r))


def pixel_unshuffle(input, downscale_factor):
    """[*, C, H * r, W * r] -> [*, C * r * r, H, W]."""
    r = downscale_factor
    if input.ndim < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    *batch, channels, height, width = input.shape
    for name, size, index in (("height", height, -2), ("width", width, -1)):
        if size % r:
            raise RuntimeError(
                f"pixel_unshuffle expects {name} to be divisible by downscale_factor, but input.size({index})={size} "
                f"is not divisible by {r}"
            )
    lead = len(batch)
    split = input.reshape((*batch, channels, height // r, r, width // r, r))
    order = (*range(lead), lead, lead + 2, lead + 4, lead + 1, lead + 3)
    return split.permute(order).reshape((*batch, channels * r * r, height // r, width // r))


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]."""
    out_features, in1, in2 = weight.shape
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for d, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {d}: got {a} and {b}")
    if input1.shape[-1] != in1 or input2.shape[-1] != in2:
        raise RuntimeError(
            f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but expected {in1}"
            if input1.shape[-1] != in1
            else f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but expected {in2}"
        )
    left = input1.matmul(weight.permute((1, 0, 2)).reshape((in1, out_features * in2)))
    out = (left.reshape((*left.shape[:-1], out_features, in2)) * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias


_LINEAR = {"linear": 3, "bilinear": 4, "bicubic": 4}
_MODES = ("nearest", "nearest-exact", "area", "linear", "bilinear", "bicubic")


def _output_sizes(input, size, scale_factor, recompute_scale_factor):
    """(the output's spatial sizes, the scales PyTorch's kernels take: 1/scale_factor, or None for in/out)."""
    spatial = tuple(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        sizes = tuple(size) if isinstance(size, (tuple, list)) else (size,) * len(spatial)
        if len(sizes) != len(spatial):
            raise ValueError(
                "Input and output must have the same number of spatial dimensions, but got input with spatial "
                f"dimensions of {list(spatial)} and output size of {size}. Please provide input tensor in "
                "(N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format."
            )
        return tuple(int(s) for s in sizes), (None,) * len(spatial)
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    scales = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * len(spatial)
    if len(scales) != len(spatial):
        raise ValueError(
            "Input and scale_factor must have the same number of spatial dimensions, but got input with spatial "
            f"dimensions of {list(spatial)} and scale_factor of shape {scale_factor}. Please provide input tensor "
            "in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format."
        )
    sizes = tuple(int(math.floor(float(i) * float(s))) for i, s in zip(spatial, scales))
    return sizes, (None,) * len(spatial) if recompute_scale_factor else tuple(1.0 / float(s) for s in scales)


def _along(out, dim, source, ns):
    """`out` resampled along `dim` at the fractional source positions (linear between the neighbours)."""
    size = out.shape[dim]
    low = numpy.minimum(numpy.floor(source).astype(numpy.int64), size - 1)
    high = numpy.minimum(low + 1, size - 1)
    weight = (source - low).reshape((-1,) + (1,) * (out.ndim - 1 - dim))
    first = out.index_select(dim, ns.tensor(low))
    second = out.index_select(dim, ns.tensor(high))
    return first + (second - first) * ns.tensor(weight.astype(numpy.dtype(out.dtype)))


def interpolate(
    input,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    """Resizes the spatial dimensions of [N, C, *] input to `size` or floor(input size * scale_factor)."""
    if mode in ("nearest", "area", "nearest-exact") and align_corners is not None:
        raise ValueError(
            "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear"
        )
    if mode not in _MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (supported: {', '.join(_MODES)})")
    if antialias and (mode not in ("bilinear", "bicubic") or input.ndim != 4):
        raise ValueError(
            "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D tensor as input"
        )
    if input.ndim not in (3, 4, 5):
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for the modes: nearest | "
            f"linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact (got {mode})"
        )
    if mode in _LINEAR and input.ndim != _LINEAR[mode]:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {_LINEAR[mode]}D input")
    sizes, scales = _output_sizes(input, size, scale_factor, recompute_scale_factor)
    ns = _ns(input)
    if mode == "area":
        pool = ns.adaptive_avg_pool2d
        flat = input if input.ndim == 4 else input.unsqueeze(-2)
        out = pool(flat, output_size=sizes if input.ndim == 4 else (1, *sizes))
        return out if input.ndim == 4 else out.squeeze(-2)
    out = input
    for k, (target, scale) in enumerate(zip(sizes, scales)):
        dim, source_size = 2 + k, input.shape[2 + k]
        positions = numpy.arange(target, dtype=numpy.float64)
        step = source_size / target if scale is None else scale
        if antialias or mode == "bicubic":
            weights = _resampling_matrix(source_size, target, step, mode, align_corners, antialias)
            moved = out.transpose(dim, -1)
            out = (moved @ ns.tensor(weights.T.astype(numpy.dtype(out.dtype)))).transpose(dim, -1)
        elif mode in ("nearest", "nearest-exact"):
            shift = 0.5 if mode == "nearest-exact" else 0.0
            index = numpy.minimum(numpy.floor((positions + shift) * step).astype(numpy.int64), source_size - 1)
            out = out.index_select(dim, ns.tensor(index))
        elif align_corners:
            step = (source_size - 1) / (target - 1) if target > 1 else 0.0
            out = _along(out, dim, positions * step, ns)
        else:
            out = _along(out, dim, numpy.maximum((positions + 0.5) * step - 0.5, 0.0), ns)
    return out


def _resampling_matrix(size, target, step, mode, align_corners, antialias):
    """[target, size] weights of one dimension's resampling: PyTorch's bicubic taps (A = -0.75, at positions
    clamped to the edge), or with `antialias` its filter (triangle, or cubic with A = -0.5) widened by the
    downscaling factor over the pixels its support covers, normalised."""
    if align_corners:
        step = (size - 1) / (target - 1) if target > 1 else 0.0
    rows, matrix = numpy.arange(target), numpy.zeros((target, size))
    if not antialias:
        source = rows * step if align_corners else (rows + 0.5) * step - 0.5
        low = numpy.floor(source)
        for k, weight in enumerate(_cubic_weights(source - low)):
            numpy.add.at(matrix, (rows, numpy.clip(low.astype(numpy.int64) - 1 + k, 0, size - 1)), weight)
        return matrix
    half = 2.0 if mode == "bicubic" else 1.0  # the filter's support at scale 1
    support, stretch = half * max(step, 1.0), 1.0 / step if step >= 1.0 else 1.0
    for i in rows:
        center = step * (i + 0.5)
        first, stop = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), size)
        x = numpy.abs((numpy.arange(first, stop) - center + 0.5) * stretch)
        if mode == "bicubic":
            near, far = ((1.5 * x - 2.5) * x) * x + 1, ((-0.5 * x + 2.5) * x - 4) * x + 2
            weights = numpy.where(x < 1, near, numpy.where(x < 2, far, 0.0))
        else:
            weights = numpy.maximum(1 - x, 0.0)
        total = weights.sum()
        matrix[i, first:stop] = weights / total if total else weights
    return matrix


def _adaptive_windows(size, out):
    return [(math.floor(i * size / out), math.ceil((i + 1) * size / out)) for i in range(out)]


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """The maximum of each of PyTorch's adaptive windows of [N, C, H, W] (or [C, H, W]) (window i of n over a
    size s: floor(i s / n) to ceil((i + 1) s / n)); with return_indices also each maximum's flat index h * W + w."""
    return _adaptive_max(input, output_size, return_indices, 2)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """adaptive_max_pool2d's over [N, C, D, H, W] (or [C, D, H, W]); an index is d * H * W + h * W + w."""
    return _adaptive_max(input, output_size, return_indices, 3)


def _adaptive_max(input, output_size, return_indices, k):
    if input.ndim not in (k + 1, k + 2):
        raise RuntimeError(
            f"adaptive_max_pool{k}d(): Expected {k + 1}D or {k + 2}D tensor, but got: {list(input.shape)}"
        )
    sizes = (output_size,) * k if output_size is None or isinstance(output_size, int) else tuple(output_size)
    spatial = input.shape[-k:]
    sizes = tuple(spatial[i] if s is None else s for i, s in enumerate(sizes))
    ns, values, indices = _ns(input), [], []
    for box in itertools.product(*(_adaptive_windows(n, s) for n, s in zip(spatial, sizes))):
        window = input[(..., *(slice(a, b) for a, b in box))]
        values.append(window.amax(tuple(range(-k, 0))))
        if return_indices:  # (the window's flat argmax, unravelled, moved by the window's start, raveled)
            local, flat, scale = window.detach().reshape((*window.shape[:-k], -1)).argmax(-1), 0, 1
            for (start, stop), size in zip(box[::-1], spatial[::-1]):
                flat, local, scale = (
                    flat + (local % (stop - start) + start) * scale,
                    local // (stop - start),
                    scale * size,
                )
            indices.append(flat)
    shape = (*input.shape[:-k], *sizes)
    pooled = ns.stack(values, -1).reshape(shape)
    return (pooled, ns.stack(indices, -1).reshape(shape)) if return_indices else pooled


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """The maximum of each adaptive window of [N, C, L] (or [C, L]); with return_indices also its index."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"adaptive_max_pool1d(): Expected 2D or 3D tensor, but got: {list(input.shape)}")
    size = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    out = adaptive_max_pool2d(input.unsqueeze(-2), (1, size), return_indices)
    return (out[0].squeeze(-2), out[1].squeeze(-2)) if return_indices else out.squeeze(-2)


_ALIGN_WARNING = (
    "Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. Please specify "
    "align_corners=True if the old behavior is desired. See the documentation of grid_sample for details."
)


def _aligned(align_corners):
    if align_corners is None:
        warn(_ALIGN_WARNING)
        return False
    return bool(align_corners)


def affine_grid(theta, size, align_corners=None):
    """The (N, H, W, 2) sampling grid of the 2-d affine maps `theta` (N, 2, 3) for an output of `size` (N, C, H, W):
    each output pixel's normalised (x, y) centre (corners with `align_corners`) mapped by theta."""
    align = _aligned(align_corners)
    if len(size) != 4:
        raise NotImplementedError("affine_grid only supports 4D sizes, for 2D affine transformations (here)")
    if tuple(theta.shape) != (int(size[0]), 2, 3):
        raise ValueError(
            f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {list(size)}. Got {list(theta.shape)}."
        )
    return _ns(theta).affine_grid_generator(theta, size=tuple(int(s) for s in size), align_corners=align)


_CUBIC = -0.75  # PyTorch's bicubic kernel's A


def _cubic_weights(t):
    """The weights of the taps at -1, 0, 1 and 2 for a fraction t between 0 and 1 (PyTorch's cubic convolution)."""

    def near(x):
        return ((_CUBIC + 2) * x - (_CUBIC + 3)) * x * x + 1

    def far(x):
        return ((_CUBIC * x - 5 * _CUBIC) * x + 8 * _CUBIC) * x - 4 * _CUBIC

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _reflected(at, twice_low, twice_high):
    """`at` reflected back and forth into [low, high] (PyTorch's reflect_coordinates), its gradient +-1."""
    if twice_low == twice_high:
        return at * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = (at - low).abs()
    flips = (distance.detach() / span).floor()
    extra = distance - flips * span
    return _ns(at).where(flips % 2 == 0, extra + low, span - extra + low)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """`input` (N, C, H, W) sampled at `grid` (N, Ho, Wo, 2) of normalised (x, y): 'bilinear', 'nearest' or
    'bicubic' (4 x 4 taps), 'zeros', 'border' or 'reflection' outside, as PyTorch's kernel computes it;
    differentiable in input and grid (but 'nearest' in grid)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(
            f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '{mode}'"
        )
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or 'reflection', "
            f"but got: '{padding_mode}'"
        )
    align = _aligned(align_corners)
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise RuntimeError(
            f"grid_sampler(): expected 4D input and grid (N, H, W, 2) with the same batch size, but got input "
            f"with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    n, c, h, w = (int(s) for s in input.shape)
    ho, wo = int(grid.shape[1]), int(grid.shape[2])

    def pixel(coord, size):  # normalised -> pixel coordinates
        return (coord + 1) / 2 * (size - 1) if align else ((coord + 1) * size - 1) / 2

    def bounded(at, size):  # PyTorch's compute_coordinates: clamped into the image (no gradient on its borders
        if padding_mode == "reflection":  # either, as clip_coordinates_set_grad), or reflected then clamped
            at = _reflected(at, 0, 2 * (size - 1)) if align else _reflected(at, -1, 2 * size - 1)
        if padding_mode == "zeros":
            return at
        return _ns(at).where((at > 0) & (at < size - 1), at, at.detach().clamp(0, size - 1))

    flat = input.reshape(n, c, h * w)

    def corner(ix, iy):  # the input at integer (ix, iy) (N, Ho, Wo), zero outside: (N, C, Ho, Wo)
        inside = ((ix >= 0) & (ix <= w - 1) & (iy >= 0) & (iy <= h - 1)).to(input.dtype)
        index = (iy.clamp(0, h - 1) * w + ix.clamp(0, w - 1)).long().reshape(n, 1, ho * wo).expand(n, c, ho * wo)
        return flat.gather(2, index).reshape(n, c, ho, wo) * inside.unsqueeze(1)

    if mode == "bicubic":  # the taps around the unbounded point, each bounded as a pixel of its own
        x, y = pixel(grid[..., 0], w), pixel(grid[..., 1], h)
        x0, y0 = x.detach().floor(), y.detach().floor()
        wx, wy = _cubic_weights((x - x0).unsqueeze(1)), _cubic_weights((y - y0).unsqueeze(1))
        columns = [bounded(x0 + i - 1, w) for i in range(4)]
        rows = [bounded(y0 + j - 1, h) for j in range(4)]
        return sum(sum(corner(ix, iy) * wx[i] for i, ix in enumerate(columns)) * wy[j] for j, iy in enumerate(rows))
    x, y = bounded(pixel(grid[..., 0], w), w), bounded(pixel(grid[..., 1], h), h)
    if mode == "nearest":
        return corner(x.detach().round(), y.detach().round())
    x0, y0 = x.detach().floor(), y.detach().floor()
    wx, wy = (x - x0).unsqueeze(1), (y - y0).unsqueeze(1)
    top = corner(x0, y0) * (1 - wx) + corner(x0 + 1, y0) * wx
    bottom = corner(x0, y0 + 1) * (1 - wx) + corner(x0 + 1, y0 + 1) * wx
    return top * (1 - wy) + bottom * wy

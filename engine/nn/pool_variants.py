"""`torch.nn.functional`'s `max_unpool1d/2d/3d` (a scatter of each value to the flat position its max pool's
index names, in zeros of the unpooled size; gradient: the gather back), `lp_pool1d/2d/3d` (PyTorch's composition:
the average pool of x ** p, times the window's size, to the power 1/p; max pools of |x| at p = +-inf) and
`channel_shuffle` (reshape, transpose, reshape). Re-exported by `engine.nn.functional`."""

from __future__ import annotations

import math

from engine.nn.sides import _ns

__all__ = ["max_unpool1d", "max_unpool2d", "max_unpool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "channel_shuffle"]


def as_tuple(value, n):
    """`value` as an n-tuple (an int repeated)."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _unpooled_size(input, kernel, stride, padding, output_size):
    """PyTorch's `_unpool_output_size`: (in - 1) * stride + kernel - 2 * padding, or `output_size` when it is
    within a stride of that."""
    n = len(kernel)
    default = [(input.shape[-n + d] - 1) * stride[d] + kernel[d] - 2 * padding[d] for d in range(n)]
    if output_size is None:
        return default
    output_size = list(output_size)[2:] if len(output_size) == n + 2 else list(output_size)
    if len(output_size) != n:
        raise ValueError(
            f"output_size should be a sequence containing {n} or {n + 2} elements, but it has a length of "
            f"'{len(output_size)}'"
        )
    for d in range(n):
        low, high = default[d] - stride[d], default[d] + stride[d]
        if not low < output_size[d] < high:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between {low} and {high})')
    return output_size


def _max_unpool(n):
    def max_unpool(input, indices, kernel_size, stride=None, padding=0, output_size=None):
        kernel = as_tuple(kernel_size, n)
        stride, padding = kernel if stride is None else as_tuple(stride, n), as_tuple(padding, n)
        sizes = _unpooled_size(input, kernel, stride, padding, output_size)
        if tuple(indices.shape) != tuple(input.shape):
            raise RuntimeError(
                f"Expected shape of indices to be same as that of the input tensor ({list(input.shape)}) but got "
                f"indices tensor with shape: {list(indices.shape)}"
            )
        if input.ndim not in (n + 1, n + 2):
            raise RuntimeError(f"max_unpool{n}d: expected a {n + 1}-d or {n + 2}-d input, got {input.ndim}-d")
        ns, lead = _ns(input), tuple(input.shape[: input.ndim - n])
        flat = (*lead, math.prod(input.shape[-n:]))
        zeros = ns.zeros((*lead, math.prod(sizes)), dtype=input.dtype)
        out = ns.scatter(zeros, len(lead), indices.reshape(flat), input.reshape(flat))
        return out.reshape((*lead, *sizes))

    max_unpool.__name__ = max_unpool.__qualname__ = f"max_unpool{n}d"
    max_unpool.__doc__ = f"The partial inverse of max_pool{n}d: each value at its index, zeros elsewhere."
    return max_unpool


max_unpool1d, max_unpool2d, max_unpool3d = (_max_unpool(n) for n in (1, 2, 3))


def _lp_pool(n):
    def lp_pool(input, norm_type, kernel_size, stride=None, ceil_mode=False):
        ns, window = _ns(input), {"kernel_size": kernel_size, "stride": stride, "padding": 0, "ceil_mode": ceil_mode}
        if norm_type in (math.inf, -math.inf):
            sign = 1 if norm_type > 0 else -1
            return getattr(ns, f"max_pool{n}d")(input.abs() * sign, dilation=1, **window) * sign
        out = getattr(ns, f"avg_pool{n}d")(input.pow(norm_type), **window)
        size = math.prod(as_tuple(kernel_size, n))
        return (out.sign() * out.abs().relu()).mul(size).pow(1.0 / norm_type)

    lp_pool.__name__ = lp_pool.__qualname__ = f"lp_pool{n}d"
    lp_pool.__doc__ = f"The power-average pool: (sum of x ** p over each {n}-d window) ** (1 / p)."
    return lp_pool


lp_pool1d, lp_pool2d, lp_pool3d = (_lp_pool(n) for n in (1, 2, 3))


def channel_shuffle(input, groups):
    """[N, C, *] with its channels regrouped: C = groups x k read as k x groups (ShuffleNet's shuffle)."""
    if input.ndim < 3:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    batch, channels, *rest = input.shape
    if channels % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {channels} channels and {groups} groups."
        )
    split = input.reshape((batch, groups, channels // groups, *rest))
    return split.transpose(1, 2).reshape(tuple(input.shape))

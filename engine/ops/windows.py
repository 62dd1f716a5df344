"""The geometry of sliding windows, shared by the shape rules and the forwards of `engine.ops.conv`:
per spatial dimension, a window of `kernel` taps `dilation` apart, moved by `stride` over the input
padded by `before` and `after`; and PyTorch's checks of those numbers, as ShapeErrors naming the op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.shapes import ShapeError


def per_dim(value, n: int, name: str, op: str) -> tuple:
    """An int attribute repeated over `n` spatial dimensions, or a list of 1 or `n` of them, as a tuple."""
    if isinstance(value, int):
        return (value,) * n
    if len(value) == 1:
        return tuple(value) * n
    if len(value) != n:
        raise ShapeError(
            f"{op}: expected {name} to be a single integer value or a list of {n} values to match the "
            f"{n}-d windows, but got {name}={list(value)}"
        )
    return tuple(value)


@dataclass(frozen=True)
class Windows:
    sizes: tuple  # the input's spatial sizes
    kernel: tuple
    dilation: tuple
    before: tuple  # padding before each spatial dimension
    after: tuple  # and after it (more than `before` for ceil_mode's last window, or an even 'same' kernel)
    stride: tuple
    out: tuple  # windows per spatial dimension

    @property
    def taps(self) -> int:
        return math.prod(self.kernel)

    @property
    def count(self) -> int:
        return math.prod(self.out)

    @property
    def padded(self) -> tuple:
        return tuple(i + b + a for i, b, a in zip(self.sizes, self.before, self.after))

    @property
    def symmetric(self) -> bool:
        return self.before == self.after

    def tap_slices(self, offsets) -> tuple:
        """The slices of the padded input that tap `offsets` (one per spatial dimension) reads, window by window."""
        return tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offsets, self.dilation, self.stride, self.out)
        )


def windows(op, sizes, kernel_size, dilation=1, padding=0, stride=1, ceil_mode=False, after=None) -> Windows:
    """The windows of an input with spatial `sizes`; raises ShapeError where PyTorch refuses them
    (a window wider than the padded input: no output)."""
    n = len(sizes)
    kernel = per_dim(kernel_size, n, "kernel_size", op)
    dilation = per_dim(dilation, n, "dilation", op)
    before = per_dim(padding, n, "padding", op)
    stride = per_dim(stride, n, "stride", op)
    after = before if after is None else after
    out, extra = [], []
    for i, k, d, b, a, s in zip(sizes, kernel, dilation, before, after, stride):
        span = d * (k - 1) + 1
        room = i + b + a - span
        if room < 0:
            raise ShapeError(
                f"Calculated padded input size per channel: ({' x '.join(str(i + b + a) for i, b, a in zip(sizes, before, after))}). "
                f"Kernel size: ({' x '.join(str(d * (k - 1) + 1) for k, d in zip(kernel, dilation))}). "
                "Kernel size can't be greater than actual input size"
            )
        count = (room + s - 1) // s + 1 if ceil_mode else room // s + 1
        if ceil_mode and (count - 1) * s >= i + b:  # the last window must start inside the input or its left padding
            count -= 1
        out.append(count)
        extra.append(max(0, (count - 1) * s + span - (i + b + a)))
    return Windows(
        tuple(sizes), kernel, dilation, before, tuple(a + e for a, e in zip(after, extra)), stride, tuple(out)
    )


def spatial_rank(op, ndim: int, kernel_size, least: int = 3) -> int:
    """How many spatial dimensions an input of `ndim` dimensions (N, C, spatial...) has for `kernel_size`."""
    n = ndim - 2 if isinstance(kernel_size, int) or len(kernel_size) == 1 else len(kernel_size)
    if ndim < least or n < 1 or ndim != n + 2:
        raise ShapeError(
            f"{op}: expected a {n + 2 if n >= 1 else least}-d input (batch, channels, spatial...), got {ndim} dimensions"
        )
    return n

"""The real discrete Fourier transforms that `torch.fft` composes from, on real arrays only (the engine
has no complex dtype): `fft_r2c`, a real signal's half spectrum in torch.view_as_real's layout (real and
imaginary parts on a last axis of 2), and `fft_c2r`, a real signal from such a half spectrum. Each
transforms over the dimensions `dim` (of the signal; the last of them is the halved one) with signal
sizes `s` (the input zero-padded or trimmed to them first, as torch.fft does), scaled by `norm`.

Each vjp is the other transform under the dual norm (a transform scaled by a has the other direction's
sum scaled by a as its adjoint), with the Hermitian weighting w of the halved dimension: the half
spectrum stands for the whole, each of its bins twice but the zero frequency (and an even length's
Nyquist frequency) once. Zero-padding and trimming are adjoint to each other (`_fit`)."""

from __future__ import annotations

import math

import numpy

from engine import backend, costs, shapes
from engine.attrs import Attr
from engine.ops.conv import const
from engine.ops.indexing import take
from engine.ops.selection import EVERY
from engine.registry import Sample, defop, trusted

DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
ATTRS = {
    "s": Attr("shape", doc="the signal's size in each of dim (the input zero-padded or trimmed to it)"),
    "dim": Attr("ints", doc="the dimensions transformed, the last of them halved"),
    "norm": Attr("fft_norm", "backward", "'backward' (none forward, 1/n back), 'ortho' (1/sqrt(n)) or 'forward'"),
}


def _weight(ndim: int, dim, n: int, dtype, inverse: bool = False):
    """w (or 1/w) over the n // 2 + 1 bins of the halved dimension, shaped to broadcast against pairs of
    a signal with `ndim` dimensions."""
    w = numpy.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return const(backend.to_active(numpy.asarray(1 / w if inverse else w, dtype).reshape(-1, *(1,) * (ndim - dim[-1]))))


def _fit(v, shape, dim):
    """v trimmed or zero-padded at the end of each of dim to `shape`'s size there."""
    cut = [EVERY] * (max(dim) + 1)
    for d in dim:
        cut[d] = {"slice": [None, shape[d], None]} if v.shape[d] > shape[d] else EVERY
    if any(v.shape[d] > shape[d] for d in dim):
        v = take(v, cut)
    if all(v.shape[d] == shape[d] for d in dim):
        return v
    padded = list(v.shape)
    for d in dim:
        cut[d], padded[d] = {"slice": [None, v.shape[d], None]}, shape[d]
    return trusted.index_add(v, index=tuple(cut), shape=tuple(padded))


def _r2c(xp, x, s, dim, norm):
    shapes.spectral_r2c([x.shape], [x.dtype], {"s": s, "dim": dim})
    z = xp.fft.rfftn(x, s=s, axes=dim, norm=norm)
    return xp.stack([z.real, z.imag], axis=-1)


def _c2r(xp, pairs, s, dim, norm):
    shapes.spectral_c2r([pairs.shape], [pairs.dtype], {"s": s, "dim": dim})
    z = xp.empty(pairs.shape[:-1], numpy.result_type(pairs.dtype, numpy.complex64))
    z.real, z.imag = pairs[..., 0], pairs[..., 1]
    return xp.fft.irfftn(z, s=s, axes=dim, norm=norm).astype(pairs.dtype, copy=False)


def _r2c_vjp(g, ans, x, s, dim, norm):
    dim = shapes.normalize_dims(dim, len(x.shape))
    weighted = g * _weight(len(x.shape), dim, s[-1], g.dtype, inverse=True)
    return _fit(trusted.fft_c2r(weighted, s=s, dim=dim, norm=DUAL[norm]), x.shape, dim)


def _c2r_vjp(g, ans, pairs, s, dim, norm):
    dim = shapes.normalize_dims(dim, len(g.shape))
    spectrum = trusted.fft_r2c(g, s=s, dim=dim, norm=DUAL[norm]) * _weight(len(g.shape), dim, s[-1], g.dtype)
    return _fit(spectrum, pairs.shape[:-1], dim)


def _work(in_shapes, out_shape, attrs) -> int:
    """~2.5 n log2 n flops per real transform of n points (half a complex one's 5 n log2 n), each line
    of the batch, plus a pass over the operands."""
    n = math.prod(attrs["s"])
    lines = max(costs.numel(in_shapes[0]), costs.numel(out_shape)) / max(n, 1)
    return math.ceil(2.5 * lines * n * math.log2(max(n, 2))) + costs.one_pass(in_shapes, out_shape, attrs)


def _scratch(in_metas, out_meta, attrs) -> costs.Scratch:
    """NumPy's complex results (an n-d transform's passes) forward, the weighted spectrum and its fit backward:
    two and three values of the largest size, at 8 bytes an element (float32's transforms measure as float64's)."""
    return costs.Scratch(
        forward=16 * costs.largest(in_metas, out_meta), backward=24 * costs.largest(in_metas, out_meta)
    )


defop(
    "fft_r2c",
    _r2c,
    _r2c_vjp,
    attrs=ATTRS,
    saves=False,
    methods=(),
    samples=(
        Sample(((6,),), {"s": (6,), "dim": (0,)}),
        Sample(((3, 5),), {"s": (5,), "dim": (1,), "norm": "ortho"}),
        Sample(((4, 3),), {"s": (6,), "dim": (0,), "norm": "forward"}),
        Sample(((2, 3, 4),), {"s": (2, 3), "dim": (2, 1)}),
    ),
    infer=shapes.spectral_r2c,
    work=_work,
    scratch=_scratch,
    doc="the half spectrum of a real signal over dim (torch.fft.rfftn), its real and imaginary parts on a last axis",
)
defop(
    "fft_c2r",
    _c2r,
    _c2r_vjp,
    attrs=ATTRS,
    saves=False,
    methods=(),
    samples=(
        Sample(((4, 2),), {"s": (6,), "dim": (0,)}),
        Sample(((3, 3, 2),), {"s": (5,), "dim": (1,), "norm": "ortho"}),
        Sample(((5, 3, 2),), {"s": (4,), "dim": (0,), "norm": "forward"}),
        Sample(((2, 3, 4, 2),), {"s": (3, 5), "dim": (2, 1)}),
    ),
    infer=shapes.spectral_c2r,
    work=_work,
    scratch=_scratch,
    doc="the real signal of a half spectrum (real and imaginary parts on a last axis) over dim (torch.fft.irfftn)",
)

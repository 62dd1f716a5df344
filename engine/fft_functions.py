"""`torch.fft`, written once for both Variables (`bind(ns)`) on the registry's real transforms `fft_r2c` and
`fft_c2r` (`engine/ops/spectral.py`): `rfft`/`irfft`, `fft`/`ifft`, `hfft`/`ihfft`, each also 2-d and n-d, with
torch's n/s, dim and norm; `fftfreq`, `rfftfreq`, `fftshift`, `ifftshift`. A whole spectrum is a half one
extended by its Hermitian symmetry, and a complex input's is its real and imaginary parts' (twice the work of
torch's complex transform); an inverse is the conjugate of the dual norm's forward transform of the conjugate.

The engine has no complex dtype, so a spectrum is a `ComplexView`: a complex tensor held as its real and
imaginary parts on a last axis of 2 (torch.view_as_real's layout), with what real programs do with one:
`.real`, `.imag`, `.abs()`, `.angle()`, `.conj()`, `+ - * /` with spectra, real tensors and numbers, `sum`,
`mean`, indexing, `numpy()`, `torch.view_as_real`/`view_as_complex`/`real`/`imag`/`angle`/`conj`, and the
transforms. Each is composed of the side's ops, so gradients flow and a client records it. Anything else of
a complex tensor raises NotImplementedError saying why."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy

from engine.dtypes import scalar_name
from engine.tensor_arith import swap_named

NORMS = ("backward", "ortho", "forward")
DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}  # the scaling of the other direction


class ComplexUnsupported(NotImplementedError, AttributeError):
    """What a complex tensor lacks here (an AttributeError too, so `hasattr` reads False)."""


class ComplexView:
    """A complex tensor as its real view `parts`, [..., 2] (real, imaginary): torch.fft's spectra here."""

    __slots__ = ("parts",)
    side = None  # the package whose Variables `parts` are (set by `bind`)

    def __init__(self, parts):
        self.parts = parts

    def _new(self, real, imag=None):
        return type(self)(real if imag is None else self.side.stack([real, imag], -1))

    shape = property(lambda self: self.parts.shape[:-1])
    ndim = property(lambda self: self.parts.ndim - 1)
    real = property(lambda self: self.parts[..., 0])
    imag = property(lambda self: self.parts[..., 1])
    requires_grad = property(lambda self: self.parts.requires_grad)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def is_complex(self) -> bool:
        return True

    def abs(self):
        return swap_named(self.parts.norm(2, -1), "AbsBackward0")  # gradient 0 at 0, as torch's

    __abs__ = abs

    def angle(self):
        return swap_named(self.imag.atan2(self.real), "AngleBackward0")

    def conj(self):
        return self._new(self.real, -self.imag)

    def resolve_conj(self):
        return self

    def detach(self):
        return self._new(self.parts.detach())

    def numpy(self, *, force=False):
        """A complex NumPy array of the values (of a tensor that needs no gradient, as torch's, unless `force`)."""
        parts = self.parts.numpy(force=force)
        return parts[..., 0] + 1j * parts[..., 1]

    def _dims(self, dim):
        return None if dim is None else [d % max(self.ndim, 1) for d in ((dim,) if isinstance(dim, int) else dim)]

    def sum(self, dim=None, keepdim=False):
        if dim is None:
            return self._new(self.parts.reshape(-1, 2).sum(0))
        return self._new(self.parts.sum(self._dims(dim), keepdim))

    def mean(self, dim=None, keepdim=False):
        dims = range(self.ndim) if dim is None else self._dims(dim)
        return self.sum(dim, keepdim) / math.prod(self.shape[d] for d in dims)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        return self._new(self.parts[(*key, slice(None)) if any(k is Ellipsis for k in key) else key])

    def _parts_of(self, other):
        """(real, imaginary) of a spectrum or a complex number, (other, None) of a real tensor or number."""
        if isinstance(other, (ComplexView, complex)):
            return other.real, other.imag
        return other, None

    def _scaled(self, other):
        return other.unsqueeze(-1) if hasattr(other, "unsqueeze") else other

    def __mul__(self, other):
        c, d = self._parts_of(other)
        if d is None:
            return self._new(self.parts * self._scaled(c))
        a, b = self.real, self.imag
        return self._new(a * c - b * d, a * d + b * c)

    __rmul__ = __mul__

    def __add__(self, other):
        c, d = self._parts_of(other)
        real, imag = self.real + c, self.imag if d is None else self.imag + d
        return self._new(real, imag.expand(real.shape) if tuple(imag.shape) != tuple(real.shape) else imag)

    __radd__ = __add__

    def __neg__(self):
        return self._new(-self.parts)

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return -self + other

    def __truediv__(self, other):
        c, d = self._parts_of(other)
        if d is None:
            return self._new(self.parts / self._scaled(c))
        return self * (other.conj() if isinstance(other, ComplexView) else other.conjugate()) / (c * c + d * d)

    def __rtruediv__(self, other):
        return other * self.conj() / (self.real * self.real + self.imag * self.imag)

    def __array__(self, *args, **kwargs):
        raise TypeError(
            "a complex tensor (torch.fft's spectrum) is no array in gradserve: torch's functions take its real and "
            "imaginary parts (torch.view_as_real(z), z.real, z.imag) or call its methods (z.abs(), z.angle())"
        )

    def __repr__(self) -> str:
        return f"ComplexView(shape={list(self.shape)}, parts={self.parts!r})"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise ComplexUnsupported(
            f"a complex tensor (torch.fft's spectrum) has no .{name} in gradserve, which has no complex dtype: it "
            "holds real and imaginary parts (torch.view_as_real(z)) and has real, imag, abs, angle, conj, sum, mean, "
            "numpy, indexing and + - * /"
        )


def _norm(norm):
    if norm is None:
        return "backward"
    if norm not in NORMS:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return norm


def _plan(name, shape, s, dim, halved=False) -> tuple[list, list]:
    """(dims, sizes) of a transform of a signal of `shape`, with torch's defaults and errors: the last of dims
    is the halved one (`halved`: its size is 2 (m - 1) by default, of m bins)."""
    ndim = len(shape)
    if s is not None and dim is not None and len(s) != len(dim):
        raise RuntimeError("When given, dim and shape arguments must have the same length")
    if s is not None and len(s) > ndim:
        raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has {ndim} dimensions.")
    dim = list(range(ndim - len(s), ndim) if s is not None else range(ndim)) if dim is None else list(dim)
    if not dim:
        raise RuntimeError(f"{name} must transform at least one axis")
    if ndim == 0:
        raise IndexError(f"Dimension specified as {dim[0]} but tensor has no dimensions")
    for d in dim:
        if not -ndim <= d < ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {d})")
    dims = [d % ndim for d in dim]
    if len(set(dims)) != len(dims):
        raise RuntimeError("FFT dims must be unique")
    sizes = [shape[d] if s is None or s[i] == -1 else s[i] for i, d in enumerate(dims)]
    if halved and (s is None or s[-1] == -1):
        sizes[-1] = 2 * (shape[dims[-1]] - 1)
    for n in sizes:
        if n < 1:
            raise RuntimeError(f"Invalid number of data points ({n}) specified")
    return dims, sizes


def bind(ns) -> dict:
    """`fft` (torch.fft), `view_as_real`, `view_as_complex`, `real`, `imag`, `angle`, `conj` and `is_complex` for
    package `ns`."""

    class View(ComplexView):
        __slots__ = ()
        side = ns

    def real_signal(input, name):
        if isinstance(input, ComplexView):
            kind = "ComplexDouble" if input.parts.dtype == ns.float64 else "ComplexFloat"
            raise RuntimeError(f"{name} expects a real input tensor, but got {kind}")
        if input.dtype == ns.float16:
            raise RuntimeError("Unsupported dtype Half")
        return input if input.is_floating_point() else input.to(ns.get_default_dtype())

    def forward(name, input, s, dim, norm):
        x = real_signal(input, name)
        dims, sizes = _plan(name, tuple(x.shape), s, dim)
        return View(ns.fft_r2c(x, s=sizes, dim=dims, norm=_norm(norm)))

    def inverse(name, input, s, dim, norm):
        if isinstance(input, ComplexView):
            parts = input.parts
        else:
            real = real_signal(input, name)
            parts = ns.stack([real, ns.zeros_like(real)], -1)
        dims, sizes = _plan(name, tuple(parts.shape[:-1]), s, dim, halved=True)
        return ns.fft_c2r(parts, s=sizes, dim=dims, norm=_norm(norm))

    def spectrum(x, dims, sizes, norm):
        """The whole spectrum's parts of a real x: rfftn's half, the rest by its Hermitian symmetry (the bin
        at minus the frequency, conjugated)."""
        half, d, n = ns.fft_r2c(x, s=sizes, dim=dims, norm=norm), dims[-1], sizes[-1]
        if n - n // 2 - 1 == 0:
            return half
        rest = half.narrow(d, 1, n - n // 2 - 1).flip(d)
        if len(dims) > 1:
            rest = rest.flip(dims[:-1]).roll([1] * (len(dims) - 1), dims[:-1])
        return ns.cat([half, ns.stack([rest[..., 0], -rest[..., 1]], -1)], d)

    def whole(name, input, s, dim, norm, inverted=False):
        """fft, of real and complex inputs (twice the real transforms); inverted: ifft, the conjugate of the dual
        norm's fft of the conjugate."""
        norm = _norm(norm)
        if inverted:
            norm, input = DUAL[norm], conj(input)
        parts = [input.real, input.imag] if isinstance(input, ComplexView) else [real_signal(input, name)]
        dims, sizes = _plan(name, tuple(parts[0].shape), s, dim)
        out, *imag = [View(spectrum(x, dims, sizes, norm)) for x in parts]
        out = out + out._new(-imag[0].imag, imag[0].real) if imag else out
        return out.conj() if inverted else out

    def family(stem, run):
        """torch.fft's 1-d, 2-d and n-d spellings of one transform."""

        def one_d(input, n=None, dim=-1, norm=None):
            return run(stem, input, None if n is None else [n], [dim], norm)

        def two_d(input, s=None, dim=(-2, -1), norm=None):
            return run(stem + "2", input, s, dim, norm)

        def n_d(input, s=None, dim=None, norm=None):
            return run(stem + "n", input, s, dim, norm)

        for fn, name in ((one_d, stem), (two_d, stem + "2"), (n_d, stem + "n")):
            fn.__name__ = fn.__qualname__ = name
        return {stem: one_d, stem + "2": two_d, stem + "n": n_d}

    transforms = {
        "rfft": forward,
        "irfft": inverse,
        "fft": whole,
        "ifft": lambda name, input, s, dim, norm: whole(name, input, s, dim, norm, inverted=True),
        "hfft": lambda name, input, s, dim, norm: inverse(name, conj(input), s, dim, DUAL[_norm(norm)]),
        "ihfft": lambda name, input, s, dim, norm: forward(name, input, s, dim, DUAL[_norm(norm)]).conj(),
    }

    def frequencies(values, n, d, dtype, device, requires_grad):
        out = ns.tensor(values, dtype=dtype or ns.get_default_dtype(), device=device) * (1.0 / (n * d))
        return out.requires_grad_(requires_grad)

    def fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False):
        values = numpy.concatenate([numpy.arange((n + 1) // 2), numpy.arange(-(n // 2), 0)])
        return frequencies(values, n, d, dtype, device, requires_grad)

    def rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, requires_grad=False):
        return frequencies(numpy.arange(n // 2 + 1), n, d, dtype, device, requires_grad)

    def shifted(input, dim, half):
        if isinstance(input, ComplexView):
            return View(shifted(input.parts, input._dims(range(input.ndim) if dim is None else dim), half))
        dims = list(range(input.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
        return input.roll([half(input.shape[d]) for d in dims], dims) if dims else input

    def fftshift(input, dim=None):
        return shifted(input, dim, lambda n: n // 2)

    def ifftshift(input, dim=None):
        return shifted(input, dim, lambda n: (n + 1) // 2)

    def view_as_real(input):
        if not isinstance(input, ComplexView):
            raise RuntimeError("view_as_real is only supported for complex tensors")
        return input.parts

    def view_as_complex(input):
        if input.ndim == 0 or input.shape[-1] != 2:
            raise RuntimeError("Tensor must have a last dimension of size 2")
        return View(input)

    def complex(real, imag):
        """real + i imag, broadcast, as a ComplexView (both float32 or both float64)."""
        if not (real.is_floating_point() and imag.is_floating_point()):
            names = " and ".join(scalar_name(x.dtype) for x in (real, imag))
            raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got {names}")
        if real.dtype != imag.dtype:
            kinds = (scalar_name(real.dtype), scalar_name(imag.dtype))
            raise RuntimeError(
                "Expected object of scalar type {} but got scalar type {} for second argument".format(*kinds)
            )
        return View(ns.stack(ns.broadcast_tensors(real, imag), -1))

    def polar(abs, angle):
        """abs (cos angle + i sin angle)."""
        complex(abs, angle)  # (refused as complex is)
        return complex(abs * angle.cos(), abs * angle.sin())

    def real(input):
        return input.real if isinstance(input, ComplexView) else input

    def imag(input):
        if not isinstance(input, ComplexView):
            raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
        return input.imag

    def angle(input):
        return input.angle() if isinstance(input, ComplexView) else ns.where(input < 0, math.pi, input * 0)

    def conj(input):
        return input.conj() if isinstance(input, ComplexView) else input

    names = {name: fn for stem, run in transforms.items() for name, fn in family(stem, run).items()}
    names.update(fftfreq=fftfreq, rfftfreq=rfftfreq, fftshift=fftshift, ifftshift=ifftshift)
    return {
        "fft": SimpleNamespace(**names),
        **{f.__name__: f for f in (view_as_real, view_as_complex, real, imag, angle, conj, complex, polar)},
        "is_complex": lambda input: isinstance(input, ComplexView),
    }

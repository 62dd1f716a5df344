"""`torch.fft` on the engine, the embedded client and a live server (`torch_like`): values and gradients against
PyTorch in float64 for each transform and norm, odd and even lengths, n shorter and longer than the input, several
dims, real and complex inputs; spectra (`ComplexView`) in real programs; float32; and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_client_nn_optim import values


@pytest.fixture
def oracle():
    return pytest.importorskip("torch")


RNG = np.random.default_rng(11)
EVEN, ODD, GRID = RNG.standard_normal((3, 8)), RNG.standard_normal((2, 7)), RNG.standard_normal((2, 5, 6))


def _real(t, z):
    return t.view_as_real(z.resolve_conj())


def _complex(t, g):
    """A complex [2, 5, 3] tensor whose real and imaginary parts are g's."""
    return t.view_as_complex(g.reshape(2, 5, 3, 2))


CASES = {
    "rfft": lambda t, e, o, g: _real(t, t.fft.rfft(e)),
    "rfft_odd_ortho": lambda t, e, o, g: _real(t, t.fft.rfft(o, norm="ortho")),
    "rfft_forward_dim0": lambda t, e, o, g: _real(t, t.fft.rfft(e, dim=0, norm="forward")),
    "rfft_n_shorter": lambda t, e, o, g: _real(t, t.fft.rfft(e, n=5)),
    "rfft_n_longer": lambda t, e, o, g: _real(t, t.fft.rfft(o, n=12, norm="ortho")),
    "irfft": lambda t, e, o, g: t.fft.irfft(t.fft.rfft(e) * 0.5),
    "irfft_odd_n": lambda t, e, o, g: t.fft.irfft(t.view_as_complex(g[..., :2].contiguous()), n=9, norm="ortho"),
    "irfft_n_shorter_forward": lambda t, e, o, g: t.fft.irfft(t.view_as_complex(g[..., :2]), n=4, norm="forward"),
    "irfft_of_real": lambda t, e, o, g: t.fft.irfft(o, dim=0),
    "rfft2": lambda t, e, o, g: _real(t, t.fft.rfft2(g)),
    "rfft2_s": lambda t, e, o, g: _real(t, t.fft.rfft2(g, s=(4, 7), norm="ortho")),
    "irfft2": lambda t, e, o, g: t.fft.irfft2(t.fft.rfft2(g), s=(5, 6)),
    "rfftn_all": lambda t, e, o, g: _real(t, t.fft.rfftn(g, norm="forward")),
    "rfftn_dims": lambda t, e, o, g: _real(t, t.fft.rfftn(g, s=(3, 6), dim=(2, 0))),
    "irfftn_s": lambda t, e, o, g: t.fft.irfftn(t.fft.rfftn(g, dim=(0, 1)), s=(3, 4), dim=(1, 0), norm="ortho"),
    "irfftn_default": lambda t, e, o, g: t.fft.irfftn(t.view_as_complex(g[..., 2:4])),
    "power_spectrum": lambda t, e, o, g: t.fft.rfft(o).abs() ** 2 + t.fft.rfft(o).angle(),
    "convolution": lambda t, e, o, g: t.fft.irfft(t.fft.rfft(e) * t.fft.rfft(e.flip(1)), n=8),
    "spectrum_arithmetic": lambda t, e, o, g: _real(
        t, (t.fft.rfft(e) - 2.0 * t.fft.rfft(e.flip(0)).conj().resolve_conj()) / (t.fft.rfft(e) + 3.0) + e[:, :5]
    ),
    "spectrum_parts": lambda t, e, o, g: t.fft.rfft(e).real * t.fft.rfft(e).imag + t.fft.rfft(e).mean(0).real,
    "spectrum_shift": lambda t, e, o, g: _real(t, t.fft.fftshift(t.fft.rfft(o)[..., 1:], dim=-1)),
    "complex_functions": lambda t, e, o, g: (
        t.real(t.fft.rfft(o)) * t.imag(t.fft.rfft(o))
        + t.angle(t.fft.rfft(o))
        + t.view_as_real(t.conj(t.fft.rfft(o)).resolve_conj())[..., 1]
        + t.angle(o[:, :4] - 0.5)
        + t.real(o[:, 1:5])
    ),
    "fft_real": lambda t, e, o, g: _real(t, t.fft.fft(o)),
    "fft_n_longer_dim0": lambda t, e, o, g: _real(t, t.fft.fft(e, n=5, dim=0, norm="forward")),
    "fft_complex": lambda t, e, o, g: _real(t, t.fft.fft(_complex(t, g), n=5, norm="ortho")),
    "ifft_complex": lambda t, e, o, g: _real(t, t.fft.ifft(_complex(t, g), n=7)),
    "ifft_real_roundtrip": lambda t, e, o, g: t.fft.ifft(t.fft.fft(o) * o.flip(1)).real,
    "fft2_image": lambda t, e, o, g: t.fft.fftshift(t.fft.fft2(e)).abs().log1p(),
    "fftn_complex_s": lambda t, e, o, g: _real(t, t.fft.fftn(_complex(t, g), s=(3, 4), dim=(1, 0))),
    "ifft2_complex": lambda t, e, o, g: _real(t, t.fft.ifft2(_complex(t, g), norm="forward")),
    "ifftn_real": lambda t, e, o, g: _real(t, t.fft.ifftn(g, dim=(0, 2), norm="ortho")),
    "hfft": lambda t, e, o, g: t.fft.hfft(_complex(t, g)),
    "hfft_odd": lambda t, e, o, g: t.fft.hfft(_complex(t, g), n=7, dim=1, norm="ortho"),
    "hfftn_s": lambda t, e, o, g: (
        t.fft.hfftn(_complex(t, g), s=(4, 5), norm="forward") + t.fft.hfft2(_complex(t, g), s=(4, 5))
    ),
    "ihfft": lambda t, e, o, g: _real(t, t.fft.ihfft(o, n=6)),
    "ihfftn": lambda t, e, o, g: _real(t, t.fft.ihfftn(g, norm="ortho")) + _real(t, t.fft.ihfft2(g, norm="forward")),
    "shifts": lambda t, e, o, g: t.fft.fftshift(o) + t.fft.ifftshift(o, dim=(1,)) + t.fft.ifftshift(o).flip(0),
}


def _run(torch, name):
    e, o, g = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (EVEN, ODD, GRID))
    out = CASES[name](torch, e, o, g)
    (out * torch.arange(1.0, 1.0 + out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
    grads = [np.zeros(a.shape) if x.grad is None else values(x.grad) for a, x in ((EVEN, e), (ODD, o), (GRID, g))]
    return [values(out), *grads]


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(torch_like, oracle, name):
    for ours, theirs in zip(_run(torch_like, name), _run(oracle, name), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)


def test_frequencies_and_float32_match_torch(torch_like, oracle):
    for t in (torch_like, oracle):
        t.manual_seed(0)
    pairs = [
        (t.fft.fftfreq(7, 0.3), t.fft.fftfreq(8, dtype=t.float64), t.fft.rfftfreq(9, 2.0), t.fft.rfftfreq(6))
        for t in (torch_like, oracle)
    ]
    for ours, theirs in zip(*pairs, strict=True):
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_array_equal(values(ours), values(theirs))
    spectra = [t.view_as_real(t.fft.rfft(t.tensor(ODD, dtype=t.float32), norm="ortho")) for t in (torch_like, oracle)]
    assert str(spectra[0].dtype) == str(spectra[1].dtype) == "torch.float32"
    np.testing.assert_allclose(values(spectra[0]), values(spectra[1]), rtol=1e-5, atol=1e-6)
    ints = [t.fft.irfft(t.fft.rfft(t.arange(6))) for t in (torch_like, oracle)]
    assert str(ints[0].dtype) == "torch.float32"
    np.testing.assert_allclose(values(ints[0]), values(ints[1]), atol=1e-5)


ERRORS = {
    "half": (RuntimeError, "Unsupported dtype Half", lambda t, x: t.fft.rfft(x.half())),
    "zero_points": (RuntimeError, r"Invalid number of data points \(0\)", lambda t, x: t.fft.rfft(x, n=0)),
    "one_bin": (RuntimeError, r"Invalid number of data points \(0\)", lambda t, x: t.fft.irfft(t.fft.rfft(x)[..., :1])),
    "dim": (IndexError, r"range of \[-2, 1\], but got 2", lambda t, x: t.fft.rfft(x, dim=2)),
    "norm": (RuntimeError, 'Invalid normalization mode: "bad"', lambda t, x: t.fft.rfft(x, norm="bad")),
    "lengths": (RuntimeError, "must have the same length", lambda t, x: t.fft.rfftn(x, s=(4,), dim=(0, 1))),
    "unique": (RuntimeError, "FFT dims must be unique", lambda t, x: t.fft.rfftn(x, dim=(1, -1))),
    "complex_input": (RuntimeError, "rfft expects a real input tensor", lambda t, x: t.fft.rfft(t.fft.rfft(x))),
    "view_as_real": (RuntimeError, "only supported for complex tensors", lambda t, x: t.view_as_real(x)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_are_torchs(torch_like, oracle, name):
    kind, message, call = ERRORS[name]
    for t in (torch_like, oracle):
        with pytest.raises(kind, match=message):
            call(t, t.tensor(EVEN))


def test_what_a_spectrum_lacks_says_why(torch_like):
    from client.fft import rfft  # torch's module path on each side
    from engine.fft import irfft

    assert (rfft.__name__, irfft.__module__) == ("rfft", "engine.fft_functions")
    spectrum = torch_like.fft.rfft(torch_like.tensor(EVEN))
    assert spectrum.shape == (3, 5) and spectrum.is_complex() and not hasattr(spectrum, "exp")
    np.testing.assert_allclose(spectrum.numpy(), np.fft.rfft(EVEN), rtol=1e-6, atol=1e-5)
    with pytest.raises(NotImplementedError, match=r"has no \.exp in gradserve, which has no complex dtype"):
        spectrum.exp()
    with pytest.raises(TypeError, match=r"is no array in gradserve: .* call its methods \(z.abs\(\)"):
        torch_like.abs(spectrum)  # not an array of objects
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes"):
        torch_like.imag(spectrum.real)


def test_second_order_gradients_match_torch(torch_like, oracle):
    def run(t):
        x = t.tensor(ODD, dtype=t.float64, requires_grad=True)
        spectrum = t.fft.rfft(x * x, n=9, norm="ortho")
        energy = (spectrum.abs() ** 2).sum() + t.fft.irfft(spectrum, n=6).pow(3).sum()
        (first,) = t.autograd.grad(energy, x, create_graph=True)
        (first.sin().sum() + (first * x).sum()).backward()
        return values(first), values(x.grad)

    for ours, theirs in zip(run(torch_like), run(oracle), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-11)

"""`torch.nn.functional`'s other activations (re-exported by `engine.nn.functional`), composed of registry ops
as the rest of it is. Each piecewise function picks its pieces with `where` on PyTorch's comparisons, so the
gradient at a boundary is PyTorch's (hardtanh's and the shrinks' are 0 there, hardswish's (2x + 3) / 6 up to 3).
`rrelu` in training draws its slopes on the host from the package's generator (PyTorch's stream is not
reproduced)."""

from __future__ import annotations

import numpy

from engine.nn.sides import _applied, _ns, _softplus_of_negative
from engine.user_warnings import warn

__all__ = [
    "gumbel_softmax",
    "relu6",
    "hardtanh",
    "hardsigmoid",
    "hardswish",
    "hardshrink",
    "softshrink",
    "tanhshrink",
    "softsign",
    "logsigmoid",
    "mish",
    "selu",
    "celu",
    "glu",
    "softmin",
    "threshold",
    "prelu",
    "rrelu",
    "relu_",
    "elu_",
    "leaky_relu_",
    "hardtanh_",
    "threshold_",
    "rrelu_",
    "celu_",
    "selu_",
]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_SIXTH = float(numpy.float32(1.0 / 6.0))


def _hardtanh(input, min_val, max_val):
    ns = _ns(input)
    return ns.where(input <= min_val, min_val, ns.where(input >= max_val, max_val, input))


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """x clamped to [min_val, max_val], with a zero gradient outside the open interval."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _applied(_hardtanh, input, inplace, min_val, max_val)


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def _hardsigmoid(input):
    ns = _ns(input)  # the slope PyTorch's gradient takes, float32's 1/6, with the value of x / 6 + 1/2
    middle = input * _SIXTH + (input / 6 - input * _SIXTH).detach() + 0.5
    return ns.where(input <= -3, 0.0, ns.where(input >= 3, 1.0, middle))


def hardsigmoid(input, inplace=False):
    """x / 6 + 1 / 2 clamped to [0, 1]."""
    return _applied(_hardsigmoid, input, inplace)


def _hardswish(input):
    ns = _ns(input)
    return ns.where(input <= -3, 0.0, ns.where(input >= 3, input, input * (input + 3) / 6))


def hardswish(input, inplace=False):
    """x * hardsigmoid(x)."""
    return _applied(_hardswish, input, inplace)


def hardshrink(input, lambd=0.5):
    """x where |x| > lambd, else 0 (the Tensor method's)."""
    return input.hardshrink(lambd)


def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, else 0."""
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    ns = _ns(input)
    return ns.where(input > lambd, input - lambd, ns.where(input < -lambd, input + lambd, 0.0))


def tanhshrink(input):
    return input - input.tanh()


def softsign(input):
    return input / (input.abs() + 1)


def logsigmoid(input):
    """log(sigmoid(x)) = -log(1 + exp(-x)), stable both ways."""
    return -_softplus_of_negative(input)


def _mish(input):
    return input * _softplus_of_negative(-input).tanh()


def mish(input, inplace=False):
    """x * tanh(softplus(x))."""
    return _applied(_mish, input, inplace)


def _elu_of(input, alpha, scale, input_scale):
    ns = _ns(input)
    negative = ns.expm1(input.clamp(max=0) * input_scale) * (alpha * scale)
    return ns.where(input > 0, input * scale, negative)


def _elu(input, alpha, scale, input_scale, inplace):
    return _applied(_elu_of, input, inplace, alpha, scale, input_scale)


def selu(input, inplace=False):
    """scale * elu(x, alpha) with the self-normalising constants."""
    return _elu(input, _SELU_ALPHA, _SELU_SCALE, 1.0, inplace)


def celu(input, alpha=1.0, inplace=False):
    """x where x > 0, else alpha * (exp(x / alpha) - 1)."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _elu(input, alpha, 1.0, 1.0 / alpha, inplace)


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the halves of `dim`."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-input.ndim}, {input.ndim - 1}], but got {dim})"
        )
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.ndim} is size {size}")
    first, second = input.split(size // 2, dim)
    return first * second.sigmoid()


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + Gumbel noise) / tau) along `dim`, as PyTorch draws it (-log of Exponential(1) draws);
    `hard`: the one-hot of its maximum in the forward, the soft sample's gradient (straight-through)."""
    gumbels = -logits.new_empty(tuple(logits.shape)).exponential_().log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = _ns(logits).zeros_like(logits).scatter_(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-x) along `dim`."""
    if dtype is not None:
        input = input.to(dtype)
    if dim is None:
        warn(
            "Implicit dimension choice for softmin has been deprecated. Change the call to include dim=X as an argument."
        )
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return (-input).softmax(dim)


def _threshold(input, threshold, value):
    return _ns(input).where(input > threshold, input, value)


def threshold(input, threshold, value, inplace=False):
    """x where x > threshold, else value."""
    return _applied(_threshold, input, inplace, threshold, value)


def prelu(input, weight):
    """x where x > 0, else weight * x (the Tensor method's)."""
    return input.prelu(weight)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """leaky_relu with slope (lower + upper) / 2, or in training a slope drawn from U(lower, upper) per element."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    ns = _ns(input)
    if not training:
        slope = (lower + upper) / 2
    else:
        draws = ns.rand(tuple(input.shape), dtype=numpy.float64)
        slope = (draws * (upper - lower) + lower).to(input.dtype)
    return leaky_relu(input, slope, inplace)


def _leaky(input, negative_slope):
    return _ns(input).where(input > 0, input, input * negative_slope)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """x where x > 0, else negative_slope * x."""
    return _applied(_leaky, input, inplace, negative_slope)


def elu(input, alpha=1.0, inplace=False):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return _elu(input, alpha, 1.0, 1.0, inplace)


def relu_(input):
    return input.relu_()


def elu_(input, alpha=1.0):
    return elu(input, alpha, True)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, True)


def threshold_(input, threshold, value):
    return _applied(_threshold, input, True, threshold, value)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


def celu_(input, alpha=1.0):
    return celu(input, alpha, True)


def selu_(input):
    return selu(input, True)

"""`torch.nn.init`, written once for every Variable implementation: each function fills its tensor in
place under `no_grad()` (the tensor stays the same object, a leaf that requires grad if it was one) and
returns it, with PyTorch's formulas for the bounds and standard deviations.

Random values come from the `generator=` given (a `Generator`), else from the tensor's own package's
default generator (`engine.manual_seed`, `client.manual_seed`; NumPy's PCG64 on the host, see
`engine.random`), so the same seed initialises a model identically on the engine and on the client;
the values are drawn and scaled on the host and written in one assignment, so initialising a client
parameter sends nothing. The draws are not PyTorch's: a program seeded with `manual_seed` gets
gradserve's own reproducible values.
"""

from __future__ import annotations

import math
import warnings

import numpy

from engine.nn.functional import _ns

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity, param=None) -> float:
    """The recommended gain for `nonlinearity` (PyTorch's table; `param` is leaky_relu's negative slope)."""
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive_field = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _write(tensor, values):
    """tensor[...] = values (a host array), in place and outside autograd."""
    ns = _ns(tensor)
    with ns.no_grad():
        tensor.copy_(ns.as_tensor(numpy.asarray(values, dtype=numpy.float64), dtype=tensor.dtype))
    return tensor


def _draws(tensor, draw, generator):
    """float64 host draws of tensor's shape (`rand` or `randn`), from `generator` else its package's default one."""
    return getattr(_ns(tensor), draw)(tuple(tensor.shape), dtype=numpy.float64, generator=generator).numpy()


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Values drawn uniformly from [a, b)."""
    return _write(tensor, a + (b - a) * _draws(tensor, "rand", generator))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Values drawn from N(mean, std**2)."""
    return _write(tensor, mean + std * _draws(tensor, "randn", generator))


def constant_(tensor, val):
    return _write(tensor, numpy.full(tuple(tensor.shape), val, dtype=numpy.float64))


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def _empty(tensor) -> bool:
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-bound, bound) with bound = gain * sqrt(3 / fan) (He et al., 2015)."""
    if _empty(tensor):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std**2) with std = gain / sqrt(fan)."""
    if _empty(tensor):
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)

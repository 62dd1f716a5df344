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
from statistics import NormalDist

import numpy

from engine.nn.functional import _ns
from engine.nn.sides import _NAMESPACES
from engine.tensor_data import TensorData
from engine.user_warnings import warn
from engine.variable import Variable

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
    "trunc_normal_",
    "eye_",
    "dirac_",
    "orthogonal_",
    "sparse_",
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
    if isinstance(tensor, numpy.ndarray):  # a `.data` (`weights_init`'s `normal_(m.weight.data, 0.0, 0.02)`)
        tensor[...] = values
        return tensor
    ns = _ns(tensor)
    with ns.no_grad():
        tensor.copy_(ns.as_tensor(numpy.asarray(values, dtype=numpy.float64), dtype=tensor.dtype))
    return tensor


def _draws(tensor, draw, generator):
    """float64 host draws of tensor's shape (`rand` or `randn`), from `generator` else its package's default one
    (for a `.data`, its `owner`'s package: the engine's unless the client's)."""
    if isinstance(tensor, numpy.ndarray):
        ns = next(_NAMESPACES[c] for c in (getattr(tensor, "owner", None) or Variable).__mro__ if c in _NAMESPACES)
    else:
        ns = _ns(tensor)
    return getattr(ns, draw)(tuple(tensor.shape), dtype=numpy.float64, generator=generator).numpy()


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Values drawn uniformly from [a, b)."""
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}")
    return _write(tensor, a + (b - a) * _draws(tensor, "rand", generator))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Values drawn from N(mean, std**2)."""
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _write(tensor, mean + std * _draws(tensor, "randn", generator))


TensorData.uniform_ = lambda self, a=0.0, b=1.0: uniform_(self, a, b)  # `w.data.uniform_(-r, r)`
TensorData.normal_ = lambda self, mean=0.0, std=1.0: normal_(self, mean, std)


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
        warn("Initializing zero-element tensors is a no-op")
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


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std**2) truncated to [a, b], by PyTorch's method: uniform draws between the normal CDF's
    values at a and b, mapped back by its inverse."""
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values may be incorrect."
        )
    normal = NormalDist(mean, std)
    low, high = normal.cdf(a), normal.cdf(b)
    tiny = numpy.nextafter(0.0, 1.0)
    draws = numpy.clip(low + (high - low) * _draws(tensor, "rand", generator), tiny, 1 - tiny / 2)
    return _write(tensor, numpy.clip(numpy.vectorize(normal.inv_cdf, otypes=[float])(draws), a, b))


def eye_(tensor):
    """The identity matrix (2-D tensors only)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _write(tensor, numpy.eye(*tuple(tensor.shape)))


def dirac_(tensor, groups=1):
    """The Dirac delta of a convolution's weight (3-5 dimensions): each group's output channel d passes input
    channel d through at the kernel's centre, the others zero."""
    if tensor.ndim not in [3, 4, 5]:
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = sizes[0] // groups
    values, centre = numpy.zeros(sizes), tuple(size // 2 for size in sizes[2:])
    for g in range(groups):
        for d in range(min(per_group, sizes[1])):
            values[(g * per_group + d, d, *centre)] = 1
    return _write(tensor, values)


def _q_factor(a):
    """Q of a = QR (a tall, or a batch) with R's diagonal made non-negative (PyTorch's _make_orthogonal)."""
    q, r = numpy.linalg.qr(a)
    return q * numpy.sign(numpy.diagonal(r, axis1=-2, axis2=-1))[..., None, :]


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix, the tensor seen as rows x the rest (Saxe et al., 2013): the Q of a
    normal draw's QR decomposition, its signs fixed by R's diagonal, times gain."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if 0 in tuple(tensor.shape):
        return tensor
    rows = tensor.shape[0]
    flattened = _draws(tensor, "randn", generator).reshape(rows, -1)
    cols = flattened.shape[1]
    q = _q_factor(flattened.T if rows < cols else flattened)
    return _write(tensor, gain * (q.T if rows < cols else q).reshape(tuple(tensor.shape)))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """N(0, std**2) values with ceil(sparsity * rows) of each column's set to zero (2-D tensors only)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tuple(tensor.shape)
    values = std * _draws(tensor, "randn", generator)
    order = numpy.argsort(_draws(tensor, "rand", generator), axis=0)[: int(math.ceil(sparsity * rows))]
    values[order, numpy.arange(cols)] = 0
    return _write(tensor, values)


def _deprecated(function):
    new_name = function.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warn(f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new_name}`.", FutureWarning)
        return function(*args, **kwargs)

    deprecated_init.__name__ = old_name
    return deprecated_init


uniform, normal, constant, eye, dirac = map(_deprecated, (uniform_, normal_, constant_, eye_, dirac_))
xavier_uniform, xavier_normal = _deprecated(xavier_uniform_), _deprecated(xavier_normal_)
kaiming_uniform, kaiming_normal = _deprecated(kaiming_uniform_), _deprecated(kaiming_normal_)
orthogonal, sparse = _deprecated(orthogonal_), _deprecated(sparse_)

"""`torch.nn.functional`'s other normalisations and dropouts (re-exported by `engine.nn.functional`), composed of
registry ops: group, instance, RMS and local response normalisation in PyTorch's formulas (biased variances;
instance_norm's running statistics the batch's mean of each instance's, the variance unbiased, as PyTorch's
reshape onto batch_norm gives), and the dropouts that zero whole channels (`dropout1d/2d/3d`,
`feature_alpha_dropout`) or keep SELU's mean and variance (`alpha_dropout`), their masks drawn on the host from
the package's generator as `dropout`'s are (PyTorch's stream is not reproduced)."""

from __future__ import annotations

import math

import numpy

from engine.nn.sides import _applied, _moments, _moved, _ns, _standardised
from engine.user_warnings import warn

__all__ = [
    "group_norm",
    "instance_norm",
    "rms_norm",
    "local_response_norm",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "alpha_dropout",
    "feature_alpha_dropout",
]


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalises each of `num_groups` groups of channels (dimension 1) of each sample, then * weight + bias
    per channel."""
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    batch, channels = input.shape[:2]
    if channels % num_groups:
        raise RuntimeError(
            f"Expected number of channels in input to be divisible by num_groups, but got input of shape "
            f"{list(input.shape)} and num_groups={num_groups}"
        )
    _, centred, var = _moments(input.reshape((batch, num_groups, -1)), -1)
    out = (centred / (var + eps).sqrt()).reshape(tuple(input.shape))
    shape = (1, channels) + (1,) * (input.ndim - 2)
    out = out if weight is None else out * weight.reshape(shape)
    return out if bias is None else out + bias.reshape(shape)


def instance_norm(
    input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True, momentum=0.1, eps=1e-5
):
    """Normalises each channel of each sample over its spatial dimensions ([N, C, *]); with `use_input_stats`
    the running statistics (when given) move towards the batch's mean of the instances' (unbiased variances),
    else they normalise."""
    batch, channels = input.shape[:2]
    dims = tuple(range(2, input.ndim))
    shape = (1, channels) + (1,) * len(dims)
    if not use_input_stats:
        centred = input - running_mean.reshape(shape)
        return _standardised(centred, running_var.reshape(shape), eps, weight, bias, shape)
    count = math.prod(input.shape[2:])
    if count <= 1:
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size torch.Size({list(input.shape)})"
        )
    mean, centred, var = _moments(input, dims)
    per_instance = (batch, channels)
    instances_mean, instances_var = mean.detach().reshape(per_instance), var.detach().reshape(per_instance)
    _moved(running_mean, running_var, instances_mean.mean(0), instances_var.mean(0), count, momentum)
    return _standardised(centred, var, eps, weight, bias, shape)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x ** 2) + eps) over the last dimensions (`normalized_shape`), * weight; eps None: the dtype's
    machine epsilon."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.ndim < len(shape) or tuple(input.shape[input.ndim - len(shape) :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*{', '.join(map(str, shape))}], "
            f"but got input of size{list(input.shape)}"
        )
    if eps is None:
        eps = float(numpy.finfo(numpy.dtype(input.dtype)).eps)
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    out = input * ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """x / (k + alpha * mean of x ** 2 over `size` neighbouring channels) ** beta, the window zero-padded
    (size // 2 before, (size - 1) // 2 after) as PyTorch's."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality{' ' * 26}input (got {input.ndim} dimensions)")
    if input.numel() == 0:
        return input
    ns = _ns(input)
    batch, channels = input.shape[:2]
    squares = (input * input).reshape((batch, channels, -1))
    before, after = size // 2, (size - 1) // 2
    parts = [ns.zeros((batch, before, squares.shape[2]), dtype=input.dtype)] if before else []
    parts += [squares] + ([ns.zeros((batch, after, squares.shape[2]), dtype=input.dtype)] if after else [])
    padded = ns.cat(parts, 1) if len(parts) > 1 else squares
    total = padded[:, 0:channels]
    for shift in range(1, size):
        total = total + padded[:, shift : shift + channels]
    divisor = ((total / size).reshape(tuple(input.shape)) * alpha + k) ** beta
    return input / divisor


def _checked(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep(input, p, channelwise):
    """A float mask of input's dtype: 1 with probability 1 - p, per element or per (sample, channel)."""
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2) if channelwise else tuple(input.shape)
    return (_ns(input).rand(shape, dtype=numpy.float64) < 1.0 - p).to(input.dtype)


def _scaled(input, p):
    return input * 0.0 if p == 1.0 else input * (_keep(input, p, True) / (1.0 - p))


def _feature_dropout(input, p, training, inplace, unbatched_ndim=None):
    """Whole channels dropped; an input of `unbatched_ndim` dimensions is one sample."""
    _checked(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if input.ndim == unbatched_ndim:
        return _applied(lambda x: _scaled(x.unsqueeze(0), p).squeeze(0), input, inplace)
    return _applied(_scaled, input, inplace, p)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, L] (or [C, L]) with probability p, scaling the rest by 1 / (1 - p)."""
    _checked(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that dropout1d exists to "
            "provide channel-wise dropout on inputs with 1 spatial dimension, a channel dimension, and an optional "
            "batch dimension (i.e. 2D or 3D inputs)."
        )
    return _feature_dropout(input, p, training, inplace, 2)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, H, W] with probability p (a 3-d input is taken as [N, C, L] with
    PyTorch's warning)."""
    _checked(p)
    if input.ndim not in (3, 4):
        warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will result in an "
            "error in a future release. To retain the behavior and silence this warning, please use dropout "
            "instead. Note that dropout2d exists to provide channel-wise dropout on inputs with 2 spatial "
            "dimensions, a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs)."
        )
    if input.ndim == 3:
        warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is "
            "desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior will "
            "change in a future release to interpret the input as one without a batch dimension, i.e. shape "
            "(C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using dropout1d instead."
        )
    return _feature_dropout(input, p, training, inplace)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, D, H, W] (or [C, D, H, W]) with probability p."""
    _checked(p)
    if input.ndim not in (4, 5):
        warn(
            f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated and will result in an "
            "error in a future release. To retain the behavior and silence this warning, please use dropout "
            "instead. Note that dropout3d exists to provide channel-wise dropout on inputs with 3 spatial "
            "dimensions, a channel dimension, and an optional batch dimension (i.e. 4D or 5D inputs)."
        )
    return _feature_dropout(input, p, training, inplace, 4)


_SELU_NEGATIVE = 1.7580993408473766  # SELU's scale * alpha: the value a dropped unit takes is minus this


def _alpha_dropped(input, p, channelwise):
    if p == 1.0:
        return input * 0.0
    keep = _keep(input, p, channelwise)
    a = 1.0 / math.sqrt((_SELU_NEGATIVE * _SELU_NEGATIVE * p + 1) * (1 - p))
    return input * (keep * a) + ((keep - 1) * (_SELU_NEGATIVE * a) + _SELU_NEGATIVE * a * p)


def _alpha(input, p, training, inplace, channelwise):
    _checked(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    return _applied(_alpha_dropped, input, inplace, p, channelwise)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks: a dropped unit takes SELU's negative saturation, then an affine map keeps
    the mean and variance (training only)."""
    return _alpha(input, p, training, inplace, False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels (dimension 1)."""
    return _alpha(input, p, training, inplace, True)

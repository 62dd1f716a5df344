"""What every `torch.nn.functional` file shares: the namespace a Variable's class computes with (`register`,
`_ns`; engine.nn.functional's docstring explains), PyTorch's type names in messages, `inplace=True`, and the
loss reductions with their legacy `size_average`/`reduce` arguments."""

from __future__ import annotations

from engine.dtypes import scalar_name
from engine.user_warnings import warn

_NAMESPACES: dict = {}  # Variable class -> the package whose functions compute on it


def register(variable_class, namespace) -> None:
    """Make the functions compute on `variable_class` with `namespace`'s functions (its package)."""
    _NAMESPACES[variable_class] = namespace


def _ns(v):
    for cls in type(v).__mro__:
        namespace = _NAMESPACES.get(cls)
        if namespace is not None:
            return namespace
    raise TypeError(f"expected a Variable, got {type(v).__name__}")


def _type_name(dtype) -> str:
    return scalar_name(dtype)


def _applied(fn, input, inplace, *args):
    """fn(input, *args), or with `inplace` written into `input`, computed from a copy of it so that the
    values its gradient saved are not the ones overwritten (PyTorch's in-place activations backpropagate)."""
    if not inplace:
        return fn(input, *args)
    return input.copy_(fn(input.clone(), *args))


def _reduction(size_average, reduce, reduction) -> str:
    if size_average is not None or reduce is not None:  # PyTorch's legacy arguments
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "mean" if size_average and reduce else "sum" if reduce else "none"
        warn("size_average and reduce args will be deprecated, please use reduction='" + reduction + "' instead.")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _softplus_of_negative(x):
    """log(1 + exp(-x)) without overflow, its gradient -sigmoid(x) everywhere (also at 0)."""
    ns = _ns(x)
    positive = ns.log1p((-x.clamp(min=0)).exp())
    negative = ns.log1p(x.clamp(max=0).exp()) - x
    return ns.where(x > 0, positive, negative)


def _standardised(centred, var, eps, weight, bias, shape=None):
    out = centred / (var + eps).sqrt()
    if weight is not None:
        out = out * (weight if shape is None else weight.reshape(shape))
    if bias is not None:
        out = out + (bias if shape is None else bias.reshape(shape))
    return out


def _moved(running_mean, running_var, mean, var, count, momentum):
    """Running statistics moved towards a batch's `mean` and biased `var` of `count` values (the variance made
    unbiased), in place and unrecorded; either may be None."""
    with _ns(mean).no_grad():
        if running_mean is not None:
            running_mean.copy_(running_mean * (1 - momentum) + mean * momentum)
        if running_var is not None:
            running_var.copy_(running_var * (1 - momentum) + var * (count / (count - 1)) * momentum)


def _moments(input, dims):
    """(mean, input - mean, biased variance) over `dims`, kept as dimensions of size 1."""
    mean = input.mean(dims, keepdim=True)
    centred = input - mean
    return mean, centred, (centred * centred).mean(dims, keepdim=True)

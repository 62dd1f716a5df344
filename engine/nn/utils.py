"""`torch.nn.utils`: gradient clipping, parameters as one vector and `rnn` (`pad_sequence` and packed
sequences, in `engine.nn.packing`), written once for every Variable class (PyTorch's formulas, in its order of operations, on
the Variables' public methods); `fusion` (`engine.nn.fusion`), `stateless`, `parametrize`, `parametrizations`, `prune`
and the hook-based `weight_norm`/`spectral_norm` (`engine.nn.norm_hooks`) are their own files."""

from __future__ import annotations

import math
import types

import engine
from engine.nn.functional import _ns
from engine.nn.missing import missing
from engine.user_warnings import warn

__all__ = [
    "clip_grad_norm_",
    "clip_grad_norm",
    "clip_grad_value_",
    "get_total_norm",
    "clip_grads_with_norm_",
    "parameters_to_vector",
    "vector_to_parameters",
    "pad_sequence",
    "rnn",
    "fusion",
    "stateless",
    "parametrize",
    "parametrizations",
    "prune",
    "weight_norm",
    "remove_weight_norm",
    "spectral_norm",
    "remove_spectral_norm",
]
__getattr__ = missing("torch.nn.utils")


def _as_list(parameters) -> list:
    try:
        _ns(parameters)
    except TypeError:
        return list(parameters)
    return [parameters]


def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None
):
    """Scale the gradients in place by min(1, max_norm / (total norm + 1e-6)), the total norm being the
    `norm_type` norm of every gradient's norm ('inf': the largest |element|); returns the total norm."""
    generator = isinstance(parameters, types.GeneratorType)
    parameters = _as_list(parameters)
    if generator and not parameters:
        warn("`parameters` is an empty generator, no gradient clipping will occur.")
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:  # (PyTorch's tensor(0.); of the parameters' package when there are any)
        return (_ns(parameters[0]) if parameters else engine).tensor(0.0)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None):
    """clip_grad_norm_ under its deprecated name (the 0.3-era examples'), with PyTorch's FutureWarning."""
    warn(
        "`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.", FutureWarning
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None):
    """The `norm_type` norm of the tensors' norms (a 0-d tensor; tensor(0.) for none)."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return engine.tensor(0.0)
    ns = _ns(tensors[0])
    with ns.no_grad():
        total = ns.stack([g.norm(norm_type) for g in tensors]).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be "
            "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            "`error_if_nonfinite=False`"
        )
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm, foreach=None) -> None:
    """Scale the gradients in place by min(1, max_norm / (total_norm + 1e-6))."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if grads:
        with _ns(grads[0]).no_grad():
            coefficient = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coefficient)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient in place to [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    for p in _as_list(parameters):
        if p.grad is not None:
            with _ns(p).no_grad():
                p.grad.clamp_(min=-clip_value, max=clip_value)


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one vector."""
    parameters = list(parameters)
    return _ns(parameters[0]).cat([p.view(-1) for p in parameters])


def vector_to_parameters(vec, parameters) -> None:
    """Give the parameters, in order, the consecutive slices of `vec` (copied in under no_grad)."""
    try:
        ns = _ns(vec)
    except TypeError:
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}") from None
    pointer = 0
    with ns.no_grad():
        for param in parameters:
            size = param.numel()
            param.copy_(vec[pointer : pointer + size].view_as(param))
            pointer += size


from engine.nn import fusion as fusing  # noqa: E402
from engine.nn import packing  # noqa: E402
from engine.nn.packing import pad_sequence  # noqa: E402
from engine.nn.stateless import deprecated_functional_call  # noqa: E402

# torch.nn.utils.rnn, .fusion and .stateless
rnn = types.SimpleNamespace(**{k: getattr(packing, k) for k in packing.__all__})
fusion = types.SimpleNamespace(**{k: getattr(fusing, k) for k in fusing.__all__})
globals().update(vars(fusion))  # (torch.nn.utils.fuse_conv_bn_eval... too)
stateless = types.SimpleNamespace(functional_call=deprecated_functional_call)
from engine.nn import parametrizations, parametrize, prune  # noqa: E402  (torch.nn.utils.parametrize, ...)
from engine.nn.norm_hooks import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm  # noqa: E402

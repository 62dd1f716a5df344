"""`torch.nn.utils`: gradient clipping, parameters as one vector and `rnn.pad_sequence`, written once for every Variable class
(PyTorch's formulas, in its order of operations, on the Variables' public methods); `parametrize`, `parametrizations`
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
    "clip_grad_value_",
    "get_total_norm",
    "clip_grads_with_norm_",
    "parameters_to_vector",
    "vector_to_parameters",
    "pad_sequence",
    "rnn",
    "parametrize",
    "parametrizations",
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


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"):
    """torch.nn.utils.rnn.pad_sequence: tensors of shapes (L_i, *) padded with `padding_value` to the
    longest L and stacked, (L, B, *) or with `batch_first` (B, L, *); `padding_side` 'right' or 'left'."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    ns = _ns(sequences[0])
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        pad = (0, longest - s.shape[0]) if padding_side == "right" else (longest - s.shape[0], 0)
        padded.append(ns.nn.functional.pad(s, (0, 0) * (s.dim() - 1) + pad, value=padding_value))
    return ns.stack(padded, dim=0 if batch_first else 1)


rnn = types.SimpleNamespace(pad_sequence=pad_sequence)  # torch.nn.utils.rnn
from engine.nn import parametrizations, parametrize  # noqa: E402  (torch.nn.utils.parametrize, parametrizations)
from engine.nn.norm_hooks import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm  # noqa: E402

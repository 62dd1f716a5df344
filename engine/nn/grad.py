"""`torch.nn.grad`: the gradients of a convolution for its input and its weight, as functions (what custom
Functions that fuse a convolution call in their backward), written once for every Variable class as the
vector-Jacobian products of `nn.functional.conv{1,2,3}d` taken by the side's autograd."""

from __future__ import annotations

from engine.nn.functional import _ns


def _gradient(dims: int, for_input: bool):
    def gradient(shape_or_input, weight_or_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
        ns = _ns(grad_output)
        if for_input:  # (input_size, weight, grad_output)
            x, w = ns.zeros(tuple(shape_or_input), dtype=grad_output.dtype), weight_or_size.detach()
            wanted = x.requires_grad_(True)
        else:  # (input, weight_size, grad_output)
            x, w = shape_or_input.detach(), ns.zeros(tuple(weight_or_size), dtype=grad_output.dtype)
            wanted = w.requires_grad_(True)
        conv = getattr(ns.nn.functional, f"conv{dims}d")
        with ns.enable_grad():
            out = conv(x, w, None, stride, padding, dilation, groups)
            (result,) = ns.autograd.grad(out, wanted, grad_output)
        return result

    kind = "input" if for_input else "weight"
    gradient.__name__ = gradient.__qualname__ = f"conv{dims}d_{kind}"
    gradient.__doc__ = f"The gradient of conv{dims}d for its {kind}, given grad_output (PyTorch's arguments)."
    return gradient


conv1d_input, conv1d_weight = _gradient(1, True), _gradient(1, False)
conv2d_input, conv2d_weight = _gradient(2, True), _gradient(2, False)
conv3d_input, conv3d_weight = _gradient(3, True), _gradient(3, False)

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input", "conv3d_weight"]

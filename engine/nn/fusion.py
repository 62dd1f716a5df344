"""`torch.nn.utils.fusion`: a convolution or linear layer with the eval-mode BatchNorm after it folded into its
weight and bias (a deep copy; PyTorch's formulas, in its order), written once for every side."""

from __future__ import annotations

import copy

from engine.nn.sides import _ns

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def _fused(layer, bn, fuse, *extra):
    if layer.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(layer)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    stats = (bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    fused.weight, fused.bias = fuse(fused.weight, fused.bias, *stats, *extra)
    return fused


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """The convolution `conv` followed by `bn` (both in eval mode) as one convolution."""
    return _fused(conv, bn, fuse_conv_bn_weights, transpose)


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose: bool = False):
    """(weight, bias) Parameters of a convolution followed by a BatchNorm of these statistics."""
    ns = _ns(conv_w)
    weight_dtype = conv_w.dtype
    bias_dtype = conv_b.dtype if conv_b is not None else weight_dtype
    conv_b = ns.zeros_like(bn_rm) if conv_b is None else conv_b
    bn_w = ns.ones_like(bn_rm) if bn_w is None else bn_w
    bn_b = ns.zeros_like(bn_rm) if bn_b is None else bn_b
    bn_var_rsqrt = ns.rsqrt(bn_rv + bn_eps)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (len(conv_w.shape) - 2)
    fused_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).to(dtype=weight_dtype)
    fused_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).to(dtype=bias_dtype)
    return ns.nn.Parameter(fused_w, conv_w.requires_grad), ns.nn.Parameter(fused_b, conv_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """The linear layer `linear` followed by `bn` (both in eval mode) as one linear layer."""
    if not (linear.training or bn.training) and linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(
            "To fuse, linear.out_features == bn.num_features or bn.num_features == 1, "
            f"got linear.out_features={linear.out_features} and bn.num_features={bn.num_features}"
        )
    return _fused(linear, bn, fuse_linear_bn_weights)


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """(weight, bias) Parameters of a linear layer followed by a BatchNorm of these statistics."""
    ns = _ns(linear_w)
    weight_dtype = linear_w.dtype
    bias_dtype = linear_b.dtype if linear_b is not None else weight_dtype
    linear_b = ns.zeros_like(bn_rm) if linear_b is None else linear_b
    bn_scale = bn_w * ns.rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * bn_scale.unsqueeze(-1).to(dtype=weight_dtype)
    fused_b = ((linear_b - bn_rm) * bn_scale + bn_b).to(dtype=bias_dtype)
    return ns.nn.Parameter(fused_w, linear_w.requires_grad), ns.nn.Parameter(fused_b, linear_b.requires_grad)

"""The grad_fn names of `torch.nn.functional`'s results, PyTorch's: a function PyTorch runs as one node
(`gelu` GeluBackward0, `cross_entropy` NllLossBackward0, `linear` of a matrix AddmmBackward0) names its
result's node so (`engine.grad_fn_names.renamed`), where the engine's would be its last op's (MulBackward0).

`NAMES[function]` is the name, or a rule `(args, kwargs) -> name` of the call (None: the last op's name
is PyTorch's too, as for a weighted `mse_loss` or a `cross_entropy` with label smoothing). Left as their
last op's, as PyTorch does not run them as one node: the dropouts, kl_div, l1_loss, the distances and the
other losses PyTorch composes; not PyTorch's: `scaled_dot_product_attention` (its CPU kernel's
ScaledDotProductFlashAttentionForCpuBackward0), `bilinear` without bias.
"""

from __future__ import annotations

import functools

from engine.grad_fn_names import renamed


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _activation(base, inplace_suffix=0, inplace_at=None):
    """An activation's rule: `<base>Backward0`, its in-place form's `<base>Backward<inplace_suffix>`."""

    def rule(args, kwargs):
        inplace = kwargs.get("inplace") or inplace_at is not None and len(args) > inplace_at and args[inplace_at]
        return f"{base}Backward{inplace_suffix if inplace else 0}"

    return rule


def _in_place(base, suffix):
    return lambda args, kwargs: f"{base}Backward{suffix}"


def _unless_weighted(name, weight_at):
    return lambda args, kwargs: None if _arg(args, kwargs, weight_at, "weight") is not None else name


def _nll(input, reduction):
    if input.ndim <= 2:
        return "NllLossBackward0"
    return "ViewBackward0" if input.ndim == 3 and reduction == "none" else "NllLoss2DBackward0"


def _nll_loss(args, kwargs):
    return _nll(args[0] if args else kwargs["input"], _arg(args, kwargs, 6, "reduction", "mean"))


def _cross_entropy(args, kwargs):
    input, target = args[0] if args else kwargs["input"], _arg(args, kwargs, 1, "target")
    reduction = _arg(args, kwargs, 6, "reduction", "mean")
    if target.dtype.kind == "f":  # class probabilities
        return "DivBackward1" if reduction == "mean" else None
    return None if _arg(args, kwargs, 7, "label_smoothing", 0.0) else _nll(input, reduction)


def _linear(args, kwargs):
    input, bias = args[0] if args else kwargs["input"], _arg(args, kwargs, 2, "bias")
    return None if bias is None else "AddmmBackward0" if input.ndim == 2 else "ViewBackward0"


def _per_rank(base, offset=2):
    """`<base>{1,2,3}DBackward0` by the input's spatial dimensions (PyTorch's per-rank kernels)."""
    return lambda args, kwargs: f"{base}{(args[0] if args else kwargs['input']).ndim - offset}DBackward0"


_PADS = {"reflect": "ReflectionPad", "replicate": "ReplicationPad"}


def _pad(args, kwargs):
    pad, mode = _arg(args, kwargs, 1, "pad"), _arg(args, kwargs, 2, "mode", "constant")
    if mode == "constant":
        return "ConstantPadNdBackward0"
    return f"{_PADS[mode]}{len(pad) // 2}DBackward0" if mode in _PADS else "CopySlices"


_UPSAMPLED = {"linear": "Linear", "bilinear": "Bilinear", "bicubic": "Bicubic", "trilinear": "Trilinear"}


def _interpolate(args, kwargs):
    input, mode = args[0] if args else kwargs["input"], _arg(args, kwargs, 3, "mode", "nearest")
    spatial = input.ndim - 2
    if mode == "area":
        return "SqueezeBackward1" if spatial == 1 else f"AdaptiveAvgPool{spatial}DBackward0"
    kind = {"nearest": "Nearest", "nearest-exact": "NearestExact"}.get(mode) or _UPSAMPLED.get(mode)
    antialiased = "Aa" if _arg(args, kwargs, 6, "antialias", False) else ""
    return None if kind is None else f"Upsample{kind}{spatial}D{antialiased}Backward0"


def _lp_pool(args, kwargs):
    """PyTorch's lp_pool of norm_type inf is a max_pool (`MaxPool<n>DWithIndicesBackward0`; 1-d through a squeeze)."""
    input, norm = args[0] if args else kwargs["input"], _arg(args, kwargs, 1, "norm_type")
    if norm != float("inf"):
        return None
    spatial = input.ndim - 2
    return "SqueezeBackward1" if spatial == 1 else f"MaxPool{spatial}DWithIndicesBackward0"


def _unbatched(rank, name=None):
    """A convolution's rule: of an unbatched input, PyTorch's squeeze of the batched result."""
    return lambda args, kwargs: "SqueezeBackward1" if args[0].ndim == rank + 1 else name


def _reduced(name):
    """A loss PyTorch composes, ending in `name` when unreduced (its mean or sum's otherwise)."""
    return lambda args, kwargs: name if kwargs.get("reduction") == "none" else None


NAMES = {
    **{f"conv{n}d": _unbatched(n) for n in (1, 2, 3)},
    **{f"conv_transpose{n}d": _unbatched(n, "ConvolutionBackward0") for n in (1, 2, 3)},
    **dict.fromkeys(("adaptive_avg_pool1d", "adaptive_max_pool1d"), "SqueezeBackward1"),
    "adaptive_avg_pool2d": lambda args, kwargs: (  # (PyTorch's of a 1x1 output: a mean)
        "MeanBackward1" if _arg(args, kwargs, 1, "output_size") in (1, (1, 1), [1, 1]) else "AdaptiveAvgPool2DBackward0"
    ),
    "adaptive_avg_pool3d": lambda args, kwargs: (
        "MeanBackward1"
        if _arg(args, kwargs, 1, "output_size") in (1, (1,) * 3, [1] * 3)
        else "AdaptiveAvgPool3DBackward0"
    ),
    "adaptive_max_pool2d": "AdaptiveMaxPool2DBackward0",
    "adaptive_max_pool3d": "AdaptiveMaxPool3DBackward0",
    "batch_norm": "NativeBatchNormBackward0",
    "layer_norm": "NativeLayerNormBackward0",
    "group_norm": "NativeGroupNormBackward0",
    "instance_norm": "ViewBackward0",
    "binary_cross_entropy": "BinaryCrossEntropyBackward0",
    "binary_cross_entropy_with_logits": "BinaryCrossEntropyWithLogitsBackward0",
    "cross_entropy": _cross_entropy,
    "nll_loss": _nll_loss,
    "mse_loss": _unless_weighted("MseLossBackward0", 4),
    "huber_loss": _unless_weighted("HuberLossBackward0", 3),
    "smooth_l1_loss": lambda args, kwargs: (
        None if kwargs.get("weight") is not None or _arg(args, kwargs, 5, "beta", 1.0) == 0 else "SmoothL1LossBackward0"
    ),
    "soft_margin_loss": "SoftMarginLossBackward0",
    "multi_margin_loss": "MultiMarginLossBackward0",
    "multilabel_margin_loss": "MultilabelMarginLossBackward0",
    "margin_ranking_loss": _reduced("ClampMinBackward0"),
    **dict.fromkeys(("triplet_margin_loss", "triplet_margin_with_distance_loss"), _reduced("ClampMinBackward0")),
    "ctc_loss": _reduced("CtcLossBackward0"),
    "embedding": "EmbeddingBackward0",
    "embedding_bag": "EmbeddingBagBackward0",
    "linear": _linear,
    "pad": _pad,
    "interpolate": _interpolate,
    "grid_sample": _per_rank("GridSampler", 2),
    "pixel_shuffle": "PixelShuffleBackward0",
    "channel_shuffle": "ChannelShuffleBackward0",
    "max_unpool1d": "SqueezeBackward1",
    "max_unpool2d": "MaxUnpool2DBackward0",
    "max_unpool3d": "MaxUnpool3DBackward0",
    **dict.fromkeys(("lp_pool1d", "lp_pool2d", "lp_pool3d"), _lp_pool),
    "pixel_unshuffle": "PixelUnshuffleBackward0",
    "pairwise_distance": "NormBackward1",
    "pdist": "PdistBackward0",
    "softmin": "SoftmaxBackward0",
    "celu": _activation("Celu", 1, 2),
    "celu_": _in_place("Celu", 1),
    "elu": _activation("Elu", 1, 2),
    "elu_": _in_place("Elu", 1),
    "selu": _activation("Elu", 1, 1),
    "selu_": _in_place("Elu", 1),
    "leaky_relu": _activation("LeakyRelu", 1, 2),
    "leaky_relu_": _in_place("LeakyRelu", 1),
    "threshold": _activation("Threshold", 1, 3),
    "threshold_": _in_place("Threshold", 1),
    "rrelu": _activation("RreluWithNoise", 1, 4),
    "rrelu_": _in_place("RreluWithNoise", 1),
    **dict.fromkeys(("hardtanh", "hardtanh_", "relu6"), "HardtanhBackward0"),
    "hardshrink": "HardshrinkBackward0",
    "softshrink": "SoftshrinkBackward0",
    "hardsigmoid": "HardsigmoidBackward0",
    "hardswish": "HardswishBackward0",
    "logsigmoid": "LogSigmoidBackward0",
    "gelu": "GeluBackward0",
    "glu": "GluBackward0",
    "silu": "SiluBackward0",
    "mish": "MishBackward0",
    "softplus": "SoftplusBackward0",
    "prelu": "PreluKernelBackward0",
}


def named(function, name):
    """`function` giving its result's node PyTorch's `name` (a string, or a rule of the call: see `NAMES`)."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        before = [getattr(v, "grad_fn", None) for v in args]  # (an in-place form's input: its node changes)
        out = function(*args, **kwargs)
        given = name(args, kwargs) if callable(name) else name
        return out if given is None else renamed(out, given, before)

    return call


def name_all(namespace: dict) -> None:
    """Wrap the functions of `namespace` (torch.nn.functional's) that `NAMES` names."""
    for function, name in NAMES.items():
        if function in namespace:
            namespace[function] = named(namespace[function], name)

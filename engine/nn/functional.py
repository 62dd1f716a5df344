"""`torch.nn.functional` (`import engine as torch; F = torch.nn.functional`), written once for every
Variable implementation.

Each function is a composition of registry ops: it calls methods of its Variable arguments, and the
few module-level names it needs (`where`, `arange`, `full`, `rand`, `setitem`, `log1p`, `erf`...) from
the namespace the input belongs to (`register`: `engine` for the engine's Variables, `client` for the
client's). So on the engine they compute now, and on the client they record the registry's nodes,
which a server already knows: nothing here is per side. The registry primitives added for it are
`erf`, `log1p` and `expm1` (`engine.ops.special`).

Numerically stable forms: cross-entropy through `log_softmax` (log-sum-exp), softplus and the
logistic loss through `log1p(exp(-|x|))` with the exponent clamped so that neither branch of a
`where` overflows (an overflow in the branch not taken would still turn its zero gradient into nan).

Convolution and pooling (`conv1d/2d/3d`, `max_pool1d/2d/3d`, `avg_pool1d/2d/3d`, `adaptive_avg_pool2d`)
call the registry's composite ops of the same names (`engine.ops.conv`), so each is one node on the wire;
`unfold`/`fold` are its primitives `im2col`/`col2im`, and `conv_transpose1d/2d/3d` and `adaptive_avg_pool1d`
are composed here of those.

The other activations, the distances and other losses, the other normalisations and dropouts, and resampling
(interpolate, pad's non-constant modes, pixel_shuffle, bilinear, adaptive max pooling) are written in
`engine.nn.activations`, `losses`, `normalization` and `resampling` (`ctc_loss` in `ctc`), and re-exported here.

Not provided (a `NotImplementedError` naming it, `engine.nn.missing`): the rest of torch.nn.functional
(multi_head_attention_forward, adaptive 3-d pooling, multilabel_margin_loss, interpolate's cubic
modes and antialias...).
"""

from __future__ import annotations

import math

import numpy

from engine.mixed_precision import cast_functions
from engine.nn.activations import *  # noqa: F403  (relu6, prelu, mish...: the other activations)
from engine.nn.activations import __all__ as _activations
from engine.nn.activations import elu, leaky_relu
from engine.nn.bags import embedding_bag as embedding_bag  # (torch.nn.functional's, with embedding)
from engine.nn.bags import renormalised
from engine.nn.ctc import ctc_loss as ctc_loss  # (the recursion over time steps, in its own file)
from engine.nn.losses import *  # noqa: F403  (kl_div, cosine_similarity...: the distances and other losses)
from engine.nn.losses import __all__ as _losses
from engine.nn.missing import missing
from engine.nn.node_names import name_all
from engine.nn.normalization import *  # noqa: F403  (group_norm, dropout2d...: the other normalisations and dropouts)
from engine.nn.normalization import __all__ as _normalization
from engine.nn.pool_variants import *  # noqa: F403  (max_unpool2d, lp_pool2d, channel_shuffle)
from engine.nn.pool_variants import __all__ as _pool_variants
from engine.nn.resampling import *  # noqa: F403  (interpolate, pixel_shuffle...: resampling and rearranging)
from engine.nn.resampling import __all__ as _resampling
from engine.nn.resampling import interpolate, padded_by_index
from engine.nn.sides import (
    _applied,
    _moments,
    _moved,
    _ns,
    _reduce,
    _reduction,
    _softplus_of_negative,
    _standardised,
    _type_name,
)
from engine.nn.sides import register as register  # the sides register here (engine.nn, client.nn)
from engine.ops.windows import per_dim, windows
from engine.promotion import check_addmm
from engine.user_warnings import warn

__getattr__ = missing("torch.nn.functional")
__all__ = [
    "embedding_bag",
    "ctc_loss",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "softmax",
    "log_softmax",
    "relu",
    "leaky_relu",
    "elu",
    "gelu",
    "silu",
    "softplus",
    "tanh",
    "sigmoid",
    "one_hot",
    "embedding",
    "linear",
    "dropout",
    "scaled_dot_product_attention",
    "layer_norm",
    "batch_norm",
    "normalize",
    "pad",
    "upsample",
    "upsample_nearest",
    "upsample_bilinear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "unfold",
    "fold",
]
__all__ += _activations + _losses + _normalization + _resampling + _pool_variants
_INDEX_DTYPES = (numpy.dtype(numpy.int64), numpy.dtype(numpy.uint8))

# --- reductions ---------------------------------------------------------------------------------


def _warn_size(input, target):
    if tuple(target.shape) != tuple(input.shape):
        warn(
            f"Using a target size (torch.Size({list(target.shape)})) that is different to the input size "
            f"(torch.Size({list(input.shape)})). "
            "This will likely lead to incorrect results due to broadcasting. Please ensure they have the same size."
        )


# --- classification losses ----------------------------------------------------------------------


def _class_dim(input) -> int:
    return 0 if input.ndim == 1 else 1


def _check_weight(weight, classes, name="weight"):
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != classes):
        raise RuntimeError(
            f"{name} tensor should be defined either for all {classes} classes or no classes but got "
            f"{name} tensor of shape: {list(weight.shape)}"
        )


def _check_index_target(input, target):
    """nll_loss's checks of class-index targets (dtype, then shape), with PyTorch's messages."""
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    if input.ndim > 1 and (target.ndim == 0 or target.shape[0] != input.shape[0]):
        batch = "()" if target.ndim == 0 else target.shape[0]
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size ({batch}).")
    if input.ndim <= 2 and target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if numpy.dtype(target.dtype) not in _INDEX_DTYPES:
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_type_name(target.dtype)}")
    if input.ndim == 1 and target.ndim == 1 and target.shape[0] != 1:
        raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.shape[0]}")
    expected = tuple(input.shape[:1]) + tuple(input.shape[2:]) if input.ndim > 1 else tuple(target.shape)
    if tuple(target.shape) != expected:
        raise RuntimeError(f"Expected target size {list(expected)}, got {list(target.shape)}")


def _pick(input, target):
    """input[i, target[i], ...]: the entry of each target's class, in the target's shape."""
    ns = _ns(input)
    classes = input.shape[_class_dim(input)]
    if input.ndim > 2:  # classes last, then one row per target element
        input = input.permute((0, *range(2, input.ndim), 1))
    rows = input.reshape((-1, classes))
    flat = target.reshape((-1,))
    return rows[ns.arange(flat.shape[0]), flat].reshape(tuple(target.shape))


def _nll(input, target, weight, ignore_index):
    """(per-element losses with 0 where ignored, per-element weights with 0 where ignored)."""
    ns = _ns(input)
    kept = target != ignore_index
    safe = ns.class_targets(target, classes=input.shape[_class_dim(input)], ignore_index=ignore_index)
    weights = kept.to(input.dtype)
    if weight is not None:
        weights = weight[safe] * weights
    return -_pick(input, safe) * weights, weights, kept


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """The negative log likelihood of class-index targets given log-probabilities `input` [N, C, d...].

    `weight[c]` scales class c's terms, and the mean divides by the sum of the weights of the targets not
    equal to `ignore_index` (nan when every target is ignored), as in PyTorch."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_index_target(input, target)
    _check_weight(weight, input.shape[_class_dim(input)])
    losses, weights, _ = _nll(input, target, weight, ignore_index)
    if reduction == "mean":
        return losses.sum() / weights.sum()
    return _reduce(losses, reduction)


def _class_weight_view(weight, input):
    """weight [C] shaped to broadcast along input's class dimension."""
    shape = [1] * input.ndim
    shape[_class_dim(input)] = weight.shape[0]
    return weight.reshape(tuple(shape))


def cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index=-100,
    reduce=None,
    reduction="mean",
    label_smoothing=0.0,
):
    """Cross-entropy of logits `input` [N, C, d...] (or [C]) against class indices [N, d...] or class
    probabilities of input's shape, through `log_softmax`; PyTorch's semantics for `weight`,
    `ignore_index` (index targets only), `label_smoothing` and each `reduction`."""
    reduction = _reduction(size_average, reduce, reduction)
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    dim = _class_dim(input)
    classes = input.shape[dim]
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    logp = input.log_softmax(dim)
    if tuple(target.shape) == tuple(input.shape):
        return _cross_entropy_probabilities(logp, target, weight, reduction, label_smoothing, classes)
    _check_index_target(input, target)
    _check_weight(weight, classes)
    losses, weights, kept = _nll(logp, target, weight, ignore_index)
    total = weights.sum()
    loss = losses.sum() / total if reduction == "mean" else _reduce(losses, reduction)
    if label_smoothing <= 0.0:
        return loss
    spread = logp if weight is None else logp * _class_weight_view(weight, logp)
    smooth = -spread.sum(dim) * kept.to(input.dtype)
    if reduction == "mean":
        smooth = smooth.sum() / (total if weight is not None else kept.to(input.dtype).sum())
    else:
        smooth = _reduce(smooth, reduction)
    return loss * (1 - label_smoothing) + smooth * (label_smoothing / classes)


def _cross_entropy_probabilities(logp, target, weight, reduction, label_smoothing, classes):
    if target.dtype.kind != "f":
        raise RuntimeError(
            f"Expected floating point type for target with class probabilities, got {_type_name(target.dtype)}"
        )
    _check_weight(weight, classes)
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = logp * target
    if weight is not None:
        terms = terms * _class_weight_view(weight, logp)
    if reduction == "none":
        return -terms.sum(_class_dim(logp))
    total = -terms.sum()
    if reduction == "sum":
        return total
    batch = logp.numel() // classes if classes else 0
    return total / batch if batch else total * math.nan


# --- regression losses --------------------------------------------------------------------------


def _weighted(errors, weight, input, reduction):
    if weight is None:
        return _reduce(errors, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    weighted = errors * weight
    return weighted.sum() / weight.sum() if reduction == "mean" else _reduce(weighted, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """The squared error (input - target) ** 2, reduced (a `weight` mean divides by weight.sum())."""
    _warn_size(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    difference = input - target
    return _weighted(difference * difference, weight, input, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """The absolute error |input - target|, reduced (a `weight` mean divides by weight.sum())."""
    _warn_size(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted((input - target).abs(), weight, input, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """0.5 * d ** 2 / beta where |d| < beta, else |d| - 0.5 * beta (d = input - target); beta 0 is l1."""
    _warn_size(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    distance = (input - target).abs()
    if beta == 0:
        return _reduce(distance, reduction)
    difference = input - target
    quadratic = difference * difference * (0.5 / beta)
    return _reduce(_ns(input).where(distance < beta, quadratic, distance - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """0.5 * d ** 2 where |d| < delta, else delta * (|d| - 0.5 * delta) (d = input - target)."""
    _warn_size(input, target)
    difference = input - target
    distance = difference.abs()
    errors = _ns(input).where(distance < delta, difference * difference * 0.5, (distance - 0.5 * delta) * delta)
    if weight is not None:
        if tuple(weight.shape) != tuple(input.shape):
            raise ValueError("Weights and input must have the same size.")
        errors = errors * weight  # (a weighted mean stays the mean over elements)
    return _reduce(errors, _reduction(None, None, reduction))


def _log_clamped(x):
    """log(x) clamped to >= -100 as PyTorch's binary_cross_entropy does, with a zero gradient (not nan) at x == 0."""
    ns = _ns(x)
    positive = x > 0
    return ns.where(positive, ns.where(positive, x, 1.0).log(), -100.0).clamp(min=-100.0)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-(target * log(input) + (1 - target) * log(1 - input)), each log clamped to >= -100; `weight`
    scales each element (the mean stays the mean over elements)."""
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Using a target size (torch.Size({list(target.shape)})) that is different to the input size "
            f"(torch.Size({list(input.shape)})) is deprecated. Please ensure they have the same size."
        )
    input = _ns(input).probabilities(input)
    loss = -(target * _log_clamped(input) + (1 - target) * _log_clamped(1 - input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None
):
    """binary_cross_entropy(sigmoid(input), target) in the stable form (1 - t) * x + w_t * log(1 + exp(-x)),
    with w_t = 1 + (pos_weight - 1) * t; `weight` scales each element."""
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Target size (torch.Size({list(target.shape)})) must be the same as input size "
            f"(torch.Size({list(input.shape)}))"
        )
    softplus_neg = _softplus_of_negative(input)
    if pos_weight is not None:
        softplus_neg = softplus_neg * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# --- activations --------------------------------------------------------------------------------


def _softmax_dim(input, dim, name):
    if dim is not None:
        return dim
    warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.")
    return 0 if input.ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x)) along `dim` (stable); `dtype` casts the input first."""
    if dtype is not None:
        input = input.to(dtype)
    return input.softmax(_softmax_dim(input, dim, "softmax"))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """x - logsumexp(x) along `dim` (stable); `dtype` casts the input first."""
    if dtype is not None:
        input = input.to(dtype)
    return input.log_softmax(_softmax_dim(input, dim, "log_softmax"))


def relu(input, inplace=False):
    return input.relu_() if inplace else input.relu()


_SQRT_HALF = math.sqrt(0.5)
_SQRT_TWO_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(input, approximate="none"):
    """x * Phi(x) with erf (`approximate='none'`), or PyTorch's tanh approximation (`'tanh'`)."""
    ns = _ns(input)
    if approximate == "none":
        return input * 0.5 * (ns.erf(input * _SQRT_HALF) + 1)
    if approximate == "tanh":
        inner = (input + input * input * input * 0.044715) * _SQRT_TWO_OVER_PI
        return input * 0.5 * (inner.tanh() + 1)
    raise RuntimeError("approximate argument must be either none or tanh.")


def silu(input, inplace=False):
    """x * sigmoid(x)."""
    return _applied(lambda x: x * x.sigmoid(), input, inplace)


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    ns = _ns(input)
    scaled = input * beta
    smooth = ns.log1p(scaled.clamp(max=threshold).exp()) / beta
    return ns.where(scaled > threshold, input, smooth)


def tanh(input):
    return input.tanh()


def sigmoid(input):
    return input.sigmoid()


# --- encodings and layers -----------------------------------------------------------------------


def one_hot(tensor, num_classes=-1):
    """int64 [..., num_classes] with a one at each value's class (num_classes -1: the largest value + 1).
    The class values are checked, so a lazy client Variable's value is fetched."""
    if numpy.dtype(tensor.dtype) != numpy.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    values = numpy.asarray(tensor.numpy())
    if num_classes == -1:
        if values.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(values.max()) + 1
    if values.size and values.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if values.size and values.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return (tensor.unsqueeze(-1) == _ns(tensor).arange(num_classes)).to(numpy.int64)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """weight's rows at the integer indices `input` (gradients of repeated indices add up, or with
    scale_grad_by_freq are divided by the index's count in input); the row `padding_idx` gets no gradient."""
    if input.dtype.kind not in "iu":
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {_type_name(input.dtype)}Tensor instead (while checking arguments for embedding)"
        )
    if sparse:
        raise NotImplementedError("embedding: sparse is not supported")
    if max_norm is not None:
        renormalised(input, weight, max_norm, norm_type)
    data = getattr(input, "_data", None)  # (a client's computed index is checked where it is computed)
    try:
        if data is not None and data.size and data.min() < 0:  # (indexing would count from the end)
            raise IndexError
        rows = weight[input]
    except IndexError:
        raise IndexError("index out of range in self") from None  # (PyTorch's words)
    if scale_grad_by_freq:  # (a row's gradient over its count in input; share - share.detach() is exactly 0)
        share = rows / _ns(input).bincount(input.reshape(-1), minlength=weight.shape[0])[input].unsqueeze(-1)
        rows = share - share.detach() + rows.detach()
    if padding_idx is None:
        return rows
    count = weight.shape[0]
    if not -count <= padding_idx < count:
        raise AssertionError("Padding_idx must be within num_embeddings")
    padding_idx %= count
    return _ns(input).where((input != padding_idx).unsqueeze(-1), rows, weight.detach()[input])


def linear(input, weight, bias=None):
    """input @ weight.T + bias (weight [out_features, in_features])."""
    if bias is not None:
        check_addmm(bias.dtype, input.dtype, weight.dtype)
    out = input.matmul(weight.t())
    return out if bias is None else out + bias


def dropout(input, p=0.5, training=True, inplace=False, generator=None):
    """Zeroes each element with probability p and scales the rest by 1 / (1 - p) (training only). The
    mask is drawn from `generator` (a `Generator`), else from the package's default generator (`manual_seed`);
    it is drawn on the host, so the input's values are not needed (a lazy client input is not fetched)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    ns = _ns(input)
    if p == 1.0:
        return _applied(lambda x: x * 0.0, input, inplace)
    keep = ns.rand(tuple(input.shape), dtype=numpy.float64, generator=generator) < 1.0 - p
    return _applied(lambda x: x * (keep.to(x.dtype) / (1.0 - p)), input, inplace)


def _safe_softmax(scores):
    """softmax over the last dimension, with zeros (not nan) in the rows whose every score is -inf."""
    ns = _ns(scores)
    attended = (scores != -math.inf).any(-1, keepdim=True)
    return ns.where(attended, ns.where(attended, scores, 0.0).softmax(-1), 0.0)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    """softmax(query @ key^T * scale + bias) @ value over [..., L, E] queries and [..., S, E] keys, as
    PyTorch's math kernel: a bool `attn_mask` lets the True pairs take part, a float one is added,
    `is_causal` keeps the lower triangle (top-left aligned), a row with nothing to attend gives zeros;
    `dropout_p` drops weights whenever given (the function has no training flag); `enable_gqa` repeats each
    key and value head for its group of query heads (dimension -3)."""
    ns = _ns(query)
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        if query.shape[-3] % key.shape[-3]:
            raise RuntimeError("Number of heads in key and value must divide the number of heads in query")
        group = query.shape[-3] // key.shape[-3]

        def repeated(t):
            wide = t.unsqueeze(-3).expand((*t.shape[:-2], group, *t.shape[-2:]))
            return wide.reshape((*t.shape[:-3], t.shape[-3] * group, *t.shape[-2:]))

        key, value = repeated(key), repeated(value)
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-2, -1)) * factor
    if is_causal:
        attn_mask = ns.tensor(numpy.tril(numpy.ones((query.shape[-2], key.shape[-2]), dtype=bool)))
    if attn_mask is None:
        weights = scores.softmax(-1)
    else:
        scores = ns.where(attn_mask, scores, -math.inf) if attn_mask.dtype.kind == "b" else scores + attn_mask
        weights = _safe_softmax(scores)
    return dropout(weights, dropout_p).matmul(value)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over the last dimensions (`normalized_shape`), then * weight + bias."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.ndim < len(shape) or tuple(input.shape[input.ndim - len(shape) :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, {', '.join(map(str, shape))}], "
            f"but got input of size{list(input.shape)}"
        )
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    mean = input.mean(dims, keepdim=True)
    centred = input - mean
    return _standardised(centred, (centred * centred).mean(dims, keepdim=True), eps, weight, bias)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalises each channel (dim 1) over the batch and the other dimensions. Training: by the batch's
    mean and biased variance, and `running_mean`/`running_var` (when given) become
    (1 - momentum) * running + momentum * batch statistic (the unbiased variance) in place; else by them."""
    if input.ndim < 2:
        raise ValueError(f"expected 2D or more input (got {input.ndim}D input)")
    channels = input.shape[1]
    shape = (1, channels) + (1,) * (input.ndim - 2)
    dims = (0, *range(2, input.ndim))
    for name, given in (
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if given is not None and given.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {given.numel()}")
    if training:
        count = input.numel() // channels
        if count <= 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size torch.Size({list(input.shape)})"
            )
        mean, centred, var = _moments(input, dims)
        flat = (channels,)
        _moved(running_mean, running_var, mean.detach().reshape(flat), var.detach().reshape(flat), count, momentum)
        return _standardised(centred, var, eps, weight, bias, shape)
    if running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    if running_var is None:
        raise RuntimeError("running_var must be defined in evaluation mode")
    return _standardised(input - running_mean.reshape(shape), running_var.reshape(shape), eps, weight, bias, shape)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input / max(||input||_p along dim, eps)."""
    result = input / input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)
    if out is None:
        return result
    out.copy_(result)
    return out


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """`interpolate` under its deprecated name (PyTorch's warning too), as are `upsample_nearest` and
    `upsample_bilinear` (align_corners=True)."""
    warn(_DEPRECATED.format("upsample"))
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    warn(_DEPRECATED.format("upsample_nearest"))
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    warn(_DEPRECATED.format("upsample_bilinear"))
    return interpolate(input, size, scale_factor, "bilinear", True)


_DEPRECATED = "`nn.functional.{}` is deprecated. Use `nn.functional.interpolate` instead."


def pad(input, pad, mode="constant", value=None):
    """Pads (or, with negative amounts, crops) the last dimensions: `pad` is (left, right) of the last
    dimension, then of the one before, ... as in PyTorch: mode 'constant' (fill `value`, 0 by default), or
    'reflect', 'replicate' or 'circular' (`engine.nn.resampling`)."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but got padding length "
            f"{len(pad)} and input of dimension {input.ndim}"
        )
    if mode != "constant":
        return padded_by_index(input, pad, mode, value)
    ns = _ns(input)
    crop, place, shape = [slice(None)] * input.ndim, [slice(None)] * input.ndim, list(input.shape)
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        size = shape[d] + before + after
        if size < 0:
            raise RuntimeError(
                f"The input size {input.shape[d]}, plus negative padding {before} and {after} resulted in a negative "
                f"output size, which is invalid. Check dimension {d} of your input."
            )
        kept = input.shape[d] - max(-before, 0) - max(-after, 0)
        crop[d] = slice(max(-before, 0), max(-before, 0) + max(kept, 0))
        place[d] = slice(max(before, 0), max(before, 0) + max(kept, 0))
        shape[d] = size
    cropped = input[tuple(crop)]
    fill = 0 if value is None else value
    base = ns.full((), fill, dtype=input.dtype).expand(tuple(shape))
    return ns.setitem(base, cropped, tuple(place))


# --- convolution and pooling --------------------------------------------------------------------


def _inputs(input, weight, bias):
    return [input, weight] if bias is None else [input, weight, bias]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d cross-correlation of [N, C_in, L] (or [C_in, L]) with weight [C_out, C_in / groups, k], plus bias;
    padding an int, a 1-tuple, 'valid' or 'same'."""
    ns = _ns(input)
    return ns.conv1d(_inputs(input, weight, bias), stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation of [N, C_in, H, W] (or [C_in, H, W]) with weight [C_out, C_in / groups, kh, kw],
    plus bias; padding an int, a pair, 'valid' or 'same'."""
    ns = _ns(input)
    return ns.conv2d(_inputs(input, weight, bias), stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-d cross-correlation of [N, C_in, D, H, W] (or [C_in, D, H, W]) with weight [C_out, C_in / groups, kd, kh,
    kw], plus bias; padding an int, a triple, 'valid' or 'same'."""
    ns = _ns(input)
    return ns.conv3d(_inputs(input, weight, bias), stride=stride, padding=padding, dilation=dilation, groups=groups)


def _conv_transpose(nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    """col2im of the weight's transpose times the input: the adjoint of a convolution with the same weight."""
    name = f"conv_transpose{nd}d"
    if weight.ndim != nd + 2:
        raise RuntimeError(f"{name}: expected a {nd + 2}-d weight, got weight of size {list(weight.shape)}")
    unbatched = input.ndim == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    if input.ndim != nd + 2:
        raise RuntimeError(f"{name}: expected a {nd + 1}-d or {nd + 2}-d input, got input of size {list(input.shape)}")
    batch, channels = input.shape[:2]
    in_channels, per_group, *kernel = weight.shape
    if channels != in_channels or in_channels % groups:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(weight.shape)}, expected input{list(input.shape)} "
            f"to have {in_channels} channels, but got {channels} channels instead"
        )
    stride, padding, dilation, output_padding = (
        per_dim(value, nd, what, name)
        for value, what in (
            (stride, "stride"),
            (padding, "padding"),
            (dilation, "dilation"),
            (output_padding, "output_padding"),
        )
    )
    for extra, s, d in zip(output_padding, stride, dilation):
        if extra >= s and extra >= d:
            raise RuntimeError(f"{name}: output padding must be smaller than either stride or dilation")
    sizes = input.shape[2:]
    out = tuple(
        (i - 1) * s - 2 * p + d * (k - 1) + e + 1
        for i, s, p, d, k, e in zip(sizes, stride, padding, dilation, kernel, output_padding)
    )
    taps = math.prod(kernel)
    rows = in_channels // groups
    w = weight.reshape((groups, rows, per_group * taps)).transpose(1, 2)
    x = input.reshape((batch, groups, rows, math.prod(sizes)))
    cols = w.matmul(x).reshape((batch, groups * per_group * taps, math.prod(sizes)))
    ns = _ns(input)
    result = ns.col2im(
        cols, output_size=out, kernel_size=tuple(kernel), dilation=dilation, padding=padding, stride=stride
    )
    if bias is not None:
        result = result + bias.reshape((-1,) + (1,) * nd)
    return result.squeeze(0) if unbatched else result


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 1-d convolution of [N, C_in, L] with weight [C_in, C_out / groups, k], plus bias."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 2-d convolution of [N, C_in, H, W] with weight [C_in, C_out / groups, kh, kw], plus bias."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """The transposed 3-d convolution of [N, C_in, D, H, W] with weight [C_in, C_out / groups, kd, kh, kw], plus bias."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


def _max_pool(nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    ns = _ns(input)
    pooled = getattr(ns, f"max_pool{nd}d")(
        input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode
    )
    if not return_indices:
        return pooled
    return pooled, _max_indices(nd, input, kernel_size, stride, padding, dilation, ceil_mode).reshape(
        tuple(pooled.shape)
    )


def _max_indices(nd, input, kernel_size, stride, padding, dilation, ceil_mode):
    """The flat spatial index in the input of each window's first maximum (int64), as PyTorch's return_indices."""
    ns = _ns(input)
    batched = input if input.ndim == nd + 2 else input.unsqueeze(0)
    sizes = tuple(batched.shape[2:])
    w = windows(
        f"max_pool{nd}d", sizes, kernel_size, dilation, padding, kernel_size if stride is None else stride, ceil_mode
    )
    pads = [amount for b, a in zip(reversed(w.before), reversed(w.after)) for amount in (b, a)]
    geometry = {"kernel_size": w.kernel, "dilation": w.dilation, "stride": w.stride}
    values = ns.im2col(pad(batched.detach(), pads, value=-math.inf), **geometry)
    positions = ns.arange(math.prod(sizes)).reshape((1, 1, *sizes))
    positions = ns.im2col(pad(positions, pads, value=-1), **geometry).reshape((1, 1, w.taps, w.count))
    batch, channels = batched.shape[:2]
    values = values.reshape((batch, channels, w.taps, w.count))
    taps = ns.arange(w.taps).reshape((1, 1, w.taps, 1))
    nan = values != values
    last_nan = ns.where(nan, taps, -1).amax(2, keepdim=True)  # PyTorch's pick: the first maximum, or the last nan
    first = ns.where(last_nan >= 0, last_nan, values.argmax(2, keepdim=True))
    chosen = taps == first
    return (positions * chosen.long()).sum(2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Each window's maximum over [N, C, L] (or [C, L]); with return_indices also its flat index in the input."""
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Each window's maximum over [N, C, H, W] (or [C, H, W]); with return_indices also its flat index
    (h * W + w) in the input. The gradient goes to each window's first maximum, as in PyTorch."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Each window's maximum over [N, C, D, H, W] (or [C, D, H, W]); with return_indices also its flat index
    ((d * H + h) * W + w) in the input."""
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Each window's mean over [N, C, L] (or [C, L]), with PyTorch's divisors."""
    return _ns(input).avg_pool1d(
        input,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
    )


def avg_pool2d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """Each window's mean over [N, C, H, W] (or [C, H, W]), with PyTorch's divisors."""
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """Each window's mean over [N, C, D, H, W] (or [C, D, H, W]), with PyTorch's divisors."""
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _avg_pool(nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return getattr(_ns(input), f"avg_pool{nd}d")(
        input,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor_override,
    )


def adaptive_avg_pool2d(input, output_size):
    """Average pooling of [N, C, H, W] (or [C, H, W]) to `output_size` (None keeps that input size)."""
    sizes = (output_size, output_size) if output_size is None or isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != 2:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be 2, got {len(sizes)}")
    if input.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(input.shape)}")
    sizes = tuple(input.shape[input.ndim - 2 + i] if s is None else s for i, s in enumerate(sizes))
    return _ns(input).adaptive_avg_pool2d(input, output_size=sizes)


def adaptive_avg_pool1d(input, output_size):
    """Average pooling of [N, C, L] (or [C, L]) to `output_size` windows."""
    (size,) = per_dim(output_size, 1, "output_size", "adaptive_avg_pool1d")
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, size)).squeeze(-2)


def adaptive_avg_pool3d(input, output_size):
    """Average pooling of [N, C, D, H, W] (or [C, D, H, W]) to `output_size` (None keeps that input size): its
    windows are separable, so each (H, W) plane is pooled, then the depth, by adaptive_avg_pool2d."""
    sizes = (output_size,) * 3 if output_size is None or isinstance(output_size, int) else tuple(output_size)
    if input.ndim not in (4, 5) or len(sizes) != 3:
        what = f"Expected 4D or 5D tensor, but got {list(input.shape)}" if len(sizes) == 3 else "output_size must be 3"
        raise RuntimeError(f"adaptive_avg_pool3d{'(): ' if len(sizes) == 3 else ': '}{what}")
    d, h, w = (input.shape[input.ndim - 3 + i] if s is None else s for i, s in enumerate(sizes))
    planes = adaptive_avg_pool2d(input.reshape((-1, *input.shape[-2:])), (h, w))
    columns = adaptive_avg_pool2d(planes.reshape((-1, input.shape[-3], h * w)), (d, h * w))
    return columns.reshape((*input.shape[:-3], d, h, w))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding windows of [N, C, *spatial] as columns [N, C * prod(kernel_size), windows] (registry: im2col)."""
    return _ns(input).im2col(input, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Columns [N, C * prod(kernel_size), windows] summed back into [N, C, *output_size] (registry: col2im)."""
    return _ns(input).col2im(
        input, output_size=output_size, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride
    )


name_all(globals())  # their results' nodes named as PyTorch's (engine.nn.node_names)
cast_functions(globals())  # the functions torch.autocast runs in float16 or float32 (engine.amp)

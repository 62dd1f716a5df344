"""`torch.nn.functional`'s distances and its other losses (re-exported by `engine.nn.functional`), composed of
registry ops in PyTorch's formulas: the same pieces (its `eps` terms, `clamp_min` where it clamps, `where` where it
masks), so values and gradients agree with it also at the edges (a zero distance, a hinge at its margin)."""

from __future__ import annotations

import math

import numpy

from engine.nn.sides import _ns, _reduce, _reduction, _softplus_of_negative, _type_name
from engine.user_warnings import warn

__all__ = [
    "cosine_similarity",
    "pairwise_distance",
    "pdist",
    "kl_div",
    "margin_ranking_loss",
    "hinge_embedding_loss",
    "soft_margin_loss",
    "cosine_embedding_loss",
    "poisson_nll_loss",
    "gaussian_nll_loss",
    "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
    "multilabel_soft_margin_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
]


def _broadcast(*tensors):
    shape = numpy.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return [t if tuple(t.shape) == shape else t.expand(shape) for t in tensors]


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along `dim` (the inputs broadcast first)."""
    x1, x2 = _broadcast(x1, x2)
    n1 = x1.norm(2, dim, keepdim=True).clamp(min=eps)
    n2 = x2.norm(2, dim, keepdim=True).clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p along the last dimension."""
    ndim = max(x1.ndim, x2.ndim)
    difference = x1 - x2 + eps
    return difference.norm(p, ndim - 1 if ndim else None, keepdim=keepdim)


def pdist(input, p=2):
    """The p-norm distances between the rows of [N, M] input, for each pair i < j in row-major order."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    ns = _ns(input)
    first, second = numpy.triu_indices(input.shape[0], 1)
    return (input[ns.tensor(first)] - input[ns.tensor(second)]).norm(p, 1)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target * (log(target) - input) (0 where target is 0), or with `log_target` exp(target) * (target - input);
    'batchmean' divides the sum by the batch size, 'mean' (which warns, as PyTorch does) by every element."""
    if size_average is not None or reduce is not None:
        reduction = _reduction(size_average, reduce, "mean")
    elif reduction == "mean":
        warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support size."
            "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
            "'mean' will be changed to behave the same as 'batchmean' in the next major release."
        )
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        ns = _ns(input)
        present = target != 0
        loss = ns.where(present, target * ns.where(present, target, 1.0).log(), 0.0) - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


def _same_dims(name, **tensors):
    if len({t.ndim for t in tensors.values()}) > 1:
        sizes = ", ".join(f"{key}: torch.Size({list(t.shape)})" for key, t in tensors.items())
        raise RuntimeError(f"{name} : All input tensors should have same dimension but got sizes: {sizes} ")


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """max(0, -target * (input1 - input2) + margin)."""
    reduction = _reduction(size_average, reduce, reduction)
    _same_dims("margin_ranking_loss", input1=input1, input2=input2, target=target)
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """x where target is 1, max(0, margin - x) where it is -1 (PyTorch's sum of both masks elsewhere)."""
    reduction = _reduction(size_average, reduce, reduction)
    ns = _ns(input)
    beyond = ns.where(target != 1, (-input + margin).clamp(min=0), 0.0)
    return _reduce(beyond + ns.where(target != -1, input, 0.0), reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-target * input)), without overflow."""
    reduction = _reduction(size_average, reduce, reduction)
    return _reduce(_softplus_of_negative(input * target), reduction)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1 (cos along the last
    dimension, each squared norm + 1e-12 as in PyTorch)."""
    reduction = _reduction(size_average, reduce, reduction)
    if target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if not input1.ndim == input2.ndim == target.ndim + 1:
        raise RuntimeError(
            f"{target.ndim}D target tensor expects {target.ndim + 1}D input tensors, but found inputs with sizes "
            f"{list(input1.shape)} and {list(input2.shape)}."
        )
    dim = input1.ndim - 1
    ns = _ns(input1)
    products = (input1 * input2).sum(dim)
    squares = ((input1 * input1).sum(dim) + 1e-12) * ((input2 * input2).sum(dim) + 1e-12)
    cos = products / squares.sqrt()
    loss = ns.where(target == 1, -cos + 1, 0.0) + ns.where(target == -1, (cos - margin).clamp(min=0), 0.0)
    return _reduce(loss, reduction)


def poisson_nll_loss(
    input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None, reduction="mean"
):
    """exp(input) - target * input (`log_input`), else input - target * log(input + eps); `full` adds Stirling's
    target * log(target) - target + log(2 pi target) / 2 where target > 1."""
    reduction = _reduction(size_average, reduce, reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        ns = _ns(input)
        large = target > 1
        safe = ns.where(large, target, 1.0)
        stirling = safe * safe.log() - safe + (safe * (2 * math.pi)).log() * 0.5
        loss = loss + ns.where(large, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """(log(max(var, eps)) + (input - target) ** 2 / max(var, eps)) / 2 (+ log(2 pi) / 2 with `full`); var the
    input's shape, or one dimension short or of size 1 there (one variance shared). The clamp to eps is not
    differentiated, as in PyTorch; the check that no variance is negative reads var's values."""
    ns = _ns(input)
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = ns.full(tuple(input.shape), float(var), dtype=input.dtype)
    elif bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif input.ndim != var.ndim or sum(v for i, v in zip(input.shape, var.shape) if i != v) != 1:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var + (var.clamp(min=eps) - var).detach()
    difference = input - target
    loss = (var.log() + difference * difference / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin=1.0,
    p=2,
    eps=1e-6,
    swap=False,
    size_average=None,
    reduce=None,
    reduction="mean",
):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise_distance; `swap` takes the
    nearer of the negative to the anchor and to the positive."""
    reduction = _reduction(size_average, reduce, reduction)
    return _triplet(anchor, positive, negative, lambda x, y: pairwise_distance(x, y, p, eps), margin, swap, reduction)


def triplet_margin_with_distance_loss(
    anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False, reduction="mean"
):
    """triplet_margin_loss with the distances `distance_function` gives (pairwise_distance by default)."""
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    distance = pairwise_distance if distance_function is None else distance_function
    return _triplet(anchor, positive, negative, distance, margin, swap, _reduction(None, None, reduction))


def _triplet(anchor, positive, negative, distance, margin, swap, reduction):
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number of dimensions, but "
            f"got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative {negative.ndim}D inputs"
        )
    near, far = distance(anchor, positive), distance(anchor, negative)
    if swap:
        far = _ns(anchor).minimum(far, distance(positive, negative))
    return _reduce((near - far + margin).clamp(min=0), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """The logistic loss of each class (target 0 or 1), times `weight`, averaged over the classes."""
    reduction = _reduction(size_average, reduce, reduction)
    loss = target * _softplus_of_negative(input) + (1 - target) * _softplus_of_negative(-input)
    if weight is not None:
        loss = loss * weight
    dim = input.ndim - 1
    return _reduce(loss.sum(dim) / input.shape[dim], reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """The sum over the target classes j (target's entries before its first -1, int64, shaped as input: [N, C] or
    [C]) and the other classes i of max(0, 1 - (x[j] - x[i])), over the classes."""
    reduction = _reduction(size_average, reduce, reduction)
    if target.dtype != numpy.int64:
        raise RuntimeError(f"expected scalar type Long but found {_type_name(target.dtype)}")
    if tuple(target.shape) != tuple(input.shape) or input.ndim > 2:
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: {list(input.shape)}")
    listed = (target >= 0).cumprod(-1) > 0
    counts = ((target.unsqueeze(-1) == _ns(input).arange(input.shape[-1])) & listed.unsqueeze(-1)).sum(-2)
    hinge = (1 - input.unsqueeze(-1) + input.unsqueeze(-2)).clamp(min=0)  # [..., j, i]
    loss = (hinge * (counts.unsqueeze(-1) * (counts == 0).unsqueeze(-2))).sum((-2, -1)) / input.shape[-1]
    return _reduce(loss, reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
    """sum over the classes i != y of max(0, margin - x[y] + x[i]) ** p (times weight[y]), over the classes,
    for [N, C] (or [C]) input and class-index targets; p 1 or 2."""
    reduction = _reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    ns = _ns(input)
    rows = input if input.ndim == 2 else input.reshape((1, -1))
    classes = rows.shape[1]
    targets = target.reshape((-1, 1))
    if targets.shape[0] != rows.shape[0] or (input.ndim == 2 and target.ndim != 1):
        raise RuntimeError(
            "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch "
            f"size). Expected target size [{rows.shape[0]}], but got {list(target.shape)}. Input has shape "
            f"{list(input.shape)}."
        )
    z = rows - rows.gather(1, targets) + margin
    z = ns.where((z > 0) & (targets != ns.arange(classes).reshape((1, -1))), z, 0.0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight[targets]
    loss = z.sum(1) / classes
    return _reduce(loss if input.ndim == 2 else loss.reshape(()), reduction)

"""`F.ctc_loss`: the connectionist temporal classification loss, composed of registry ops, so a client records it.

The forward (alpha) recursion of Graves et al. runs in log space over the time steps, one logsumexp per step over
each extended label's three predecessors (itself, the one before, and the one two before where the labels differ);
the loss of a batch element is read at its input length from the stacked steps, so its later steps get no gradient.
Gradients come from autograd. An impossible alignment is a finite sentinel (`_NEVER`) inside the recursion, so no
logsumexp sees only -inf (whose gradient is nan), and becomes PyTorch's inf loss at the end.

PyTorch's values, errors and gradient: its kernel's gradient for `log_probs` is the true one plus exp(log_probs)
over each element's input length (which log_softmax's backward cancels; `_torchs_gradient`), nan there for an
infinite loss and at -inf log_probs, and zero for a loss that `zero_infinity` zeroes. The lengths' values are read, on a client too (free
for lengths given as data, one fetch for computed ones), for PyTorch's checks and the longest target; the targets'
and log_probs' values never are: masks come from comparisons of positions with the lengths."""

from __future__ import annotations

import operator

import numpy

from engine.nn.sides import _ns, _type_name

__all__ = ["ctc_loss"]

_NEVER = -1e30  # log of an impossible path's probability, finite (exp of it is 0 in float32 and float64)
_CHECKED = " (while checking arguments for ctc_loss_allocate_outputs)"
_SIGNATURES = (
    "\n * (Tensor log_probs, Tensor targets, tuple of ints input_lengths, tuple of ints target_lengths, int blank = 0,"
    " int reduction = at::Reduction::Mean, bool zero_infinity = False)"
    "\n * (Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, int blank = 0,"
    " int reduction = at::Reduction::Mean, bool zero_infinity = False)"
)


def _is_tensor(value) -> bool:
    return hasattr(value, "requires_grad")


def _lengths(input_lengths, target_lengths, blank):
    """(input lengths, target lengths) as lists of ints, PyTorch's argument errors raised first."""
    pair = (input_lengths, target_lengths)
    tensors = all(_is_tensor(a) for a in pair)
    ints = all(isinstance(a, (tuple, list)) and all(hasattr(n, "__index__") for n in a) for a in pair)
    if not (tensors or ints) or not isinstance(blank, int):
        got = ", ".join("Tensor" if _is_tensor(a) else type(a).__name__ for a in (*pair, blank))
        raise TypeError(
            f"ctc_loss() received an invalid combination of arguments - got (Tensor, Tensor, {got}, int, bool), but "
            f"expected one of:{_SIGNATURES}"
        )
    for name, lengths in zip(("input_lengths", "target_lengths"), pair) if tensors else ():
        if lengths.dtype.kind not in "iu":
            raise RuntimeError(f"{name} must be integral")
    return [numpy.ravel(a.tolist()).tolist() if tensors else [operator.index(n) for n in a] for a in pair]


def _check(log_probs, targets, input_lengths, target_lengths, blank):
    """PyTorch's checks, in its order (log_probs already (T, N, C))."""
    if log_probs.dtype.kind != "f" or log_probs.dtype.itemsize < 4:
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{_type_name(log_probs.dtype)}'")
    if log_probs.ndim != 3:
        raise RuntimeError(
            f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional tensor for argument #1 'log_probs'"
            + _CHECKED
        )
    if targets.ndim not in (1, 2):
        raise RuntimeError(
            f"Expected 1 to 2 dimensions, but got {targets.ndim}-dimensional tensor for argument #2 'targets'"
            + _CHECKED
        )
    length, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if len(lengths) != batch:
            raise RuntimeError(f"{name} must be of size batch_size")
    _check_targets(targets, target_lengths, batch)
    for n in input_lengths:
        if not 0 <= n <= length:
            bound = "least 0" if n < 0 else f"most {length}"
            raise RuntimeError(f"Expected input_lengths to have value at {bound}, but got value {n}{_CHECKED}")


def _check_targets(targets, target_lengths, batch):
    for n in target_lengths:
        if n < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {n}{_CHECKED}")

    def size(expected, dim, got, at_least=""):
        return RuntimeError(
            f"Expected tensor to have size {at_least}{expected} at dimension {dim}, but got size {got} for argument #2 "
            f"'targets'{_CHECKED}"
        )

    if targets.ndim == 1:
        if targets.shape[0] != sum(target_lengths):
            raise size(sum(target_lengths), 0, targets.shape[0])
        return
    if targets.shape[0] != batch:
        raise size(batch, 0, targets.shape[0])
    longest = max(target_lengths, default=0)
    if targets.shape[1] < longest:
        raise size(longest, 1, targets.shape[1], "at least ")


def _extended(ns, targets, target_lengths, longest, blank):
    """(N, 2S + 1) labels: blank, the first target, blank, the second... (S the longest target; blanks after the
    end of each), taken from padded (N, S') or concatenated targets by position, without reading them."""
    position = ns.arange(longest)
    within = position < target_lengths.unsqueeze(1)  # (N, S)
    if targets.ndim == 2:
        labels = targets[:, :longest]
    else:
        starts = target_lengths.cumsum(0) - target_lengths
        labels = targets[ns.where(within, starts.unsqueeze(1) + position, 0)]
    labels = ns.where(within, labels.long(), blank)
    s = numpy.arange(2 * longest + 1)
    odd = ns.tensor(s % 2 == 1)
    return ns.where(odd, labels.index_select(1, ns.tensor(numpy.maximum(s - 1, 0) // 2)), blank)


def _alpha_steps(ns, log_probs, labels):
    """The log alpha of every extended label after 0, 1, ..., T steps: (T + 1, N, L)."""
    length, batch, _ = log_probs.shape
    width = labels.shape[1]
    s = numpy.arange(width)
    picked = log_probs.gather(2, labels.unsqueeze(0).expand(length, batch, width)).clamp(min=_NEVER)
    differs = labels != labels.index_select(1, ns.tensor(numpy.maximum(s - 2, 0)))  # (N, L)
    rows = numpy.stack([s >= 0, s >= 1, s >= 2])  # from s, s - 1, s - 2 (the last where the labels differ)
    allowed = ns.tensor(rows) & (differs.unsqueeze(1) | ns.tensor(numpy.arange(3) < 2).reshape(3, 1))
    barrier = ns.where(allowed, 0.0, _NEVER).to(log_probs.dtype)  # (N, 3, L)
    predecessors = ns.tensor(numpy.stack([s, numpy.maximum(s - 1, 0), numpy.maximum(s - 2, 0)]))
    start = numpy.full((batch, width), _NEVER)
    start[:, 0] = 0.0  # before the first step: at the leading blank, with probability 1
    alpha = ns.tensor(start.astype(numpy.dtype(log_probs.dtype)))
    steps = [alpha]
    for t in range(length):
        alpha = (alpha[:, predecessors] + barrier).logsumexp(1) + picked[t]
        steps.append(alpha)
    return ns.stack(steps, 0)


def _torchs_gradient(ns, log_probs, within, impossible, zero_infinity):
    """Zero, with PyTorch's gradient beyond the true one where t is within the input length: exp(log_probs), and
    nan at -inf log_probs and (unless zero_infinity zeroes them) for the impossible alignments. The branch a
    `where` leaves out, times nan, makes its zero gradient nan without an overflow (so without numpy's warning)."""
    taken = ns.where(within, log_probs.exp(), 0.0)
    extra = ns.where(impossible, 0.0, (taken - taken.detach()).sum((0, 2)))
    never, infinite = log_probs == float("-inf"), impossible.reshape(1, -1, 1)
    poisoned = within & (never & ~infinite if zero_infinity else never | infinite)
    nan = ns.where(poisoned, float("nan"), 0.0).to(log_probs.dtype)
    return extra + ns.where(poisoned, 0.0, taken * nan).sum((0, 2))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """-log p(target | log_probs) summed over the alignments, for (T, N, C) (or (T, C)) log_probs, padded (N, S) or
    concatenated targets, lengths as tensors or sequences of ints; 'mean' divides each by its target length
    (at least 1) first; `zero_infinity` zeroes the infinite losses and their gradients."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    lengths = _lengths(input_lengths, target_lengths, blank)
    batched = log_probs.ndim == 3
    log_probs = log_probs if batched else log_probs.unsqueeze(1)
    _check(log_probs, targets, *lengths, blank)
    ns = _ns(log_probs)
    steps_in, lengths_of_targets = (
        (given.reshape(-1).long() if _is_tensor(given) else ns.tensor(values, dtype=ns.int64))
        for given, values in zip((input_lengths, target_lengths), lengths)
    )
    longest = max(lengths[1], default=0)
    labels = _extended(ns, targets, lengths_of_targets, longest, blank)
    steps = _alpha_steps(ns, log_probs, labels)
    length, batch, _ = log_probs.shape
    width = labels.shape[1]
    last = steps.gather(0, steps_in.reshape(1, batch, 1).expand(1, batch, width)).squeeze(0)  # (N, L)
    ends = ns.tensor(numpy.arange(width)).unsqueeze(0)
    double = (lengths_of_targets * 2).unsqueeze(1)
    likelihood = ns.where((ends == double) | (ends == double - 1), last, _NEVER).logsumexp(1)
    impossible = likelihood.detach() < _NEVER / 2
    within = ns.arange(length).reshape(length, 1, 1) < steps_in.reshape(1, batch, 1)
    loss = ns.where(impossible, 0.0 if zero_infinity else float("inf"), -likelihood)
    loss = loss + _torchs_gradient(ns, log_probs, within, impossible, zero_infinity)
    if reduction == "mean":
        return (loss / lengths_of_targets.to(loss.dtype).clamp(min=1)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss if batched else loss.squeeze(0)

"""`F.embedding_bag`: the sums, means or maxima of bags of embedding rows. It is written with the sides' ops:
a bag's members are found by comparing positions with the offsets, so a client's indices and offsets are
recorded, never fetched. The (bags x indices) membership matrix is what it allocates beyond the rows."""

from __future__ import annotations

from engine.nn.sides import _ns, _type_name

__all__ = ["embedding_bag"]

PER_SAMPLE_MESSAGE = (
    "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
    "(got mode='{mode}'). Please open a feature request on GitHub."
)


def embedding_bag(
    input,
    weight,
    offsets=None,
    max_norm=None,
    norm_type=2,
    scale_grad_by_freq=False,
    mode="mean",
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=None,
):
    """Per bag, the sum, mean or max of weight's rows at its indices: the rows of a 2-d input, or the runs of a
    1-d input that `offsets` start (`include_last_offset`: its last entry ends the last bag). Indices equal to
    `padding_idx` are left out (of a mean's count too); an empty bag gives zeros. A max's gradient goes to every
    row that ties for it (PyTorch's to one of them)."""
    ns = _ns(weight)
    if input.dtype.kind not in "iu":
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; "
            f"but got {_type_name(input.dtype)}Tensor instead (while checking arguments for embedding_bag)"
        )
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag: scale_grad_by_freq and sparse are not supported")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(PER_SAMPLE_MESSAGE.format(mode=mode))
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed length "
                f"sequences. However, found offsets of type {type(offsets)}"
            )
        bags, length = input.shape
        offsets, include_last_offset = ns.arange(0, bags * length, max(length, 1)), False
        input = input.reshape(-1)
        per_sample_weights = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    elif input.ndim != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    elif offsets is None or offsets.ndim != 1:
        raise ValueError(f"offsets has to be a 1D Tensor but got {'None' if offsets is None else offsets.ndim}")
    count = input.shape[0]
    if include_last_offset:
        starts, ends = offsets[:-1], offsets[1:]
    else:
        starts, ends = offsets, ns.cat([offsets[1:], ns.tensor([count], dtype=offsets.dtype)])
    position = ns.arange(count)
    member = (position >= starts.unsqueeze(1)) & (position < ends.unsqueeze(1))  # (bags, indices)
    if padding_idx is not None:
        member = member & (input != padding_idx % weight.shape[0])
    if max_norm is not None:  # (torch renormalises every row the input names, padding_idx's too)
        renormalised(input, weight, max_norm, norm_type)
    rows = weight[input]
    if mode == "max":
        picked = ns.where(member.unsqueeze(-1), rows.unsqueeze(0), float("-inf")).amax(1)
        return ns.where(member.any(1, keepdim=True), picked, 0.0)
    share = member.to(weight.dtype)
    if per_sample_weights is not None:
        share = share * per_sample_weights
    if mode == "mean":
        share = share / share.sum(1, keepdim=True).clamp(min=1)
    return share.matmul(rows)


def renormalised(input, weight, max_norm, norm_type):
    """PyTorch's `embedding_renorm_`: the rows of weight that input names, with a norm over max_norm, scaled in
    place (under no_grad) to max_norm / (norm + 1e-7)."""
    ns = _ns(weight)
    with ns.no_grad():
        index = input.reshape(-1)
        rows = weight[index]
        norms = ns.linalg.vector_norm(rows, norm_type, dim=1, keepdim=True)
        weight[index] = rows * ns.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).to(weight.dtype)
